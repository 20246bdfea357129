//! HEAD /v1/stream/{name}: a stream's metadata without a body.
//!
//! Tail offset, content type, closed flag, remaining TTL (whole seconds, rounded up) and
//! absolute expiry. HEAD does not renew the TTL.

use ds_engine::format_rfc3339_ms;
use ds_engine::StreamName;
use hyper::header::CONTENT_TYPE;
use hyper::{Response, StatusCode};

use crate::app::App;
use crate::http::headers::{self, STREAM_CLOSED, STREAM_EXPIRES_AT, STREAM_NEXT_OFFSET, STREAM_TTL};
use crate::http::problem::Problem;
use crate::http::response::{response, set, Body};

pub(crate) fn head(app: &App, name: &StreamName) -> Result<Response<Body>, Problem> {
    let handle = super::open_stream(app, name)?;
    let status = handle.status().ok_or_else(Problem::not_found)?;
    let mut reply = response(StatusCode::OK, Body::Empty);
    let headers = reply.headers_mut();
    set(headers, CONTENT_TYPE, handle.config().content_type.as_str());
    headers.insert(STREAM_NEXT_OFFSET, headers::offset_value(status.tail));
    if status.closed {
        headers.insert(STREAM_CLOSED, headers::TRUE);
    }
    if let Some(remaining) = handle.ttl_remaining_secs() {
        headers.insert(STREAM_TTL, headers::number_value(remaining));
    }
    if let Some(expires_at_ms) = handle.config().expires_at_ms {
        set(headers, STREAM_EXPIRES_AT, &format_rfc3339_ms(expires_at_ms));
    }
    Ok(reply)
}
