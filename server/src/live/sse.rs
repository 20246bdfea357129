//! `live=sse`: a response body that pulls events from the stream as the client drains it.
//!
//! [`SseBody`] holds no queue and runs no task: hyper polls it when the socket can take
//! more, and each poll reads at most [`FRAME_STORED_BYTES_MAX`] of messages from the
//! published view, so a slow client only slows itself. When caught up it waits on the
//! stream's tail notification (enabled before each look), the idle timer, and shutdown.
//! The body ends after the control event that reports a closed stream, when the stream is
//! deleted, after `DS_SERVER__SSE_RECONNECT_INTERVAL_SECS` without data, or at shutdown.

use std::convert::Infallible;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use ds_engine::live::Subscription;
use ds_engine::{MessagesResult, Offset, StartAt, StreamHandle};
use http_body::Frame;
use hyper::header::{HeaderName, HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use tokio::sync::futures::OwnedNotified;
use tokio::time::{Instant, Sleep};

use super::cursor::response_cursor;
use super::event::{write_control, write_data, ControlState, EventFormat};
use crate::app::App;
use crate::http::headers::STREAM_SSE_DATA_ENCODING;
use crate::http::problem::Problem;
use crate::http::response::{response, Body};
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
    let base64 = format.encoding == ds_engine::content_type::SseEncoding::Base64;
    let body = SseBody::new(Arc::clone(app), handle, from, client_cursor, format);
    let mut reply = response(StatusCode::OK, Body::Live(Box::pin(body)));
    let headers = reply.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(X_ACCEL_BUFFERING, HeaderValue::from_static("no"));
    if base64 {
        headers.insert(STREAM_SSE_DATA_ENCODING, HeaderValue::from_static("base64"));
    }
    Ok(reply)
}

/// The body of one SSE response.
pub struct SseBody {
    app: Arc<App>,
    handle: StreamHandle,
    subscription: Subscription,
    /// Enabled wait for the next tail advance (re-armed after each wake).
    woken: Option<Pin<Box<OwnedNotified>>>,
    shutdown: Pin<Box<OwnedNotified>>,
    idle: Option<(Duration, Pin<Box<Sleep>>)>,
    offset: Offset,
    client_cursor: Option<String>,
    format: EventFormat,
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
        let idle = app.sse_idle_close.map(|interval| (interval, Box::pin(tokio::time::sleep(interval))));
        SseBody {
            subscription: handle.subscribe(),
            shutdown: app.shutdown.owned_wait(),
            app,
            handle,
            woken: None,
            idle,
            offset,
            client_cursor,
            format,
            told_up_to_date: false,
            finished: false,
        }
    }

    /// The events to send now, if any: new messages, or the catch-up or closing control.
    fn next_frame(&mut self) -> Option<Bytes> {
        let Ok(Some(read)) = self.handle.read_messages(self.offset, FRAME_STORED_BYTES_MAX) else {
            // The stream is gone (or the impossible: the offset stopped being a boundary).
            self.finished = true;
            return None;
        };
        let cursor = response_cursor(self.client_cursor.as_deref(), ds_engine::time::Clock::System.now_ms());
        let mut out = BytesMut::new();
        if read.messages.is_empty() {
            if !read.closed && self.told_up_to_date {
                return None;
            }
            write_control(
                &mut out,
                self.offset,
                ControlState { cursor, up_to_date: true, closed: read.closed },
            );
        } else {
            self.write_messages(&mut out, &read, cursor);
        }
        self.told_up_to_date = true;
        self.finished = read.closed && self.offset == read.tail;
        Some(out.freeze())
    }

    fn write_messages(&mut self, out: &mut BytesMut, read: &MessagesResult, cursor: u64) {
        for message in &read.messages {
            debug_assert!(message.next > self.offset, "offsets only move forward");
            let payload = message.payload(self.format.json);
            write_data(out, self.format, &payload, message.next);
            let at_tail = message.next == read.tail;
            let state = ControlState { cursor, up_to_date: at_tail, closed: at_tail && read.closed };
            write_control(out, message.next, state);
            self.offset = message.next;
        }
        self.handle.touch();
        if let Some((interval, sleep)) = &mut self.idle {
            sleep.as_mut().reset(Instant::now() + *interval);
        }
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
            if this.finished || this.app.shutdown.is_triggered() {
                return Poll::Ready(None);
            }
            let woken = this.woken.get_or_insert_with(|| {
                let mut wait = Box::pin(Arc::clone(this.subscription.notify()).notified_owned());
                wait.as_mut().enable();
                wait
            });
            let woken_already = woken.as_mut().poll(cx).is_ready();
            if let Some(frame) = this.next_frame() {
                if woken_already {
                    this.woken = None;
                }
                return Poll::Ready(Some(Ok(Frame::data(frame))));
            }
            if this.finished {
                return Poll::Ready(None);
            }
            if woken_already {
                this.woken = None;
                continue;
            }
            if this.shutdown.as_mut().poll(cx).is_ready() {
                return Poll::Ready(None);
            }
            if let Some((_, sleep)) = &mut this.idle {
                if sleep.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(None);
                }
            }
            return Poll::Pending;
        }
    }

    fn is_end_stream(&self) -> bool {
        self.finished
    }
}
