//! Error responses: a status and a short `application/problem+json` body, made in one place.
//!
//! Every refusal the server gives — from header parsing, the engine or routing — becomes a
//! [`Problem`], so each error has the same shape: `type` (a stable URN naming the problem),
//! `title` (the status's reason phrase), `status` and `detail` (one sentence for a human),
//! plus any protocol headers the error must carry (such as `Stream-Closed`).

use hyper::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use serde_json::json;

use super::response::Body;

/// An HTTP error with its problem document.
#[derive(Debug)]
pub(crate) struct Problem {
    status: StatusCode,
    kind: &'static str,
    detail: String,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl Problem {
    /// A problem of status `status`; `kind` is a short slug such as `invalid-offset`.
    pub(crate) fn new(status: StatusCode, kind: &'static str, detail: impl Into<String>) -> Problem {
        Problem { status, kind, detail: detail.into(), headers: Vec::new() }
    }

    pub(crate) fn bad_request(kind: &'static str, detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::BAD_REQUEST, kind, detail)
    }

    pub(crate) fn not_found() -> Problem {
        Problem::new(StatusCode::NOT_FOUND, "not-found", "stream not found")
    }

    /// Adds a header the error response must carry.
    pub(crate) fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Problem {
        self.headers.push((name, value));
        self
    }

    pub(crate) fn into_response(self) -> Response<Body> {
        let document = json!({
            "type": format!("urn:ds:problem:{}", self.kind),
            "title": self.status.canonical_reason().unwrap_or("Error"),
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        let body = serde_json::to_vec(&document).expect("a JSON object always serializes");
        let mut response = Response::new(Body::full(body));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        for (name, value) in self.headers {
            headers.insert(name, value);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn renders_a_problem_document_with_headers() {
        let problem = Problem::new(StatusCode::CONFLICT, "stream-closed", "stream is closed")
            .with_header(HeaderName::from_static("stream-closed"), HeaderValue::from_static("true"));
        let response = problem.into_response();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert_eq!(response.headers()[CONTENT_TYPE], "application/problem+json");
        assert_eq!(response.headers()["stream-closed"], "true");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let document: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(document["type"], "urn:ds:problem:stream-closed");
        assert_eq!(document["title"], "Conflict");
        assert_eq!(document["status"], 409);
        assert_eq!(document["detail"], "stream is closed");
    }
}
