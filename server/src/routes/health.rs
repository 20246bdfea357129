//! GET /healthz: 200 `ok` while the server runs (no authentication, no engine call).

use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Response, StatusCode};

use crate::http::problem::Problem;
use crate::http::response::{response, Body};

pub(crate) fn health(method: &Method) -> Result<Response<Body>, Problem> {
    if method != Method::GET && method != Method::HEAD {
        return Err(Problem::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            format!("{method} is not allowed on /healthz"),
        )
        .with_header(ALLOW, HeaderValue::from_static("GET, HEAD")));
    }
    let mut reply = response(StatusCode::OK, Body::full(&b"ok"[..]));
    reply.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    Ok(reply)
}
