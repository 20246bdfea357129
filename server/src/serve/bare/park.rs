//! Parked SSE readers: caught-up readers of the bare front, each kept as its connection and
//! its place in the stream, in lots of at most [`LOT_READERS_MAX`] per stream, one task per
//! lot.
//!
//! A reader with nothing to send leaves its task and is parked (`Parking::park`): it joins a
//! lot of its stream with room, or starts one. A lot holds the stream's one subscription for
//! all its readers and visits every reader when the tail advances, when a parked client
//! sends something or hangs up (each socket's read readiness wakes the lot), and when the
//! earliest idle deadline passes. A visit of every reader (a sweep) takes at most
//! [`VISITS_PER_POLL_MAX`] readers per poll and goes on after the runtime's other tasks and
//! its I/O driver, so a large lot never holds its thread for a whole sweep (about 10 ms at
//! 1,000 readers, during which every other request on that thread would wait). A visit
//! writes the reader's next frame with one non-blocking write (the frame is chunk-framed
//! once per lot and shared); a reader stays parked only if the socket took all of it. Any
//! other turn — a full socket, the end of the answer (closing, deletion, damage, idle
//! close, shutdown) — hands the reader back to a task
//! of its own (`super::serve`, resuming with what the socket did not take), which writes with
//! the stall timeout and parks it again when it catches up. A client gone is dropped on the
//! spot. A lot ends when its last reader leaves.
//!
//! What a parked reader costs: its slot in the lot's vector (socket, peer address, graceful
//! shutdown watcher, connection slot, offset, cursor, idle clock — about 200 bytes) and the
//! socket's registration with the runtime; no task, no timer, no buffer.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use bytes::{BufMut, Bytes, BytesMut};
use ds_engine::LiveTail;
use tokio::io::ReadBuf;
use tokio::time::{Instant, Sleep};

use super::events::Events;
use super::Conn;
use crate::live::sse_reader::{SseReader, SseStream, Step, StepClock, TailWatch};
use crate::per_stream::{Member, PerStream};

/// Most readers in one lot: larger fan-outs spread over several lots (and the runtime's
/// threads).
pub(super) const LOT_READERS_MAX: usize = 1024;
/// Most readers one poll of a lot visits; a sweep of more goes on in the lot's next poll,
/// after the runtime's other ready tasks. A visit that writes costs about 10 µs of kernel
/// time, so a sweep of a full lot in one poll would hold its worker thread for some 10 ms
/// and every request queued on that thread would wait for it.
const VISITS_PER_POLL_MAX: usize = 128;
/// Most times a lot arms its tail wait afresh in one look when advances keep firing it.
const REARMS_MAX: usize = 4;

/// The lots of every stream with parked readers (one per accept loop).
#[derive(Default)]
pub(crate) struct Parking {
    lots: Arc<PerStream<Lots>>,
}

/// The lots of one stream.
#[derive(Default)]
pub(super) struct Lots {
    inboxes: Mutex<Vec<Arc<Inbox>>>,
}

/// How readers reach a lot: arrivals wait here until the lot's next turn.
#[derive(Default)]
struct Inbox {
    arrivals: Mutex<Arrivals>,
    /// Readers in the lot and on their way to it.
    readers: AtomicUsize,
}

#[derive(Default)]
struct Arrivals {
    parked: Vec<Parked>,
    /// Wakes the lot.
    waker: Option<Waker>,
    /// The lot ended: nothing may arrive.
    closed: bool,
}

/// One parked reader.
struct Parked {
    conn: Conn,
    reader: SseReader,
    /// The connection ends with the answer.
    close: bool,
    /// Whether the lot watches the socket for the client hanging up (it stops once the
    /// client sent more: its next request, read after this answer).
    watching: bool,
}

impl Parking {
    /// Parks a caught-up answer (its head and every ready frame written) with `conn`.
    pub(crate) fn park(self: &Arc<Self>, conn: Conn, events: Events) {
        assert!(events.head.is_none() && events.leftover.is_none(), "only a caught-up answer parks");
        let Events { stream, reader, close, .. } = events;
        let watching = conn.unread.is_empty();
        let parked = Parked { conn, reader, close, watching };
        let lots = self.lots.join(&stream.handle);
        let mut inboxes = lots.inboxes.lock().expect("lots lock");
        let roomy = inboxes.iter().find(|inbox| inbox.readers.load(Ordering::Relaxed) < LOT_READERS_MAX);
        if let Some(inbox) = roomy {
            let waker = {
                let mut arrivals = inbox.arrivals.lock().expect("inbox lock");
                assert!(!arrivals.closed, "a closed lot is out of the list");
                arrivals.parked.push(parked);
                inbox.readers.fetch_add(1, Ordering::Relaxed);
                arrivals.waker.take()
            };
            drop(inboxes);
            if let Some(waker) = waker {
                waker.wake();
            }
            return;
        }
        let inbox = Arc::new(Inbox::default());
        inbox.arrivals.lock().expect("inbox lock").parked.push(parked);
        inbox.readers.store(1, Ordering::Relaxed);
        inboxes.push(Arc::clone(&inbox));
        drop(inboxes);
        let tail = TailWatch::new(&stream.handle);
        let sockets = Arc::new(SocketWake::default());
        let lot = Lot {
            parking: Arc::clone(self),
            stream,
            lots,
            inbox,
            tail,
            idle: None,
            readers: Vec::new(),
            sweep: Sweep::default(),
            sockets,
            last_chunk: None,
        };
        tokio::spawn(lot);
    }
}

/// One lot: a task that visits its parked readers.
struct Lot {
    parking: Arc<Parking>,
    stream: Arc<SseStream>,
    /// Keeps the stream's lots listed while this lot runs.
    lots: Member<Lots>,
    inbox: Arc<Inbox>,
    tail: TailWatch,
    /// Fires at the earliest idle deadline of the readers (made when first needed).
    idle: Option<(Instant, Pin<Box<Sleep>>)>,
    readers: Vec<Parked>,
    /// The sweep under way: every reader is visited once per sweep, over one or more polls.
    sweep: Sweep,
    /// What the readers' sockets wake: the lot's task, noting that they did.
    sockets: Arc<SocketWake>,
    /// The last frame chunk-framed here and its chunk, for readers at the same place.
    last_chunk: Option<(Bytes, Bytes)>,
}

/// How far a sweep of the readers has come, and what it found so far.
#[derive(Default)]
struct Sweep {
    /// The next reader to visit (those before it were visited in this sweep).
    next: usize,
    /// Another sweep follows: the tail advanced, or a socket woke the lot, after this sweep
    /// had visited readers.
    again: bool,
    /// Some reader has more to send at once.
    more: bool,
    /// The earliest idle deadline of the readers visited.
    earliest: Option<Instant>,
    /// The sweep took more than one poll.
    spread: bool,
}

/// The waker a lot gives its readers' sockets: it wakes the lot's task and notes that a
/// socket did (a hang-up, or bytes the client sent), so that a sweep spread over several
/// polls looks again at the readers it had visited before that happened.
#[derive(Default)]
struct SocketWake {
    task: Mutex<Option<Waker>>,
    woke: AtomicBool,
}

impl SocketWake {
    /// Wakes `task` from now on.
    fn wake_task(&self, task: &Waker) {
        let mut current = self.task.lock().expect("socket wake lock");
        if !current.as_ref().is_some_and(|current| current.will_wake(task)) {
            *current = Some(task.clone());
        }
    }
}

impl Wake for SocketWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woke.store(true, Ordering::Release);
        if let Some(task) = self.task.lock().expect("socket wake lock").as_ref() {
            task.wake_by_ref();
        }
    }
}

/// How a reader leaves its lot.
enum Leave {
    /// The client is gone: the connection is dropped.
    Gone,
    /// Back to a task of its own, with what its socket did not take.
    Resume(Option<Bytes>),
}

/// What a visit found.
enum Visit {
    /// The reader stays; `more`: it has more to send at once.
    Stay {
        more: bool,
    },
    Leave(Leave),
}

impl Future for Lot {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let lot = self.get_mut();
        lot.sockets.wake_task(cx.waker());
        loop {
            lot.take_arrivals(cx);
            lot.sweep.again |= lot.tail_advanced(cx);
            let swept = lot.visit_some();
            if lot.readers.is_empty() {
                lot.sweep = Sweep::default();
                if lot.close_if_empty() {
                    return Poll::Ready(());
                }
                continue;
            }
            let Some(Sweep { again, more, earliest, .. }) = swept else {
                // The sweep goes on after the runtime's other tasks.
                defer_to_others(cx);
                return Poll::Pending;
            };
            if again {
                continue;
            }
            if more {
                // Readers behind by more than a frame: another turn, after the others'.
                defer_to_others(cx);
                return Poll::Pending;
            }
            if !lot.idle_fired(earliest, cx) {
                return Poll::Pending;
            }
        }
    }
}

impl Lot {
    fn take_arrivals(&mut self, cx: &mut Context<'_>) {
        let mut arrivals = self.inbox.arrivals.lock().expect("inbox lock");
        if !arrivals.parked.is_empty() {
            // Taken whole, so the inbox keeps no capacity after a burst of arrivals.
            let mut arrived = std::mem::take(&mut arrivals.parked);
            let metrics = &self.stream.app.metrics;
            metrics.sse_parked.fetch_add(arrived.len() as i64, Ordering::Relaxed);
            self.readers.append(&mut arrived);
        }
        if !arrivals.waker.as_ref().is_some_and(|waker| waker.will_wake(cx.waker())) {
            arrivals.waker = Some(cx.waker().clone());
        }
    }

    /// Whether the tail advanced in a way the sweep under way has to go back for, with the
    /// wait for the next advance armed before the sweep reads the tail (so an advance after
    /// that read wakes the lot again). A sweep that has not visited anyone yet reads the
    /// new tail itself; one that has must start again for the readers it visited.
    fn tail_advanced(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.tail.fired(cx) {
            return false; // Not fired: the wait was armed, and still is.
        }
        // The fired wait is spent: arm a new one (another advance may fire it at once).
        for _ in 0..REARMS_MAX {
            if !self.tail.fired(cx) {
                return self.sweep.next > 0;
            }
        }
        // Still firing: left unarmed, so another sweep (whose first look arms it) follows.
        true
    }

    /// Goes on with the sweep: visits up to [`VISITS_PER_POLL_MAX`] readers, each at the
    /// tail as it is now. The finished sweep's findings once every reader was visited (the
    /// next sweep then starts afresh), `None` while readers are left for the next poll.
    fn visit_some(&mut self) -> Option<Sweep> {
        let tail = self.tail.tail();
        let clock = StepClock::now();
        if self.sweep.next == 0 {
            // Every reader is still to be visited: no socket's wake-up is owed a look.
            self.sockets.woke.store(false, Ordering::Release);
        }
        let socket_waker = Waker::from(Arc::clone(&self.sockets));
        let mut cx = Context::from_waker(&socket_waker);
        let mut visits = 0;
        while self.sweep.next < self.readers.len() {
            if visits == VISITS_PER_POLL_MAX {
                self.sweep.spread = true;
                return None;
            }
            visits += 1;
            let index = self.sweep.next;
            match self.visit(index, tail, clock, &mut cx) {
                Visit::Stay { more } => {
                    self.sweep.more |= more;
                    let deadline = self.readers[index].reader.idle_deadline(&self.stream);
                    self.sweep.earliest = self.sweep.earliest.into_iter().chain(deadline).min();
                    self.sweep.next += 1;
                }
                // The last reader (not visited yet in this sweep) takes its place.
                Visit::Leave(leave) => {
                    let parked = self.readers.swap_remove(index);
                    self.leave(parked, leave);
                }
            }
        }
        if self.readers.capacity() > 2 * self.readers.len() + 64 {
            self.readers.shrink_to(self.readers.len() + self.readers.len() / 2);
        }
        // A socket woke the lot while the sweep was spread over polls: a reader visited
        // before that may have hung up, so another sweep follows.
        self.sweep.again |= self.sweep.spread && self.sockets.woke.load(Ordering::Acquire);
        Some(std::mem::take(&mut self.sweep))
    }

    /// One reader's turn: hang-up, then news, then the idle close.
    fn visit(&mut self, index: usize, tail: LiveTail, clock: StepClock, cx: &mut Context<'_>) -> Visit {
        let stream = &self.stream;
        let parked = &mut self.readers[index];
        if parked.watching {
            let mut probe = [0u8; 1];
            match parked.conn.socket.poll_peek(cx, &mut ReadBuf::new(&mut probe)) {
                Poll::Ready(Ok(0) | Err(_)) => return Visit::Leave(Leave::Gone),
                Poll::Ready(Ok(_)) => parked.watching = false,
                Poll::Pending => {}
            }
        }
        if parked.reader.wants_step(tail, stream) {
            match parked.reader.step(stream, clock) {
                Step::Nothing => {}
                Step::End => return Visit::Leave(Leave::Resume(None)),
                Step::Frame(frame) => {
                    let chunk = chunk_of(&mut self.last_chunk, frame);
                    return match parked.conn.socket.try_write(&chunk) {
                        Ok(written) if written == chunk.len() => {
                            Visit::Stay { more: parked.reader.wants_step(tail, stream) }
                        }
                        Ok(written) => Visit::Leave(Leave::Resume(Some(chunk.slice(written..)))),
                        Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                            Visit::Leave(Leave::Resume(Some(chunk)))
                        }
                        Err(_) => Visit::Leave(Leave::Gone),
                    };
                }
            }
        }
        match parked.reader.idle_deadline(stream) {
            Some(deadline) if clock.instant >= deadline => {
                parked.reader.finish();
                Visit::Leave(Leave::Resume(None))
            }
            _ => Visit::Stay { more: false },
        }
    }

    fn leave(&mut self, parked: Parked, leave: Leave) {
        self.inbox.readers.fetch_sub(1, Ordering::Relaxed);
        self.stream.app.metrics.sse_parked.fetch_sub(1, Ordering::Relaxed);
        let Leave::Resume(leftover) = leave else { return };
        let Parked { conn, reader, close, .. } = parked;
        let events = Events { stream: Arc::clone(&self.stream), reader, head: None, leftover, close };
        tokio::spawn(super::serve(Arc::clone(&self.parking), conn, Some(Box::new(events))));
    }

    /// Arms the idle timer for `earliest`; true if it already passed.
    fn idle_fired(&mut self, earliest: Option<Instant>, cx: &mut Context<'_>) -> bool {
        let Some(deadline) = earliest else { return false };
        let (armed_for, sleep) =
            self.idle.get_or_insert_with(|| (deadline, Box::pin(tokio::time::sleep_until(deadline))));
        if *armed_for != deadline {
            *armed_for = deadline;
            sleep.as_mut().reset(deadline);
        }
        sleep.as_mut().poll(cx).is_ready()
    }

    /// Ends the lot if nothing arrived since its last reader left (true: it ended).
    fn close_if_empty(&mut self) -> bool {
        let mut inboxes = self.lots.inboxes.lock().expect("lots lock");
        let mut arrivals = self.inbox.arrivals.lock().expect("inbox lock");
        if !arrivals.parked.is_empty() {
            return false;
        }
        arrivals.closed = true;
        arrivals.waker = None;
        inboxes.retain(|inbox| !Arc::ptr_eq(inbox, &self.inbox));
        true
    }
}

impl Drop for Lot {
    fn drop(&mut self) {
        let parked = self.readers.len() as i64;
        self.stream.app.metrics.sse_parked.fetch_sub(parked, Ordering::Relaxed);
        // A socket that still holds the lot's waker no longer keeps the task alive.
        self.sockets.task.lock().expect("socket wake lock").take();
    }
}

/// Has the runtime wake the polled task once it has run its other ready tasks and polled its
/// I/O driver (`tokio::task::yield_now`'s deferred wake): a plain self-wake would run the
/// task again before the driver notices other connections' requests.
fn defer_to_others(cx: &mut Context<'_>) {
    let mut yielding = std::pin::pin!(tokio::task::yield_now());
    let pending = yielding.as_mut().poll(cx).is_pending();
    debug_assert!(pending, "a first poll of yield_now defers the wake");
}

/// `frame` as one chunk of a chunked body; the chunk of the last frame is kept and shared
/// with the next reader at the same place (frames of one place are one shared buffer).
fn chunk_of(last: &mut Option<(Bytes, Bytes)>, frame: Bytes) -> Bytes {
    if let Some((framed, chunk)) = last {
        if framed.as_ptr() == frame.as_ptr() && framed.len() == frame.len() {
            return chunk.clone();
        }
    }
    let size_line = format!("{:x}\r\n", frame.len());
    let mut chunk = BytesMut::with_capacity(size_line.len() + frame.len() + 2);
    chunk.put_slice(size_line.as_bytes());
    chunk.put_slice(&frame);
    chunk.put_slice(b"\r\n");
    let chunk = chunk.freeze();
    *last = Some((frame, chunk.clone()));
    chunk
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_chunk_framed_once_and_shared() {
        let mut last = None;
        let frame = Bytes::from_static(b"data:hello\n\n");
        let chunk = chunk_of(&mut last, frame.clone());
        assert_eq!(&chunk[..], b"c\r\ndata:hello\n\n\r\n");
        let again = chunk_of(&mut last, frame.clone());
        assert_eq!(again.as_ptr(), chunk.as_ptr(), "the same frame shares its chunk");
        let other = chunk_of(&mut last, Bytes::from(b"data:hello\n\n".to_vec()));
        assert_eq!(other, chunk, "another buffer with the same bytes is framed alike");
        assert_ne!(other.as_ptr(), chunk.as_ptr());
    }
}
