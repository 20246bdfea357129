//! The answer to a request head refused before any route sees it: its status, a short
//! `application/problem+json` body, the headers every answer carries, and
//! `Connection: close` (what follows a head that cannot be read cannot be read either).

use bytes::Bytes;
use hyper::StatusCode;

/// A complete answer of `status` and the length of its problem document.
pub(crate) fn refusal(status: StatusCode) -> (Bytes, usize) {
    let (kind, detail) = match status {
        StatusCode::URI_TOO_LONG => ("uri-too-long", "the request line is too long"),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => {
            ("head-too-large", "the request head is too large or has too many headers")
        }
        _ => ("malformed-request", "the request could not be parsed as HTTP/1.1"),
    };
    let reason = status.canonical_reason().unwrap_or("Error");
    let body = format!(
        "{{\"type\":\"urn:ds:problem:{kind}\",\"title\":\"{reason}\",\"status\":{},\"detail\":\"{detail}\"}}",
        status.as_u16()
    );
    let answer = Bytes::from(format!(
        "HTTP/1.1 {} {reason}\r\ncontent-type: application/problem+json\r\ncache-control: no-store\r\n\
         x-content-type-options: nosniff\r\ncross-origin-resource-policy: cross-origin\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        status.as_u16(),
        body.len()
    ));
    (answer, body.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_complete_problem_documents() {
        let (answer, body_bytes) = refusal(StatusCode::URI_TOO_LONG);
        let text = std::str::from_utf8(&answer).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(body.len(), body_bytes);
        assert!(head.starts_with("HTTP/1.1 414 URI Too Long\r\n"), "{head}");
        assert!(head.contains(&format!("content-length: {}", body.len())));
        assert!(head.contains("x-content-type-options: nosniff") && head.contains("cache-control: no-store"));
        let document: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(document["status"], 414);
        assert_eq!(document["type"], "urn:ds:problem:uri-too-long");
    }
}
