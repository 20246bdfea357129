//! `live=sse`: a response body that pulls events from the stream as the client drains it.
//!
//! [`SseBody`] holds no queue and runs no task: hyper polls it when the socket can take
//! more, and each poll sends at most one frame of up to [`FRAME_STORED_BYTES_MAX`] stored
//! bytes, so a slow client only slows itself. A poll first looks at the tail its live slot
//! recorded at the last commit and touches the stream only when there is something new;
//! frames are shared through the slot, so readers at the same position and with the same
//! format cost one formatting. When caught up the body waits on the tail notification
//! (enabled before each look; the shutdown fires it too) and the idle timer. It ends after
//! the control event that reports a closed stream, when the stream is deleted, after
//! `DS_SERVER__SSE_RECONNECT_INTERVAL_SECS` without data, or at shutdown.

use std::convert::Infallible;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use ds_engine::content_type::SseEncoding;
use ds_engine::live::{CachedFrame, Subscription};
use ds_engine::{Offset, StartAt, StreamHandle};
use http_body::Frame;
use hyper::header::{HeaderName, HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use tokio::sync::futures::OwnedNotified;
use tokio::time::{Instant, Sleep};

use super::cursor::response_cursor;
use super::event::{write_control, write_message, ControlState, EventFormat};
use crate::app::App;
use crate::http::headers::STREAM_SSE_DATA_ENCODING;
use crate::http::problem::Problem;
use crate::http::response::{response, Body};
use crate::metrics::Metrics;
use crate::routes::read::ReadStart;
use crate::routes::read_problem;

/// Tells nginx-style proxies not to buffer the event stream.
const X_ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");

/// Most stored message bytes formatted into one frame.
pub const FRAME_STORED_BYTES_MAX: usize = 64 * 1024;

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
    handle.read_messages(from, 0).map_err(read_problem)?.ok_or_else(Problem::not_found)?;
    handle.touch();
    let content_type = &handle.config().content_type;
    let format = EventFormat { encoding: content_type.sse_encoding(), json: content_type.is_json() };
    let body = SseBody::new(Arc::clone(app), handle, from, client_cursor, format);
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
    /// The wait for the next tail advance; its allocation is reused for every wait.
    woken: Pin<Box<OwnedNotified>>,
    /// `woken` is enabled and has not fired yet.
    woken_armed: bool,
    idle: Option<IdleClose>,
    offset: Offset,
    client_cursor: Option<String>,
    format: EventFormat,
    /// When this reader last renewed the stream's TTL (clock milliseconds).
    touched_ms: u64,
    /// A control event with `upToDate` went out since the reader last fell behind.
    told_up_to_date: bool,
    finished: bool,
}

impl SseBody {
    fn new(
        app: Arc<App>,
        handle: StreamHandle,
        offset: Offset,
        client_cursor: Option<String>,
        format: EventFormat,
    ) -> SseBody {
        let idle = app.sse_idle_close.map(|interval| IdleClose {
            interval,
            data_since_armed: false,
            sleep: Box::pin(tokio::time::sleep(interval)),
        });
        app.metrics.sse_started();
        let subscription = handle.subscribe();
        SseBody {
            woken: Box::pin(Arc::clone(subscription.notify()).notified_owned()),
            woken_armed: false,
            subscription,
            app,
            handle,
            idle,
            offset,
            client_cursor,
            format,
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
        let now_ms = ds_engine::time::Clock::System.now_ms();
        let cursor = response_cursor(self.client_cursor.as_deref(), now_ms);
        let key = self.frame_key(cursor);
        if let Some(shared) = self.subscription.cached_frame(key, self.offset) {
            self.advance(shared.to, shared.last, now_ms);
            return Some(shared.bytes);
        }
        let Ok(Some(read)) = self.handle.read_messages(self.offset, FRAME_STORED_BYTES_MAX) else {
            // The stream is gone (or the impossible: the offset stopped being a boundary).
            self.finished = true;
            return None;
        };
        let mut out = BytesMut::new();
        let Some(last) = read.messages.last().map(|m| m.next) else {
            if !read.closed && self.told_up_to_date {
                return None;
            }
            let state = ControlState { cursor, up_to_date: true, closed: read.closed };
            write_control(&mut out, self.offset, state);
            self.told_up_to_date = true;
            self.finished = read.closed;
            return Some(out.freeze());
        };
        for message in &read.messages {
            let at_tail = message.next == read.tail;
            let state = ControlState { cursor, up_to_date: at_tail, closed: at_tail && read.closed };
            write_message(&mut out, self.format, &message.payload(self.format.json), message.next, state);
        }
        let bytes = out.freeze();
        let closes = read.closed && last == read.tail;
        let from = self.offset;
        self.subscription.share_frame(CachedFrame {
            key,
            from,
            to: last,
            bytes: bytes.clone(),
            last: closes,
        });
        self.advance(last, closes, now_ms);
        Some(bytes)
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

    /// Frames are shared between readers with the same format and cursor.
    fn frame_key(&self, cursor: u64) -> u64 {
        cursor << 2
            | u64::from(self.format.encoding == SseEncoding::Base64) << 1
            | u64::from(self.format.json)
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
