//! One SSE reader's place in its stream, and the step that turns the stream's news into the
//! reader's next frame.
//!
//! [`SseStream`] is what readers of one stream share wherever they are served (the stream's
//! handle, its shared frames, the event format, the TTL renewal); [`SseReader`] is one
//! reader's own small state (its offset, its echoed cursor, when data last went out), so a
//! caught-up reader can be set aside as little more than its socket and this. Who drives the
//! step decides how the reader waits: the hyper body (`super::sse::SseBody`) holds a tail
//! wait and a timer per reader; the bare front (`crate::serve::bare`) writes what is ready and
//! then parks the reader with others of its stream; both wait through a [`TailWatch`].
//! Leaves only: no I/O.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Context;
use std::time::Duration;

use bytes::Bytes;
use ds_engine::{LiveTail, Offset, StreamHandle, Subscription};
use tokio::sync::futures::OwnedNotified;
use tokio::time::Instant;

use crate::app::App;
use crate::events::event::EventFormat;
use crate::events::frame::{FrameCache, FrameSource, Next};
use crate::http::cursor::response_cursor;
use crate::metrics::Metrics;
use crate::per_stream::Member;

/// How often a live reader renews the stream's TTL while data flows.
const TOUCH_INTERVAL_MS: u64 = 1000;

/// What the SSE readers of one stream share.
pub(crate) struct SseStream {
    pub app: Arc<App>,
    pub handle: StreamHandle,
    /// Frames formatted by the stream's other SSE readers.
    frames: Member<FrameCache>,
    format: EventFormat,
    /// When a reader last renewed the stream's TTL (clock milliseconds).
    touched_ms: AtomicU64,
}

impl SseStream {
    pub(crate) fn new(app: Arc<App>, handle: StreamHandle, format: EventFormat) -> SseStream {
        let frames = app.frames.join(&handle);
        SseStream { app, handle, frames, format, touched_ms: AtomicU64::new(0) }
    }

    /// The idle interval after which a reader without data is closed (`None`: never).
    pub(crate) fn idle_close(&self) -> Option<Duration> {
        self.app.sse_idle_close
    }

    /// Renews the stream's TTL at most once per [`TOUCH_INTERVAL_MS`].
    fn touch(&self, now_ms: u64) {
        let touched_ms = self.touched_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(touched_ms) < TOUCH_INTERVAL_MS {
            return;
        }
        let swapped =
            self.touched_ms.compare_exchange(touched_ms, now_ms, Ordering::Relaxed, Ordering::Relaxed);
        if swapped.is_ok() {
            self.handle.touch();
        }
    }
}

/// The time a step runs at, read once for every reader a lot visits (two clock reads per
/// reader per event are a noticeable share of a fan-out's CPU;
/// docs/performance/code-choices.md).
#[derive(Clone, Copy, Debug)]
pub(crate) struct StepClock {
    pub instant: Instant,
    /// System clock milliseconds (cursors, TTL renewals).
    pub ms: u64,
}

impl StepClock {
    pub(crate) fn now() -> StepClock {
        StepClock { instant: Instant::now(), ms: ds_engine::Clock::System.now_ms() }
    }
}

/// What a reader does next.
#[derive(Debug)]
pub(crate) enum Step {
    /// Send these events.
    Frame(Bytes),
    /// Nothing new: the reader waits for the tail.
    Nothing,
    /// The answer is over (closed stream told, stream gone or damaged, idle, or shutdown).
    End,
}

/// One SSE reader: where it stands, counted in the live-reader gauge while it exists.
pub(crate) struct SseReader {
    offset: Offset,
    client_cursor: Option<Arc<str>>,
    /// When data last went out (or the answer began), for the idle close.
    last_data: Instant,
    /// A control event with `upToDate` went out since the reader last fell behind.
    told_up_to_date: bool,
    finished: bool,
    metrics: Arc<Metrics>,
}

impl SseReader {
    /// A reader starting at `offset` (a message boundary), counted until dropped.
    pub(crate) fn new(metrics: Arc<Metrics>, offset: Offset, client_cursor: Option<Arc<str>>) -> SseReader {
        metrics.sse_started();
        SseReader {
            offset,
            client_cursor,
            last_data: Instant::now(),
            told_up_to_date: false,
            finished: false,
            metrics,
        }
    }

    /// Whether a step may have something to send (no stream lock): the tail moved past the
    /// reader, the stream closed or went, the reader has not been told it is up to date, or
    /// the answer is ending.
    pub(crate) fn wants_step(&self, tail: LiveTail, stream: &SseStream) -> bool {
        self.finished
            || !self.told_up_to_date
            || tail.messages > self.offset.messages
            || tail.closed
            || tail.gone
            || stream.app.shutdown.is_triggered()
    }

    /// When the reader is due to close for want of data (`None`: it never is).
    pub(crate) fn idle_deadline(&self, stream: &SseStream) -> Option<Instant> {
        stream.idle_close().map(|interval| self.last_data + interval)
    }

    /// Ends the answer at the next step (idle, or the server is leaving).
    pub(crate) fn finish(&mut self) {
        self.finished = true;
    }

    /// The reader's next frame, moving past it, at the time `clock` says.
    pub(crate) fn step(&mut self, stream: &SseStream, clock: StepClock) -> Step {
        if self.finished || stream.app.shutdown.is_triggered() {
            self.finished = true;
            return Step::End;
        }
        let now_ms = clock.ms;
        let cursor = response_cursor(self.client_cursor.as_deref(), now_ms);
        let source =
            FrameSource { handle: &stream.handle, frames: &stream.frames, format: stream.format, cursor };
        let frame = match source.next_frame(self.offset, self.told_up_to_date) {
            Next::Frame(frame) => frame,
            Next::Nothing => return Step::Nothing,
            // Damage ends the response after the intact events: the client reconnects from
            // the last `id:` it got and is answered with the problem at the damage.
            Next::Gone | Next::Damaged => {
                self.finished = true;
                return Step::End;
            }
        };
        self.told_up_to_date = true;
        self.finished = frame.closes;
        if frame.to != self.offset {
            assert!(frame.to > self.offset, "offsets only move forward");
            self.offset = frame.to;
            self.last_data = clock.instant;
            stream.touch(now_ms);
        }
        Metrics::add(&self.metrics.read_bytes, frame.bytes.len() as u64);
        Step::Frame(frame.bytes)
    }
}

impl Drop for SseReader {
    fn drop(&mut self) {
        self.metrics.sse_ended();
    }
}

/// A started SSE answer, taken from its body by a front that writes it itself.
pub(crate) struct SseHandoff {
    pub stream: Arc<SseStream>,
    pub reader: SseReader,
}

/// A wait for a stream's tail to advance, re-armed after each wake: the one subscription a
/// reader under hyper, or a whole lot of parked readers, waits on.
pub(crate) struct TailWatch {
    subscription: Subscription,
    /// The wait itself; its allocation is reused for every wait.
    woken: Pin<Box<OwnedNotified>>,
    /// `woken` is enabled and has not fired yet.
    armed: bool,
}

impl TailWatch {
    pub(crate) fn new(handle: &StreamHandle) -> TailWatch {
        let subscription = handle.subscribe();
        let woken = Box::pin(Arc::clone(subscription.notify()).notified_owned());
        TailWatch { subscription, woken, armed: false }
    }

    /// The stream's published tail as of its last commit (no stream lock taken).
    pub(crate) fn tail(&self) -> LiveTail {
        self.subscription.tail()
    }

    /// Arms (once) the wait for the next advance; true if it fired. Arm before looking at
    /// the tail, so an advance (or the shutdown's wake of every live reader,
    /// `App::begin_shutdown`) right after the look still wakes the caller.
    pub(crate) fn fired(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.armed {
            self.woken.set(Arc::clone(self.subscription.notify()).notified_owned());
            self.woken.as_mut().enable();
            self.armed = true;
        }
        let fired = self.woken.as_mut().poll(cx).is_ready();
        self.armed = !fired;
        fired
    }
}
