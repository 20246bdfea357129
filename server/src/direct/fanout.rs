//! The SSE fan-out of one stream: caught-up readers written to by one task, not each by its own.
//!
//! An SSE body that has caught up, on a plain TCP connection whose hyper buffer is empty
//! (see `crate::direct::socket_link`), lends itself to its stream's [`FanOut`] ([`FanOut::park`])
//! and sleeps. One writer task per stream with lent readers then waits on the tail
//! notification; at each advance it formats each distinct frame once, wraps it in chunk
//! framing once, and writes it to every lent reader's socket with one non-blocking write.
//! A thousand subscribers thus cost one task wake and a thousand `send`s per event, not a
//! thousand task wakes, hyper passes and body polls.
//!
//! A reader goes back to its body ([`Parked::poll_back`]) whenever the fast path cannot
//! finish: the socket is full (nothing written: the body resends through hyper and its
//! stall guard), a write was partial (the chunk's [remainder] goes out ahead of hyper's
//! next bytes, see `crate::direct::socket_link`), the reader is still behind after a few frames,
//! the closing event went out, the stream is gone, or the server shuts down. A body (or
//! its connection) ending takes the reader back ([`Parked::take_back_now`]); from then on the
//! fan-out never touches that socket. The writer task ends when no reader is lent. Its
//! state is shared by the stream's SSE readers (`crate::per_stream`), so idle streams have
//! none.
//!
//! [remainder]: Returned::remainder

use std::sync::{Arc, Mutex};
use std::task::Waker;

use bytes::Bytes;
use ds_engine::Clock;
use ds_engine::{LiveTail, Subscription};
use ds_engine::{Offset, StreamHandle};
use tokio::sync::Notify;

use super::socket_link::{Lent, SocketLink};
use super::DirectWrites;
use crate::events::event::EventFormat;
use crate::events::frame::{chunked, Frame, FrameCache, FrameSource, Next};
use crate::http::cursor::response_cursor;
use crate::metrics::Metrics;

/// Most frames written to one reader in one round; a reader further behind goes back to
/// its body, which catches up at the pace its socket drains.
const FRAMES_PER_ROUND_MAX: usize = 4;
/// Most distinct frames kept during one round (readers at other positions or cursors).
const ROUND_FRAMES_MAX: usize = 16;
/// Readers written to between yields to the runtime: a round over many subscribers must
/// not hold a worker from other connections for long (128 sends take about 1 ms here).
const READERS_PER_TURN: usize = 128;
/// How often the writer renews the stream's TTL while data flows.
const TOUCH_INTERVAL_MS: u64 = 1000;

/// The lent readers of one stream and its writer task's state.
#[derive(Default)]
pub struct FanOut {
    roster: Mutex<Roster>,
    /// Rung when a reader is lent, so the writer looks at it even without an advance.
    kick: Notify,
}

#[derive(Default)]
struct Roster {
    readers: Vec<Arc<Parked>>,
    /// A writer task runs (it clears this, under the lock, when it ends).
    running: bool,
}

/// What a body lends: its connection and where it stands.
pub struct Lending {
    pub link: Arc<SocketLink>,
    pub offset: Offset,
    pub format: EventFormat,
    pub client_cursor: Option<Arc<str>>,
    pub waker: Waker,
}

/// One SSE reader lent to the fan-out.
pub struct Parked {
    state: Mutex<ParkedState>,
}

struct ParkedState {
    /// Some while lent: the fan-out may write to the connection. Taking it hands back.
    link: Option<Arc<SocketLink>>,
    offset: Offset,
    format: EventFormat,
    client_cursor: Option<Arc<str>>,
    remainder: Bytes,
    finished: bool,
    /// Data went out since the body last asked (its idle timer must not fire).
    wrote_data: bool,
    waker: Waker,
}

/// A reader back from the fan-out.
#[derive(Debug)]
pub struct Returned {
    pub offset: Offset,
    /// The unwritten end of a chunk the fan-out began: the next bytes on the wire.
    pub remainder: Bytes,
    /// The closing event went out: the body ends.
    pub finished: bool,
}

impl FanOut {
    /// Lends a caught-up reader to the stream's writer, starting one if none runs.
    pub fn park(
        self: &Arc<Self>,
        writes: &Arc<DirectWrites>,
        handle: &StreamHandle,
        lent: Lending,
    ) -> Arc<Parked> {
        let parked = Arc::new(Parked {
            state: Mutex::new(ParkedState {
                link: Some(lent.link),
                offset: lent.offset,
                format: lent.format,
                client_cursor: lent.client_cursor,
                remainder: Bytes::new(),
                finished: false,
                wrote_data: false,
                waker: lent.waker,
            }),
        });
        let start = {
            let mut roster = self.roster.lock().expect("fan-out roster lock");
            roster.readers.push(Arc::clone(&parked));
            !std::mem::replace(&mut roster.running, true)
        };
        if start {
            tokio::spawn(run(Arc::clone(self), Arc::clone(writes), handle.clone()));
        }
        self.kick.notify_one();
        parked
    }

    /// One pass over the lent readers, yielding to other tasks every [`READERS_PER_TURN`];
    /// false once none is left (the writer then ends).
    async fn round(
        &self,
        writes: &DirectWrites,
        source: &RoundFrames<'_>,
        frames: &mut Vec<Built>,
        touched_ms: &mut u64,
    ) -> bool {
        let mut readers = std::mem::take(&mut self.roster.lock().expect("fan-out roster lock").readers);
        let tail = source.subscription.tail();
        let ending = tail.gone || writes.shutdown.is_triggered();
        let mut tally = Tally::default();
        let mut kept = 0;
        for index in 0..readers.len() {
            if index > 0 && index % READERS_PER_TURN == 0 {
                tokio::task::yield_now().await;
            }
            let reader = &readers[index];
            let keep = if ending {
                tally.handbacks += u64::from(reader.state.lock().expect("parked reader lock").hand_back());
                false
            } else {
                reader.deliver(source, frames, tail, &mut tally)
            };
            if keep {
                readers.swap(kept, index);
                kept += 1;
            }
        }
        readers.truncate(kept);
        // The next round starts one reader later: no subscriber is always served last.
        if !readers.is_empty() {
            readers.rotate_left(1);
        }
        frames.clear();
        let metrics = &writes.metrics;
        Metrics::add(&metrics.sse_fanout_handbacks, tally.handbacks);
        if tally.frames > 0 {
            Metrics::add(&metrics.sse_fanout_frames, tally.frames);
            Metrics::add(&metrics.read_bytes, tally.bytes);
            if source.now_ms.saturating_sub(*touched_ms) >= TOUCH_INTERVAL_MS {
                *touched_ms = source.now_ms;
                source.handle.touch();
            }
        }
        let mut roster = self.roster.lock().expect("fan-out roster lock");
        readers.append(&mut roster.readers);
        roster.readers = readers;
        roster.running = !roster.readers.is_empty();
        roster.running
    }
}

/// The writer task of one stream: a round after every tail advance or newly lent reader.
async fn run(fanout: Arc<FanOut>, writes: Arc<DirectWrites>, handle: StreamHandle) {
    let subscription = handle.subscribe();
    let shared_frames = writes.frames.join(&handle);
    let mut frames = Vec::with_capacity(ROUND_FRAMES_MAX);
    let mut touched_ms = 0;
    loop {
        // Armed before the round looks at the tail, so no advance falls in between.
        let advanced = subscription.notify().notified();
        let kicked = fanout.kick.notified();
        tokio::pin!(advanced, kicked);
        advanced.as_mut().enable();
        kicked.as_mut().enable();
        let source = RoundFrames {
            handle: &handle,
            subscription: &subscription,
            shared: &shared_frames,
            now_ms: Clock::System.now_ms(),
        };
        if !fanout.round(&writes, &source, &mut frames, &mut touched_ms).await {
            return;
        }
        tokio::select! {
            _ = advanced => {}
            _ = kicked => {}
        }
    }
}

/// What one round did.
#[derive(Default)]
struct Tally {
    frames: u64,
    bytes: u64,
    handbacks: u64,
}

/// Where a round's frames come from.
struct RoundFrames<'a> {
    handle: &'a StreamHandle,
    subscription: &'a Subscription,
    /// Frames the stream's other readers formatted.
    shared: &'a FrameCache,
    now_ms: u64,
}

/// A frame built during a round, for readers at `from` with `format` and `cursor`.
struct Built {
    from: Offset,
    format: EventFormat,
    cursor: u64,
    next: Next,
    /// `next`'s frame in chunk framing (empty when there is no frame).
    chunk: Bytes,
}

impl RoundFrames<'_> {
    /// The index in `frames` of what a reader at `from` sends, built if not there yet.
    fn find_or_build(
        &self,
        frames: &mut Vec<Built>,
        from: Offset,
        format: EventFormat,
        cursor: u64,
    ) -> usize {
        let found = frames.iter().position(|b| b.from == from && b.format == format && b.cursor == cursor);
        if let Some(index) = found {
            return index;
        }
        let source = FrameSource { handle: self.handle, frames: self.shared, format, cursor };
        let next = source.next_frame(from, true);
        let chunk = match &next {
            Next::Frame(frame) => chunked(&frame.bytes),
            Next::Nothing | Next::Gone | Next::Damaged => Bytes::new(),
        };
        if frames.len() == ROUND_FRAMES_MAX {
            frames.remove(0);
        }
        frames.push(Built { from, format, cursor, next, chunk });
        frames.len() - 1
    }
}

impl Parked {
    /// The reader, if the fan-out handed it back; otherwise `waker` is woken when it does.
    /// Also whether data went out since the last call.
    pub fn poll_back(&self, waker: &Waker) -> (Option<Returned>, bool) {
        let mut state = self.state.lock().expect("parked reader lock");
        let wrote_data = std::mem::take(&mut state.wrote_data);
        if state.link.is_some() {
            if !state.waker.will_wake(waker) {
                state.waker = waker.clone();
            }
            return (None, wrote_data);
        }
        (Some(state.returned()), wrote_data)
    }

    /// Takes the reader back now; the fan-out no longer touches its connection.
    pub fn take_back_now(&self) -> Returned {
        let mut state = self.state.lock().expect("parked reader lock");
        state.link = None;
        state.returned()
    }

    /// Writes what is new to this reader, counting into `tally`; false once it was handed
    /// back (or its body took it back).
    fn deliver(
        &self,
        source: &RoundFrames<'_>,
        frames: &mut Vec<Built>,
        tail: LiveTail,
        tally: &mut Tally,
    ) -> bool {
        let mut state = self.state.lock().expect("parked reader lock");
        for _ in 0..FRAMES_PER_ROUND_MAX {
            if state.link.is_none() {
                return false;
            }
            if state.offset.messages >= tail.messages && !tail.closed {
                return true;
            }
            let cursor = response_cursor(state.client_cursor.as_deref(), source.now_ms);
            let index = source.find_or_build(frames, state.offset, state.format, cursor);
            let built = &frames[index];
            let frame = match &built.next {
                Next::Nothing => return true,
                Next::Gone | Next::Damaged => break,
                Next::Frame(frame) => frame,
            };
            let written = state.write(frame, &built.chunk);
            if written > 0 {
                tally.frames += 1;
                tally.bytes += frame.bytes.len() as u64;
            }
            if state.link.is_none() {
                tally.handbacks += 1;
                return false;
            }
        }
        // Gone, or still behind after a few frames (the body catches up at its socket's pace).
        tally.handbacks += u64::from(state.hand_back());
        false
    }
}

impl Lent for Parked {
    fn take_back(&self) {
        self.take_back_now();
    }
}

impl ParkedState {
    /// Writes one chunk without blocking, handing the reader back unless it all went out
    /// and more may follow; the bytes written.
    fn write(&mut self, frame: &Frame, chunk: &Bytes) -> usize {
        let Some(link) = &self.link else { return 0 };
        let written = match link.send(chunk) {
            Ok(written) => written,
            Err(_) => {
                // Full (the body resends through hyper) or broken (hyper finds out).
                self.hand_back();
                return 0;
            }
        };
        debug_assert!(frame.to >= self.offset, "offsets only move forward");
        self.wrote_data |= frame.to > self.offset;
        self.offset = frame.to;
        self.finished = frame.closes;
        if written < chunk.len() || frame.closes {
            self.remainder = chunk.slice(written..);
            self.hand_back();
        }
        written
    }

    /// Gives the reader back to its body and wakes it; false if it was not lent any more.
    fn hand_back(&mut self) -> bool {
        let lent = self.link.take().is_some();
        if lent {
            self.waker.wake_by_ref();
        }
        lent
    }

    fn returned(&mut self) -> Returned {
        debug_assert!(self.link.is_none(), "only a reader handed back returns");
        Returned {
            offset: self.offset,
            remainder: std::mem::take(&mut self.remainder),
            finished: self.finished,
        }
    }
}
