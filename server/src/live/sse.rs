//! `live=sse`: the answer, and a response body that pulls events from the stream as the
//! client drains it.
//!
//! [`serve`] checks the start and answers 200 with an [`SseBody`]. The body holds no queue:
//! its writer polls it when the socket can take more, and each poll sends at most one frame
//! (`crate::events::frame`, up to `FRAME_STORED_BYTES_MAX` stored bytes), so a slow client
//! only slows itself. The frames come from the reader's step (`super::sse_reader`), which
//! touches the stream only when the tail its live slot recorded at the last commit says there
//! is something new. The bare front takes the reader out of the body (`SseBody::hand_off`)
//! and writes and parks it itself (`crate::serve::bare`); under hyper (TLS, or a connection
//! handed to hyper) the body waits itself: on the tail notification (enabled before each look;
//! the shutdown fires it too) and on the idle timer, both made at its first wait. The answer
//! ends after the control event that reports a closed stream, when the stream is deleted,
//! after `DS_SERVER__SSE_RECONNECT_INTERVAL_SECS` without data, or at shutdown.

use std::any::Any;
use std::convert::Infallible;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use ds_engine::{Offset, StartAt, StreamHandle};
use http_body::Frame;
use hyper::header::{HeaderName, HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use tokio::time::Sleep;

use super::sse_reader::{SseHandoff, SseReader, SseStream, Step, StepClock, TailWatch};
use crate::app::App;
use crate::events::event::{EventFormat, SseEncoding};
use crate::http::headers::STREAM_SSE_DATA_ENCODING;
use crate::http::problem::Problem;
use crate::http::read_reply::{read_problem, ReadStart};
use crate::http::response::{response, Body, LiveSource};

/// Tells nginx-style proxies not to buffer the event stream.
const X_ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");

/// Starts an SSE response at `start` (400 when it is not a message boundary).
pub(crate) fn serve(
    app: &Arc<App>,
    handle: StreamHandle,
    start: ReadStart,
    client_cursor: Option<String>,
) -> Result<Response<Body>, Problem> {
    let status = handle.status().ok_or_else(Problem::not_found)?;
    let from = match start.at {
        StartAt::Beginning => Offset::ZERO,
        StartAt::Tail => status.tail,
        StartAt::At(offset) => offset,
    };
    // Check the start before answering 200, and renew the TTL: a live read has started.
    handle
        .read_messages(from, 0)
        .map_err(|error| read_problem(error, &start.text))?
        .ok_or_else(Problem::not_found)?;
    handle.touch();
    let format = EventFormat::of(&handle.config().content_type);
    let reader = SseReader::new(Arc::clone(&app.metrics), from, client_cursor.map(Arc::from));
    let stream = Arc::new(SseStream::new(Arc::clone(app), handle, format));
    let body = SseBody { stream, reader: Some(reader), wait: None };
    let mut reply = response(StatusCode::OK, Body::Live(Box::pin(body)));
    let headers = reply.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(X_ACCEL_BUFFERING, HeaderValue::from_static("no"));
    if format.encoding == SseEncoding::Base64 {
        headers.insert(STREAM_SSE_DATA_ENCODING, HeaderValue::from_static("base64"));
    }
    Ok(reply)
}

/// The body of one SSE response.
pub(crate) struct SseBody {
    stream: Arc<SseStream>,
    /// `None` once the answer ended or was handed off.
    reader: Option<SseReader>,
    /// Made at the first wait.
    wait: Option<Box<TailWait>>,
}

/// What a body waits on when it has nothing to send.
struct TailWait {
    tail: TailWatch,
    idle: Option<Pin<Box<Sleep>>>,
}

impl TailWait {
    fn new(stream: &SseStream, reader: &SseReader) -> TailWait {
        TailWait {
            tail: TailWatch::new(&stream.handle),
            idle: reader.idle_deadline(stream).map(|deadline| Box::pin(tokio::time::sleep_until(deadline))),
        }
    }

    /// True once the reader went a whole interval without data (registers for a wake
    /// otherwise).
    fn idle_expired(&mut self, stream: &SseStream, reader: &SseReader, cx: &mut Context<'_>) -> bool {
        let (Some(sleep), Some(deadline)) = (self.idle.as_mut(), reader.idle_deadline(stream)) else {
            return false;
        };
        while sleep.as_mut().poll(cx).is_ready() {
            if tokio::time::Instant::now() >= deadline {
                return true;
            }
            sleep.as_mut().reset(deadline);
        }
        false
    }
}

impl http_body::Body for SseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        let Some(reader) = this.reader.as_mut() else { return Poll::Ready(None) };
        let wait = this.wait.get_or_insert_with(|| Box::new(TailWait::new(&this.stream, reader)));
        let ended = loop {
            // Armed before the look (`TailWatch::fired`).
            let fired = wait.tail.fired(cx);
            if reader.wants_step(wait.tail.tail(), &this.stream) {
                match reader.step(&this.stream, StepClock::now()) {
                    Step::Frame(frame) => return Poll::Ready(Some(Ok(Frame::data(frame)))),
                    Step::End => break true,
                    Step::Nothing => {}
                }
            }
            if !fired {
                break wait.idle_expired(&this.stream, reader, cx);
            }
        };
        if !ended {
            return Poll::Pending;
        }
        this.reader = None;
        this.wait = None;
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.reader.is_none()
    }
}

impl LiveSource for SseBody {
    fn hand_off(self: Pin<&mut Self>) -> Option<Box<dyn Any + Send>> {
        let this = self.get_mut();
        let reader = this.reader.take()?;
        Some(Box::new(SseHandoff { stream: Arc::clone(&this.stream), reader }))
    }
}
