//! OPTIONS on a stream: the CORS preflight answer (204).

use hyper::header::{HeaderValue, ALLOW};
use hyper::{Response, StatusCode};

use crate::http::cors::{ALLOWED_HEADERS, ALLOWED_METHODS, PREFLIGHT_MAX_AGE_SECS};
use crate::http::response::{response, Body};

pub(crate) fn preflight() -> Response<Body> {
    let mut reply = response(StatusCode::NO_CONTENT, Body::Empty);
    let headers = reply.headers_mut();
    headers.insert(ALLOW, HeaderValue::from_static(ALLOWED_METHODS));
    headers.insert("access-control-allow-methods", HeaderValue::from_static(ALLOWED_METHODS));
    headers.insert("access-control-allow-headers", HeaderValue::from_static(ALLOWED_HEADERS));
    headers.insert("access-control-max-age", HeaderValue::from_static(PREFLIGHT_MAX_AGE_SECS));
    reply
}
