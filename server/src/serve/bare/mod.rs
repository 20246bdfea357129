//! The bare front: ds's own lean HTTP/1.1 on plain TCP for requests without a body — reads
//! above all, catch-up, long-poll and SSE — and short ones whose body arrived with the head
//! (a producer's append), with everything else left to hyper.
//!
//! A connection ([`Conn`]) starts here. Each request is read into a buffer that lives only
//! until the request is parsed (`head`); a request it serves is routed like any other
//! (`crate::router::handle`) and its answer written by `reply`, straight to the socket, frame
//! by frame. An SSE answer is written by `events`: every frame that is ready, and then, caught
//! up, the connection itself is parked (`park`): it leaves its task and joins a lot of its
//! stream's caught-up readers, one task per lot, which writes each new frame to every reader
//! that can take it at once and hands a reader back to a task of its own (this function
//! again, resuming) when its socket is full or its answer ends. So a connection between
//! requests holds its socket and nothing else, a waiting long-poll holds its route's state,
//! and a caught-up SSE reader holds its socket and its place in the stream — none holds a
//! read or write buffer (hyper keeps one of each per connection for its whole life: 8 KiB
//! each). At the first request the bare front does not serve (a body chunked, longer than
//! [`head::BODY_BYTES_BARE_MAX`] or not all arrived — it never waits for one — or any head
//! it leaves to hyper's checks), the connection goes to hyper for the rest of its life,
//! from that request's first byte (the bytes already read served before the socket's and
//! freed once read, `super::prefixed`); hyper never hands one back.
//!
//! Like hyper here: a head must arrive within `DS_SERVER__IDLE_TIMEOUT_SECS` of the wait for
//! it (an idle keep-alive connection closes then), a write blocked for `DS_SERVER__WRITE_STALL_
//! TIMEOUT_SECS` ends the connection, `Connection: close` is honoured, shutdown closes idle
//! connections and lets answers in flight finish. A client that hangs up while its answer is
//! awaited (a long-poll) or streamed (SSE, parked or not) is noticed at once, and its request
//! dropped; any other request is carried to its answer, so a client that half-closes after
//! sending (`shutdown(SHUT_WR)`, `nc -N`) still learns what became of its write. (hyper, for
//! what it serves, drops every request at a half-close: its `half_close` option would keep a
//! gone reader until its answer's next write, which a quiet SSE stream may never make.)

mod events;
mod gather;
pub(crate) mod head;
mod park;
pub(crate) mod reply;

pub(crate) use park::Parking;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use hyper::{Request, Response};
use hyper_util::server::graceful::Watcher;
use tokio::io::ReadBuf;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::app::App;
use crate::http::request_body::RequestBody;
use crate::http::response::Body;
use crate::live::sse_reader::SseHandoff;
use crate::metrics::{ErrorKind, Metrics};
use crate::router::{self, Routed};
use events::{Events, Written};
use head::Head;
use reply::Framing;

use super::gate;
use super::OpenConnection;

/// A plain TCP connection of the bare front: its socket, and what it holds for the server.
pub(crate) struct Conn {
    socket: TcpStream,
    peer: SocketAddr,
    watcher: Watcher,
    /// Bytes read past the requests served so far (the start of the next head).
    unread: Vec<u8>,
    open: OpenConnection,
}

impl Conn {
    pub(crate) fn new(socket: TcpStream, peer: SocketAddr, watcher: Watcher, open: OpenConnection) -> Conn {
        Conn { socket, peer, watcher, unread: Vec::new(), open }
    }
}

/// What is left to do after an answer's route.
enum Answered {
    /// The answer is written; the connection may carry another.
    Again,
    /// The connection ends.
    Done,
    /// An SSE answer, to be written by `events` (and parked when caught up).
    Events(Events),
}

/// Serves `conn` until the client, an error or the shutdown ends it, hands it to hyper, or
/// parks it; `events`: an SSE answer to go on with first (a parked reader resuming). Each
/// step is boxed, and so is an SSE answer between steps, so the connection's task holds
/// only what the step it is in needs (a waiting long-poll: its socket and a few pointers).
pub(crate) async fn serve(parking: Arc<Parking>, mut conn: Conn, mut events: Option<Box<Events>>) {
    let app = Arc::clone(conn.open.app());
    loop {
        if let Some(answer) = events.take() {
            match Box::pin(events::write(&conn.socket, *answer, app.write_stall_timeout)).await {
                Ok(Written::Ended { again: true }) => {}
                Ok(Written::Ended { again: false }) => return,
                Ok(Written::CaughtUp(answer)) => return parking.park(conn, answer),
                Err(error) => return ended(&app, conn.peer, &error),
            }
        }
        let (request, close) = match Box::pin(next_head(&app, &mut conn.socket, &mut conn.unread)).await {
            Ok(Some(bare)) => bare,
            Ok(None) => return Box::pin(hand_to_hyper(&app, conn)).await,
            Err(error) => {
                tracing::debug!(%error, peer = %conn.peer, "connection ended");
                return;
            }
        };
        Metrics::add(&app.metrics.bare_requests, 1);
        match Box::pin(answer(&app, &conn.socket, request, close)).await {
            Ok(Answered::Again) => {}
            Ok(Answered::Done) => return,
            Ok(Answered::Events(answer)) => events = Some(Box::new(answer)),
            Err(error) => return ended(&app, conn.peer, &error),
        }
    }
}

/// Gives the connection to hyper, from the first byte not served: hyper reads the bytes
/// already read, then the socket, and writes to the socket (HTTP/2 when the head read was
/// the HTTP/2 preface, `super::http2`).
async fn hand_to_hyper(app: &Arc<App>, conn: Conn) {
    Metrics::add(&app.metrics.bare_handoffs, 1);
    let Conn { socket, peer, watcher, unread, open } = conn;
    super::serve_plain(app, socket, peer, watcher, unread).await;
    drop(open);
}

/// Logs why an answer's connection ended.
fn ended(app: &App, peer: SocketAddr, error: &io::Error) {
    if error.kind() == io::ErrorKind::TimedOut {
        app.metrics.error(ErrorKind::WriteStall);
        tracing::debug!(%peer, "client stopped reading; closing");
    } else {
        tracing::debug!(%error, %peer, "client went away");
    }
}

/// The next request the bare front serves (and whether the client asked to close after it);
/// `None` when the connection goes to hyper, with `unread` holding every byte not served.
async fn next_head(
    app: &App,
    socket: &mut TcpStream,
    unread: &mut Vec<u8>,
) -> io::Result<Option<(Box<Request<RequestBody>>, bool)>> {
    let deadline = Instant::now() + app.idle_timeout;
    loop {
        if !unread.is_empty() {
            match head::parse(unread) {
                Head::Partial => {}
                Head::ToHyper => return Ok(None),
                Head::Refused(status) => {
                    let (refusal, body_bytes) = gate::refusal(status);
                    crate::access_log::unparsed(status.as_u16(), body_bytes);
                    super::close_with(socket, &refusal).await;
                    return Err(io::Error::new(io::ErrorKind::InvalidData, "a request head refused"));
                }
                // The rest of a body is taken only if it has already arrived: a body that
                // trickles in goes to hyper, whose reading waits, times out and answers 408.
                Head::Incomplete { total } => match super::read_ready(socket, unread, total)? {
                    true => continue,
                    false => return Ok(None),
                },
                Head::Bare { mut request, body, close } => {
                    // Nothing is held between requests but what a client sent ahead.
                    if let Some(body) = head::take_body(unread, body) {
                        *request.body_mut() = RequestBody::Whole(Some(body));
                    }
                    return Ok(Some((request, close)));
                }
            }
        }
        // Read on the stack and keep only what arrived: the buffer a connection holds is
        // the size of its head, and only until the head is parsed.
        tokio::select! {
            read = super::read_some(socket, unread) => read?,
            () = tokio::time::sleep_until(deadline) => {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "no request head in time"));
            }
            () = app.shutdown.wait() => return Err(io::Error::other("shutting down")),
        }
    }
}

/// Routes `request` and writes its answer, or leaves an SSE answer to `events`. The end of
/// the client's sending side (a half-close, or a hang-up: the two look alike until a write)
/// drops what waits for new data — a long-poll or SSE request, a live answer — and nothing
/// else: any other route and its finished answer go on, and a client that is gone fails the
/// answer's write instead.
async fn answer(
    app: &Arc<App>,
    socket: &TcpStream,
    request: Box<Request<RequestBody>>,
    close: bool,
) -> io::Result<Answered> {
    // The route's state and its response are dropped before the body is sent: only the
    // body (and the send's small state) is held while a live answer waits.
    let (head, framing, mut body, close) = {
        let method = request.method().clone();
        let waits = router::waits_for_data(&method, request.uri());
        let mut route = Box::pin(router::handle(Arc::clone(app), *request));
        let Some(routed) = unless_gone(socket, route.as_mut(), waits).await else {
            return Ok(Answered::Done);
        };
        drop(route);
        let response: Response<Body> = match routed {
            Routed::Now(response) => response,
            // A long-poll: only its own boxed wait is held while it waits.
            Routed::Later(mut waiting) => {
                let Some(response) = unless_gone(socket, waiting.as_mut(), true).await else {
                    return Ok(Answered::Done);
                };
                response
            }
        };
        let close = close || reply::closes(&response);
        let (head, framing) = reply::head(&response, &method, close);
        (head, framing, response.into_body(), close)
    };
    if let Some(SseHandoff { stream, reader }) = sse_handoff(&mut body, framing) {
        return Ok(Answered::Events(Events { stream, reader, head: Some(head), leftover: None, close }));
    }
    let live = matches!(body, Body::Live(_));
    let mut send = std::pin::pin!(reply::send(socket, head, body, framing, app));
    match unless_gone(socket, send.as_mut(), live).await {
        Some(sent) => sent.map(|()| if close { Answered::Done } else { Answered::Again }),
        None => Ok(Answered::Done),
    }
}

/// The SSE reader of an event-stream answer, taken out of its body.
fn sse_handoff(body: &mut Body, framing: Framing) -> Option<SseHandoff> {
    let Body::Live(live) = body else { return None };
    if framing != Framing::Chunked {
        return None;
    }
    let taken = live.as_mut().hand_off()?;
    Some(*taken.downcast::<SseHandoff>().expect("only SSE readers are handed off"))
}

/// Runs `work` to its end, unless `watch` and the client closes its end of the connection
/// first (`None`). Watching stops once the client has sent more (its next request, read
/// after this answer). Polled in place: no readiness future is stored, so a waiting reader
/// stays small.
fn unless_gone<'a, F: Future + ?Sized>(
    socket: &'a TcpStream,
    mut work: Pin<&'a mut F>,
    watch: bool,
) -> impl Future<Output = Option<F::Output>> + 'a {
    let mut watching = watch;
    std::future::poll_fn(move |cx| {
        if let Poll::Ready(output) = work.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        let mut probe = [0u8; 1];
        match watching.then(|| socket.poll_peek(cx, &mut ReadBuf::new(&mut probe))) {
            Some(Poll::Ready(Ok(0) | Err(_))) => return Poll::Ready(None),
            Some(Poll::Ready(Ok(_))) => watching = false,
            Some(Poll::Pending) | None => {}
        }
        Poll::Pending
    })
}

#[cfg(test)]
mod tests {
    /// The bytes of what `f` returns (here: a future), without calling it.
    fn returned_bytes<A, B, C, R>(_: &impl FnOnce(A, B, C) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    /// A bare connection's task is this future: every open connection holds it, between
    /// requests and while a long-poll waits. It stays small because an SSE answer is boxed,
    /// not held in it unboxed, and no wrapper keeps the connection's parts beside it
    /// (docs/performance/code-choices.md).
    #[test]
    fn a_connection_task_stays_small() {
        let bytes = returned_bytes(&super::serve);
        assert!(bytes <= 400, "a bare connection's task is {bytes} bytes");
    }
}
