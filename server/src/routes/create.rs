//! PUT /v1/stream/{name}: create a stream, or confirm an identical one exists.
//!
//! 201 with `Location` when created, 200 when a stream with the same content type, TTL,
//! expiry and closed state exists, 409 when one exists with anything else. An optional body
//! becomes the first messages (for JSON streams `[]` means none).

use ds_engine::content_type::ContentType;
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
    let content_type = headers::content_type(&parts.headers)?.unwrap_or_else(ContentType::default_type);
    let ttl_secs = headers::ttl_secs(&parts.headers)?;
    let expires_at_ms = headers::expires_at_ms(&parts.headers)?;
    if ttl_secs.is_some() && expires_at_ms.is_some() {
        return Err(Problem::bad_request("ttl-and-expiry", "give Stream-TTL or Stream-Expires-At, not both"));
    }
    let closed = headers::stream_closed(&parts.headers)?;
    let body = request_body::read(body, &parts.headers, app.body_bytes_max).await?;
    let body_bytes = body.len() as u64;
    let initial = payload_of(&content_type, body, true)?;
    let config = StreamConfig { content_type, ttl_secs, expires_at_ms };
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
        let host = parts.headers.get(HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
        set(headers, LOCATION, &format!("{}://{host}{}", app.scheme, parts.uri.path()));
    }
    Ok(reply)
}
