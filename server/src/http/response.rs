//! Response bodies and the headers every response carries.
//!
//! [`Body`] is the one body type of the server: empty, a single buffer, a list of zero-copy
//! slices of stored messages (exact length known, so hyper sends `Content-Length`), or a
//! live stream (SSE, no length). [`finish`] adds the headers the spec puts on every response.

use std::any::Any;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http_body::{Frame, SizeHint};
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CACHE_CONTROL};
use hyper::{Response, StatusCode};

use super::cors::CorsPolicy;

/// A live response body produced while it is sent (SSE, a relayed answer).
pub(crate) type LiveBody = Pin<Box<dyn LiveSource>>;

/// A body produced while it is sent, which a front may take over to serve its own way.
pub(crate) trait LiveSource: http_body::Body<Data = Bytes, Error = Infallible> + Send {
    /// Takes the body's state out for a front that writes it itself (the bare front takes
    /// SSE readers, `crate::serve::bare`); the body then ends. `None`: only polled as a body.
    fn hand_off(self: Pin<&mut Self>) -> Option<Box<dyn Any + Send>> {
        None
    }
}

/// Every response body of the server.
pub(crate) enum Body {
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
    pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
        Body::Full(Some(bytes.into()))
    }

    pub(crate) fn slices(slices: Vec<Bytes>) -> Body {
        let remaining = slices.iter().map(|s| s.len() as u64).sum();
        Body::Slices { slices: slices.into_iter().filter(|s| !s.is_empty()).collect(), remaining }
    }
}

/// Most slices, and bytes, one frame of a [`Body::Slices`] carries. A default-sized read
/// answer (4 MiB) is one frame, so memory mode's answer of 64 KiB blocks goes out as one
/// run of `writev`s rather than four, one per 1 MiB frame. That raises catch-up throughput
/// and lowers its tail latency (docs/performance/code-choices.md). Slices are
/// never copied, so a larger frame costs no memory.
const FRAME_SLICES_MAX: usize = 64;
const FRAME_BYTES_MAX: usize = 4 << 20;

/// The data of one frame: one or more slices, written with one `writev` as far as the
/// writer's iovec limit allows. Many small stored messages (one slice each) thus cost a
/// few system calls per megabyte, not one per message, and nothing is copied on the way.
#[derive(Debug, Default)]
pub(crate) struct SliceBuf {
    slices: VecDeque<Bytes>,
    remaining: usize,
}

impl SliceBuf {
    /// Takes slices from the front of `slices` for one frame.
    fn take_frame(slices: &mut VecDeque<Bytes>) -> SliceBuf {
        let mut frame = SliceBuf::default();
        while let Some(front) = slices.front() {
            let full =
                frame.slices.len() == FRAME_SLICES_MAX || frame.remaining + front.len() > FRAME_BYTES_MAX;
            if full && !frame.slices.is_empty() {
                break;
            }
            let slice = slices.pop_front().expect("a front slice");
            if slice.is_empty() {
                // `Buf::chunk` must not come back empty while bytes remain.
                continue;
            }
            frame.remaining += slice.len();
            frame.slices.push_back(slice);
        }
        frame
    }
}

impl SliceBuf {
    /// Takes the first `count` bytes (at most all of them) out as a buffer of their own,
    /// splitting a slice where the cut falls (no bytes copied).
    pub(crate) fn split_to(&mut self, count: usize) -> SliceBuf {
        let count = count.min(self.remaining);
        let mut front = SliceBuf::default();
        while front.remaining < count {
            let slice = self.slices.front_mut().expect("remaining bytes are in slices");
            let wanted = count - front.remaining;
            let piece = if slice.len() <= wanted {
                self.slices.pop_front().expect("a front slice")
            } else {
                slice.split_to(wanted)
            };
            front.remaining += piece.len();
            front.slices.push_back(piece);
        }
        self.remaining -= count;
        debug_assert_eq!(front.remaining, count);
        front
    }
}

impl From<Bytes> for SliceBuf {
    fn from(bytes: Bytes) -> SliceBuf {
        SliceBuf { remaining: bytes.len(), slices: VecDeque::from([bytes]) }
    }
}

impl Buf for SliceBuf {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.slices.front().map_or(&[], |slice| slice.as_ref())
    }

    fn advance(&mut self, mut count: usize) {
        assert!(count <= self.remaining, "cannot advance past the end");
        self.remaining -= count;
        while count > 0 {
            let front = self.slices.front_mut().expect("remaining bytes are in slices");
            if count < front.len() {
                front.advance(count);
                return;
            }
            count -= front.len();
            self.slices.pop_front();
        }
    }

    fn chunks_vectored<'a>(&'a self, slots: &mut [IoSlice<'a>]) -> usize {
        let mut filled = 0;
        for (slot, slice) in slots.iter_mut().zip(&self.slices) {
            *slot = IoSlice::new(slice);
            filled += 1;
        }
        filled
    }
}

impl http_body::Body for Body {
    type Data = SliceBuf;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<SliceBuf>, Infallible>>> {
        match &mut *self {
            Body::Empty => Poll::Ready(None),
            Body::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(SliceBuf::from(b))))),
            Body::Slices { slices, remaining } => {
                if slices.is_empty() {
                    return Poll::Ready(None);
                }
                let frame = SliceBuf::take_frame(slices);
                *remaining -= frame.remaining as u64;
                Poll::Ready(Some(Ok(Frame::data(frame))))
            }
            Body::Live(body) => body
                .as_mut()
                .poll_frame(cx)
                .map(|frame| frame.map(|frame| frame.map(|frame| frame.map_data(SliceBuf::from)))),
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
pub(crate) fn response(status: StatusCode, body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
}

/// Sets a header whose value is known to be valid.
pub(crate) fn set(headers: &mut HeaderMap, name: HeaderName, value: &str) {
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
pub(crate) fn finish(response: &mut Response<Body>, cors: &CorsPolicy, origin: Option<&HeaderValue>) {
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

    #[test]
    fn slice_frames_write_many_slices_at_once_and_advance_across_them() {
        let mut slices: VecDeque<Bytes> = (0..100).map(|i| Bytes::from(vec![i as u8; 10])).collect();
        let mut frame = SliceBuf::take_frame(&mut slices);
        assert_eq!((frame.remaining(), slices.len()), (640, 36), "a frame takes at most 64 slices");
        let mut slots = [IoSlice::new(&[]); 8];
        assert_eq!(frame.chunks_vectored(&mut slots), 8);
        assert_eq!(&*slots[1], &[1u8; 10]);
        frame.advance(15);
        assert_eq!(frame.chunk(), &[1u8; 5]);
        frame.advance(625);
        assert_eq!(frame.remaining(), 0);
        assert!(frame.chunk().is_empty());

        let mut big: VecDeque<Bytes> =
            [Bytes::from(vec![0; FRAME_BYTES_MAX]), Bytes::from_static(b"x")].into();
        assert_eq!(
            SliceBuf::take_frame(&mut big).remaining(),
            FRAME_BYTES_MAX,
            "and at most FRAME_BYTES_MAX"
        );
        assert_eq!(SliceBuf::take_frame(&mut big).remaining(), 1);
    }

    #[test]
    fn a_slice_buffer_splits_anywhere_without_losing_a_byte() {
        let parts = ["abc", "", "defg", "h"].map(|part| Bytes::from_static(part.as_bytes()));
        for cut in 0..=9 {
            let mut rest = SliceBuf::take_frame(&mut VecDeque::from(parts.clone()));
            let mut front = rest.split_to(cut);
            assert_eq!(front.remaining() + rest.remaining(), 8, "cut {cut}");
            let mut joined = front.copy_to_bytes(front.remaining()).to_vec();
            joined.extend_from_slice(&rest.copy_to_bytes(rest.remaining()));
            assert_eq!(joined, b"abcdefgh", "cut {cut}");
        }
    }
}
