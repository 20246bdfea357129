//! PUT /v1/stream/{name}: create a stream, or confirm an identical one exists.
//!
//! 201 with `Location` when created, 200 when a stream with the same content type, TTL,
//! expiry and closed state exists, 409 when one exists with anything else. An optional body
//! becomes the first messages (for JSON streams `[]` means none).

use ds_engine::ContentType;
use ds_engine::{CreateRequest, StreamConfig, StreamName};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HOST, LOCATION};
use hyper::{Request, Response, StatusCode};

use super::{op_problem, payload_of};
use crate::app::App;
use crate::http::headers::{self, STREAM_CLOSED, STREAM_NEXT_OFFSET};
use crate::http::problem::Problem;
use crate::http::request_body;
use crate::http::response::{response, set, Body};
use crate::metrics::Metrics;

pub async fn create(
    app: &App,
    name: StreamName,
    request: Request<Incoming>,
) -> Result<Response<Body>, Problem> {
    let (parts, body) = request.into_parts();
    let (config, closed) = match judge_head(&parts.headers) {
        Ok(head) => head,
        Err(problem) => return Err(request_body::refuse_unread(body, &parts.headers, problem).await),
    };
    let (body, _held) = request_body::read(body, &parts.headers, &app.body).await?;
    let body_bytes = body.len() as u64;
    let initial = payload_of(&config.content_type, body, true)?;
    let request = CreateRequest { name, config, initial, closed };
    let outcome = app.engine.create(request).await.map_err(op_problem)?;

    if outcome.created {
        Metrics::add(&app.metrics.append_bytes, body_bytes);
    }
    let status = if outcome.created { StatusCode::CREATED } else { StatusCode::OK };
    let mut reply = response(status, Body::Empty);
    let headers = reply.headers_mut();
    set(headers, CONTENT_TYPE, outcome.content_type.as_str());
    headers.insert(STREAM_NEXT_OFFSET, headers::offset_value(outcome.tail));
    if outcome.closed {
        headers.insert(STREAM_CLOSED, headers::TRUE);
    }
    if outcome.created {
        let host = parts.headers.get(HOST).and_then(|h| h.to_str().ok()).filter(|h| is_authority(h));
        let location = format!("{}://{}{}", app.scheme, host.unwrap_or("localhost"), parts.uri.path());
        set(headers, LOCATION, &location);
    }
    Ok(reply)
}

/// The stream's configuration and closed flag, as the headers give them.
fn judge_head(headers: &hyper::HeaderMap) -> Result<(StreamConfig, bool), Problem> {
    let content_type = headers::content_type(headers)?.unwrap_or_else(ContentType::default_type);
    let ttl_secs = headers::ttl_secs(headers)?;
    let expires_at_ms = headers::expires_at_ms(headers)?;
    if ttl_secs.is_some() && expires_at_ms.is_some() {
        return Err(Problem::bad_request("ttl-and-expiry", "give Stream-TTL or Stream-Expires-At, not both"));
    }
    let closed = headers::stream_closed(headers)?;
    Ok((StreamConfig { content_type, ttl_secs, expires_at_ms }, closed))
}

/// Whether `host` is a plain `host[:port]` (a name, an IPv4 or a bracketed IPv6 address):
/// anything else in `Host` never reaches `Location`, where it could point a client
/// elsewhere (`evil.example/phish?`).
fn is_authority(host: &str) -> bool {
    let (name, port) = match host.rsplit_once(':') {
        Some((name, _)) if !name.ends_with(']') && name.contains(':') => (host, None),
        Some((name, port)) => (name, Some(port)),
        None => (host, None),
    };
    let port_ok = port
        .is_none_or(|port| !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit()));
    let name_ok = match name.strip_prefix('[').and_then(|inner| inner.strip_suffix(']')) {
        Some(address) => {
            !address.is_empty() && address.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        }
        None => {
            !name.is_empty()
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
        }
    };
    port_ok && name_ok
}

#[cfg(test)]
mod tests {
    use super::is_authority;

    #[test]
    fn only_plain_authorities_reach_location() {
        for good in
            ["localhost", "example.com:8080", "10.0.0.1:4437", "[::1]:4437", "[fe80::1]", "a_b.example"]
        {
            assert!(is_authority(good), "{good}");
        }
        for bad in ["evil.example/phish?", "a@b", "x:y", "example.com:", "[::1", "", "a b", "host:123456"] {
            assert!(!is_authority(bad), "{bad}");
        }
    }
}
