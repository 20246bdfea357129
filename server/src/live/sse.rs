//! `live=sse`: a response body that pulls events from the stream as the client drains it.
//!
//! [`SseBody`] holds no queue: hyper polls it when the socket can take more, and each poll
//! sends at most one frame (`crate::events::frame`, up to `FRAME_STORED_BYTES_MAX` stored bytes),
//! so a slow client only slows itself. A poll first looks at the tail its live slot recorded
//! at the last commit and touches the stream only when there is something new. When caught
//! up it waits on the tail notification (enabled before each look; the shutdown fires it
//! too) and on the idle timer, holding no buffer: frames are formatted once per stream and
//! shared (`crate::events::frame`). It
//! ends after the control event that reports a closed stream, when the stream is deleted,
//! after `DS_SERVER__SSE_RECONNECT_INTERVAL_SECS` without data, or at shutdown.

use std::convert::Infallible;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use ds_engine::Subscription;
use ds_engine::{Offset, StartAt, StreamHandle};
use http_body::Frame;
use hyper::header::{HeaderName, HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use tokio::sync::futures::OwnedNotified;
use tokio::time::{Instant, Sleep};

use crate::app::App;
use crate::events::event::{EventFormat, SseEncoding};
use crate::events::frame::{FrameCache, FrameSource, Next};
use crate::http::cursor::response_cursor;
use crate::http::headers::STREAM_SSE_DATA_ENCODING;
use crate::http::problem::Problem;
use crate::http::read_reply::{read_problem, ReadStart};
use crate::http::response::{response, Body};
use crate::metrics::Metrics;
use crate::per_stream::Member;

/// Tells nginx-style proxies not to buffer the event stream.
const X_ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");

/// Where a body starts and how it formats.
struct Start {
    offset: Offset,
    client_cursor: Option<Arc<str>>,
    format: EventFormat,
}

/// Starts an SSE response at `start` (400 when it is not a message boundary).
pub fn serve(
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
    let content_type = &handle.config().content_type;
    let format = EventFormat::of(content_type);
    let start = Start { offset: from, client_cursor: client_cursor.map(Arc::from), format };
    let body = SseBody::new(Arc::clone(app), handle, start);
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

/// Closes the connection after a full interval without data. Data only raises a flag; the
/// timer checks it when it fires, so an idle connection closes after one to two intervals
/// and a busy one costs no timer work per frame.
struct IdleClose {
    interval: Duration,
    data_since_armed: bool,
    sleep: Pin<Box<Sleep>>,
}

impl IdleClose {
    /// True once a whole interval passed without data (registers for a wake otherwise).
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        while self.sleep.as_mut().poll(cx).is_ready() {
            if !std::mem::take(&mut self.data_since_armed) {
                return true;
            }
            self.sleep.as_mut().reset(Instant::now() + self.interval);
        }
        false
    }
}

/// How often a live reader renews the stream's TTL while data flows.
const TOUCH_INTERVAL_MS: u64 = 1000;

/// The body of one SSE response.
pub struct SseBody {
    app: Arc<App>,
    handle: StreamHandle,
    subscription: Subscription,
    /// Frames formatted by the stream's other SSE readers.
    frames: Member<FrameCache>,
    /// The wait for the next tail advance; its allocation is reused for every wait.
    woken: Pin<Box<OwnedNotified>>,
    /// `woken` is enabled and has not fired yet.
    woken_armed: bool,
    idle: Option<IdleClose>,
    offset: Offset,
    client_cursor: Option<Arc<str>>,
    format: EventFormat,
    /// When this reader last renewed the stream's TTL (clock milliseconds).
    touched_ms: u64,
    /// A control event with `upToDate` went out since the reader last fell behind.
    told_up_to_date: bool,
    finished: bool,
}

impl SseBody {
    fn new(app: Arc<App>, handle: StreamHandle, start: Start) -> SseBody {
        let idle = app.sse_idle_close.map(|interval| IdleClose {
            interval,
            data_since_armed: false,
            sleep: Box::pin(tokio::time::sleep(interval)),
        });
        app.metrics.sse_started();
        let subscription = handle.subscribe();
        let frames = app.frames.join(&handle);
        SseBody {
            frames,
            woken: Box::pin(Arc::clone(subscription.notify()).notified_owned()),
            woken_armed: false,
            subscription,
            app,
            handle,
            idle,
            offset: start.offset,
            client_cursor: start.client_cursor,
            format: start.format,
            touched_ms: 0,
            told_up_to_date: false,
            finished: false,
        }
    }

    /// Whether the last commit left anything this reader has not seen (no stream lock).
    fn may_have_news(&self) -> bool {
        let tail = self.subscription.tail();
        tail.messages > self.offset.messages || tail.closed || tail.gone || !self.told_up_to_date
    }

    /// The events to send now, if any: new messages, or the catch-up or closing control.
    fn next_frame(&mut self) -> Option<Bytes> {
        let now_ms = ds_engine::Clock::System.now_ms();
        let cursor = response_cursor(self.client_cursor.as_deref(), now_ms);
        let source = FrameSource { handle: &self.handle, frames: &self.frames, format: self.format, cursor };
        let frame = match source.next_frame(self.offset, self.told_up_to_date) {
            Next::Frame(frame) => frame,
            Next::Nothing => return None,
            // Damage ends the response after the intact events: the client reconnects from
            // the last `id:` it got and is answered with the problem at the damage.
            Next::Gone | Next::Damaged => {
                self.finished = true;
                return None;
            }
        };
        if frame.to == self.offset {
            // A control event alone: caught up, or closed.
            self.told_up_to_date = true;
            self.finished = frame.closes;
        } else {
            self.advance(frame.to, frame.closes, now_ms);
        }
        Some(frame.bytes)
    }

    /// Moves past a sent frame ending at `to` (`closes`: it carried the closing event).
    fn advance(&mut self, to: Offset, closes: bool, now_ms: u64) {
        debug_assert!(to > self.offset, "offsets only move forward");
        self.offset = to;
        self.told_up_to_date = true;
        self.finished = closes;
        if now_ms.saturating_sub(self.touched_ms) >= TOUCH_INTERVAL_MS {
            self.touched_ms = now_ms;
            self.handle.touch();
        }
        if let Some(idle) = &mut self.idle {
            idle.data_since_armed = true;
        }
    }

    /// Arms (once) the wait for the next tail advance; true if it already fired.
    fn woken(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.woken_armed {
            self.woken.set(Arc::clone(self.subscription.notify()).notified_owned());
            self.woken.as_mut().enable();
            self.woken_armed = true;
        }
        let fired = self.woken.as_mut().poll(cx).is_ready();
        self.woken_armed = !fired;
        fired
    }
}

impl Drop for SseBody {
    fn drop(&mut self) {
        self.app.metrics.sse_ended();
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
        loop {
            // Arm the wait before looking, so an advance (or the shutdown's wake of every live
            // reader, `App::begin_shutdown`) right after the look still wakes us.
            let fired = this.woken(cx);
            if this.finished || this.app.shutdown.is_triggered() {
                return Poll::Ready(None);
            }
            if this.may_have_news() {
                if let Some(frame) = this.next_frame() {
                    Metrics::add(&this.app.metrics.read_bytes, frame.len() as u64);
                    return Poll::Ready(Some(Ok(Frame::data(frame))));
                }
                if this.finished {
                    return Poll::Ready(None);
                }
            }
            if fired {
                continue;
            }
            if this.idle.as_mut().is_some_and(|idle| idle.expired(cx)) {
                return Poll::Ready(None);
            }
            return Poll::Pending;
        }
    }

    fn is_end_stream(&self) -> bool {
        self.finished
    }
}
