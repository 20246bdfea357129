//! Response bodies and the headers every response carries.
//!
//! [`Body`] is the one body type of the server: empty, a single buffer, a list of zero-copy
//! slices of stored messages (exact length known, so hyper sends `Content-Length`), or a
//! live stream (SSE, no length). [`finish`] adds the headers the spec puts on every response.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CACHE_CONTROL};
use hyper::{Response, StatusCode};

use super::cors::CorsPolicy;

/// A live response body produced while it is sent (SSE).
pub type LiveBody = Pin<Box<dyn http_body::Body<Data = Bytes, Error = Infallible> + Send>>;

/// Every response body of the server.
pub enum Body {
    Empty,
    Full(Option<Bytes>),
    /// Slices sent in order; the total length is known.
    Slices {
        slices: VecDeque<Bytes>,
        remaining: u64,
    },
    Live(LiveBody),
}

impl Body {
    pub fn full(bytes: impl Into<Bytes>) -> Body {
        Body::Full(Some(bytes.into()))
    }

    pub fn slices(slices: Vec<Bytes>) -> Body {
        let remaining = slices.iter().map(|s| s.len() as u64).sum();
        Body::Slices { slices: slices.into_iter().filter(|s| !s.is_empty()).collect(), remaining }
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match &mut *self {
            Body::Empty => Poll::Ready(None),
            Body::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Body::Slices { slices, remaining } => {
                let next = slices.pop_front();
                if let Some(slice) = &next {
                    *remaining -= slice.len() as u64;
                }
                Poll::Ready(next.map(|slice| Ok(Frame::data(slice))))
            }
            Body::Live(body) => body.as_mut().poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Body::Empty => true,
            Body::Full(bytes) => bytes.is_none(),
            Body::Slices { remaining, .. } => *remaining == 0,
            Body::Live(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Empty => SizeHint::with_exact(0),
            Body::Full(bytes) => SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64)),
            Body::Slices { remaining, .. } => SizeHint::with_exact(*remaining),
            Body::Live(body) => body.size_hint(),
        }
    }
}

/// A response with `status`, `body` and no headers yet.
pub fn response(status: StatusCode, body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
}

/// Sets a header whose value is known to be valid.
pub fn set(headers: &mut HeaderMap, name: HeaderName, value: &str) {
    match HeaderValue::from_str(value) {
        Ok(value) => {
            headers.insert(name, value);
        }
        Err(_) => debug_assert!(false, "invalid header value for {name}: {value:?}"),
    }
}

const X_CONTENT_TYPE_OPTIONS: HeaderName = HeaderName::from_static("x-content-type-options");
const CROSS_ORIGIN_RESOURCE_POLICY: HeaderName = HeaderName::from_static("cross-origin-resource-policy");

/// Adds the headers of every response: caching, sniffing, resource policy and CORS.
pub fn finish(response: &mut Response<Body>, cors: &CorsPolicy, origin: Option<&HeaderValue>) {
    let headers = response.headers_mut();
    if !headers.contains_key(CACHE_CONTROL) {
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(CROSS_ORIGIN_RESOURCE_POLICY, HeaderValue::from_static("cross-origin"));
    cors.apply(origin, headers);
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn slices_report_their_exact_length() {
        let body = Body::slices(vec![Bytes::from_static(b"ab"), Bytes::new(), Bytes::from_static(b"cde")]);
        assert_eq!(body.size_hint().exact(), Some(5));
        assert_eq!(&body.collect().await.unwrap().to_bytes()[..], b"abcde");
        assert!(Body::slices(vec![]).is_end_stream());
    }

    #[test]
    fn common_headers_keep_an_explicit_cache_control() {
        let mut plain = response(StatusCode::OK, Body::Empty);
        finish(&mut plain, &CorsPolicy::AnyOrigin, Some(&HeaderValue::from_static("https://a.example")));
        assert_eq!(plain.headers()[CACHE_CONTROL], "no-store");
        assert_eq!(plain.headers()["x-content-type-options"], "nosniff");
        assert_eq!(plain.headers()["cross-origin-resource-policy"], "cross-origin");
        assert_eq!(plain.headers()["access-control-allow-origin"], "*");
        let mut sse = response(StatusCode::OK, Body::Empty);
        sse.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        finish(&mut sse, &CorsPolicy::AnyOrigin, None);
        assert_eq!(sse.headers()[CACHE_CONTROL], "no-cache");
    }
}
