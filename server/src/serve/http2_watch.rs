//! What an HTTP/2 connection's answers are doing, so that its task can end a connection
//! that holds what it no longer uses.
//!
//! Over HTTP/1.1 a client that stops reading blocks the socket, and the write-stall guard
//! (`super::stall`) closes the connection. Over HTTP/2 the socket keeps moving (pings,
//! other streams) while a client grants one answer no flow-control window: hyper then holds
//! the data it took from the body and stops pulling, and the answer's permit of the HTTP/2
//! budget, its subscription and what it took stay held for as long as the connection lives.
//! And hyper keeps an idle HTTP/2 connection that answers pings for ever. So each request
//! is counted from its start ([`ConnectionWatch::begin`]) to the end of its answer's body
//! ([`Held`]), the body says when it handed out data that hyper has not come back for, and
//! the connection's task asks [`ConnectionWatch::verdict`] now and then:
//!
//! - an answer whose data has waited for the write-stall timeout makes the connection
//!   [`Verdict::Stalled`]: it is closed, as a stalled HTTP/1.1 connection is;
//! - a connection with no request open for the idle timeout (a waiting long-poll is one) is
//!   [`Verdict::Idle`]: it is sent away (GOAWAY), as an idle HTTP/1.1 connection is closed,
//!   and closed if it has not ended a write-stall timeout later (an answer the server
//!   finished can still be queued in the connection, waiting for a window that never comes).
//!
//! Bodies hand data out in pieces of at most [`PIECE_BYTES_MAX`], so hyper comes back for
//! more as each piece leaves, and what one finished answer can leave queued is a piece
//! plus hyper's send buffer.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Buf;
use http_body::{Body as _, Frame, SizeHint};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use crate::http::response::{Body, SliceBuf};

/// Most bytes one answer hands hyper at a time (an HTTP/2 DATA frame's default size).
pub(super) const PIECE_BYTES_MAX: usize = 16 * 1024;
/// Answers remembered per connection before the ended ones are forgotten.
const ANSWERS_REMEMBERED_MAX: usize = 256;
/// `AnswerState::waiting_since_ms` of an answer hyper is not waiting on.
const NOT_WAITING: u64 = u64::MAX;

/// What the connection's task should do.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    Serving,
    /// An answer's data has waited for hyper longer than the write-stall timeout.
    Stalled,
    /// No request has been open for the idle timeout.
    Idle,
}

/// One connection's answers, shared by their bodies and the connection's task.
pub(super) struct ConnectionWatch {
    started: Instant,
    answers: Mutex<Vec<Weak<AnswerState>>>,
    /// Requests begun whose answers have not ended.
    open: AtomicUsize,
    /// When (ms after `started`) the last request began or answer ended.
    changed_ms: AtomicU64,
}

/// One answer's part of the watch.
struct AnswerState {
    /// Since when (ms after the watch started) data handed to hyper waits to be taken.
    waiting_since_ms: AtomicU64,
}

impl ConnectionWatch {
    pub(super) fn new() -> ConnectionWatch {
        ConnectionWatch {
            started: Instant::now(),
            answers: Mutex::new(Vec::new()),
            open: AtomicUsize::new(0),
            changed_ms: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// A request on this connection begins: the connection is not idle until what this
    /// returns (or the [`Held`] body made of it) is dropped.
    pub(super) fn begin(self: &Arc<Self>) -> Open {
        let state = Arc::new(AnswerState { waiting_since_ms: AtomicU64::new(NOT_WAITING) });
        let mut answers = self.answers.lock().expect("watch lock");
        if answers.len() >= ANSWERS_REMEMBERED_MAX {
            answers.retain(|answer| answer.strong_count() > 0);
        }
        answers.push(Arc::downgrade(&state));
        drop(answers);
        self.open.fetch_add(1, Ordering::Relaxed);
        self.changed_ms.store(self.now_ms(), Ordering::Relaxed);
        Open { state, watch: Arc::clone(self) }
    }

    /// What the connection's task should do now, given the write-stall and idle timeouts.
    pub(super) fn verdict(&self, stall: Duration, idle: Duration) -> Verdict {
        let now_ms = self.now_ms();
        let mut answers = self.answers.lock().expect("watch lock");
        answers.retain(|answer| answer.strong_count() > 0);
        let stalled = answers.iter().filter_map(Weak::upgrade).any(|answer| {
            let since_ms = answer.waiting_since_ms.load(Ordering::Relaxed);
            since_ms != NOT_WAITING && now_ms.saturating_sub(since_ms) >= stall.as_millis() as u64
        });
        drop(answers);
        let quiet_ms = now_ms.saturating_sub(self.changed_ms.load(Ordering::Relaxed));
        if stalled {
            Verdict::Stalled
        } else if self.open.load(Ordering::Relaxed) == 0 && quiet_ms >= idle.as_millis() as u64 {
            Verdict::Idle
        } else {
            Verdict::Serving
        }
    }
}

/// A request in progress on a watched connection (see [`ConnectionWatch::begin`]).
pub(super) struct Open {
    state: Arc<AnswerState>,
    watch: Arc<ConnectionWatch>,
}

impl Open {
    /// The request's answer body, holding its permit of the HTTP/2 budget (if any) until it
    /// ends or is dropped. Until hyper first pulls it, it counts as waiting.
    pub(super) fn hold(self, body: Body, permit: Option<OwnedSemaphorePermit>) -> Held {
        self.state.waiting_since_ms.store(self.watch.now_ms(), Ordering::Relaxed);
        Held { body, rest: None, open: self, _permit: permit }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.watch.open.fetch_sub(1, Ordering::Relaxed);
        self.watch.changed_ms.store(self.watch.now_ms(), Ordering::Relaxed);
    }
}

/// An answer's body on an HTTP/2 connection: handed out in pieces, watched, holding its
/// request's permit until it ends or is dropped.
pub(super) struct Held {
    body: Body,
    /// What is left of the body's last frame after the piece handed out.
    rest: Option<SliceBuf>,
    open: Open,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Held {
    /// The next piece: from what is left of the last frame, else from the body.
    fn next_piece(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<SliceBuf>, std::convert::Infallible>>> {
        let mut data = match self.rest.take() {
            Some(rest) => rest,
            None => match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => data,
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                other => return other,
            },
        };
        if data.remaining() > PIECE_BYTES_MAX {
            let piece = data.split_to(PIECE_BYTES_MAX);
            self.rest = Some(data);
            data = piece;
        }
        Poll::Ready(Some(Ok(Frame::data(data))))
    }
}

impl http_body::Body for Held {
    type Data = SliceBuf;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = self.next_piece(cx);
        let waiting_since_ms = match &polled {
            Poll::Ready(Some(_)) => self.open.watch.now_ms(),
            _ => NOT_WAITING,
        };
        self.open.state.waiting_since_ms.store(waiting_since_ms, Ordering::Relaxed);
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_none() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let rest = self.rest.as_ref().map_or(0, |rest| rest.remaining() as u64);
        let body = self.body.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(body.lower() + rest);
        if let Some(upper) = body.upper() {
            hint.set_upper(upper + rest);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    const STALL: Duration = Duration::from_secs(30);
    const IDLE: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn a_request_open_is_not_idleness_and_its_end_starts_the_idle_clock() {
        let watch = Arc::new(ConnectionWatch::new());
        tokio::time::advance(IDLE).await;
        assert_eq!(watch.verdict(STALL, IDLE), Verdict::Idle, "nothing asked since it opened");
        let open = watch.begin();
        tokio::time::advance(IDLE * 5).await;
        assert_eq!(watch.verdict(STALL, IDLE), Verdict::Serving, "a long-poll waits, say");
        drop(open.hold(Body::Empty, None));
        tokio::time::advance(IDLE - Duration::from_millis(1)).await;
        assert_eq!(watch.verdict(STALL, IDLE), Verdict::Serving);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(watch.verdict(STALL, IDLE), Verdict::Idle);
    }

    #[tokio::test(start_paused = true)]
    async fn data_handed_out_and_not_taken_back_for_the_stall_timeout_stalls_the_connection() {
        let watch = Arc::new(ConnectionWatch::new());
        let mut held = watch.begin().hold(Body::full(vec![7u8; 10]), None);
        tokio::time::advance(STALL).await;
        assert_eq!(watch.verdict(STALL, IDLE), Verdict::Stalled, "never pulled at all");
        let frame = held.frame().await.expect("a frame").expect("data");
        assert_eq!(frame.into_data().expect("data").remaining(), 10);
        tokio::time::advance(STALL - Duration::from_millis(1)).await;
        assert_eq!(watch.verdict(STALL, IDLE), Verdict::Serving, "pulled again in time");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(watch.verdict(STALL, IDLE), Verdict::Stalled, "handed out, not come back for");
        assert!(held.frame().await.is_none());
        tokio::time::advance(STALL).await;
        assert_ne!(watch.verdict(STALL, IDLE), Verdict::Stalled, "an ended body waits for nothing");
    }

    #[tokio::test]
    async fn bodies_are_handed_out_in_pieces_that_add_up_to_them() {
        let watch = Arc::new(ConnectionWatch::new());
        let bytes: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
        let mut held = watch.begin().hold(Body::full(bytes.clone()), None);
        assert_eq!(http_body::Body::size_hint(&held).exact(), Some(40_000));
        let mut pieces = Vec::new();
        let mut joined = Vec::new();
        while let Some(frame) = held.frame().await {
            let mut data = frame.expect("no error").into_data().expect("data");
            pieces.push(data.remaining());
            joined.extend_from_slice(&data.copy_to_bytes(data.remaining()));
            assert_eq!(http_body::Body::is_end_stream(&held), joined.len() == bytes.len());
        }
        assert_eq!(pieces, [PIECE_BYTES_MAX, PIECE_BYTES_MAX, 40_000 - 2 * PIECE_BYTES_MAX]);
        assert_eq!(joined, bytes);
    }
}
