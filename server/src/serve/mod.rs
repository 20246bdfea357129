//! The accept loop: one connection task per client (the bare front, or hyper's HTTP/1.1 or
//! HTTP/2), the connection limit, TLS handshakes, graceful shutdown.
//!
//! Connections get keep-alive, `TCP_NODELAY`, a congestion control that does not pace when
//! they come from this host (`crate::congestion`), a bounded request head (size and hyper's
//! default of 100 headers), an idle and head read timeout, a write-stall guard
//! ([`StallGuard`]), small vectored writes joined into one ([`Coalesced`]), request heads
//! judged before hyper reads them, so that a malformed one is answered as a problem document
//! ([`Gated`]) and, where hyper
//! closes a connection the client is still sending on, a lingering close ([`Lingering`]).
//! A plain TCP connection starts in the bare front (`bare`: ds's own lean HTTP/1.1 for
//! requests without a body and short ones whose body arrived with the head), which hands it
//! to hyper at its first request with a body it does not take (chunked, long, arriving);
//! `DS_SERVER__BARE_FRONT=false` gives every connection to hyper from the start, and TLS
//! connections always go to hyper.
//! hyper speaks HTTP/2 (`http2`) to a plain connection that opens with its preface and to a
//! TLS connection whose ALPN chose `h2`, HTTP/1.1 to any other.
//! At most `DS_SERVER__MAX_CONNECTIONS` are served at once; one more gets a canned 503 with
//! `Retry-After` and is closed (at most [`REFUSALS_MAX`] of those at a time, past which a
//! connection is simply closed). With TLS, the handshake runs in the connection's task,
//! bounded by [`HANDSHAKE_TIMEOUT`]. On shutdown the loop stops accepting, live reads end
//! (clients reconnect from their offsets), and in-flight requests get [`DRAIN_TIMEOUT`].

pub(crate) mod bare;
pub(crate) mod coalesce;
pub(crate) mod gate;
pub(crate) mod http2;
mod http2_watch;
mod linger;
mod preface;
mod prefixed;
pub(crate) mod stall;
pub(crate) mod tls;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::app::App;
use crate::http::request_body::RequestBody;
use crate::metrics::ErrorKind;
use crate::router::{self, HEAD_BYTES_MAX};
use crate::serve::bare::Parking;
use crate::serve::coalesce::Coalesced;
use crate::serve::gate::Gated;
use crate::serve::linger::Lingering;
use crate::serve::stall::StallGuard;

/// Most request headers accepted is hyper's default, 100 (more is refused with 431). How
/// long a client may take to send a request head, and a keep-alive connection may wait for
/// its next one, is `App::idle_timeout`.
/// How long a TLS handshake may take.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for in-flight requests.
pub(crate) const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Refused connections being answered at once.
pub(crate) const REFUSALS_MAX: usize = 256;
/// How long a refused connection is given to take its 503.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause after a failed accept (such as running out of file descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The answer past the connection limit (sent before reading the request), with the
/// headers every answer carries.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/problem+json\r\ncache-control: no-store\r\nx-content-type-options: nosniff\r\n\
cross-origin-resource-policy: cross-origin\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 125\r\n\r\n\
{\"type\":\"urn:ds:problem:too-many-connections\",\"title\":\"Service Unavailable\",\"status\":503,\"detail\":\"connection limit reached\"}";

/// Serves `listener` until the app's shutdown signal fires, then drains. Readers the bare
/// front parks (`bare::Parking`) belong to this loop's lots.
pub(crate) async fn serve(listener: TcpListener, app: Arc<App>, tls: Option<TlsAcceptor>) {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(app.connections_max));
    let refusals = Arc::new(Semaphore::new(REFUSALS_MAX));
    let parking = Arc::new(Parking::default());
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = app.shutdown.wait() => break,
        };
        let (socket, peer) = match accepted {
            Ok(connection) => connection,
            Err(error) => {
                app.metrics.error(ErrorKind::Accept);
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            app.metrics.connections_refused.fetch_add(1, Ordering::Relaxed);
            if let Ok(refusal) = Arc::clone(&refusals).try_acquire_owned() {
                tokio::spawn(refuse(socket, refusal));
            }
            continue;
        };
        if let Err(error) = socket.set_nodelay(true) {
            tracing::debug!(%error, %peer, "cannot set TCP_NODELAY");
        }
        if let Some(algorithm) = app.local_tcp_congestion.as_deref() {
            crate::congestion::apply(&socket, peer, algorithm);
        }
        let watcher = graceful.watcher();
        let open = OpenConnection::new(Arc::clone(&app), slot);
        match tls.clone() {
            // A bare connection's task is the bare front's own future and nothing around it
            // (what a waiting request holds is its socket and a few pointers).
            None if app.bare_front => {
                let conn = bare::Conn::new(socket, peer, watcher, open);
                tokio::spawn(bare::serve(Arc::clone(&parking), conn, None));
            }
            tls => {
                tokio::spawn(connection(Arc::clone(&app), socket, peer, tls, watcher, open));
            }
        }
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => tracing::info!("all connections drained"),
        _ = tokio::time::sleep(DRAIN_TIMEOUT) => tracing::warn!("drain timeout; closing remaining connections"),
    }
}

/// One client connection served by hyper (TLS, or the bare front turned off), from the TLS
/// handshake (if any) to its end; `open` holds its slot until then.
async fn connection(
    app: Arc<App>,
    socket: TcpStream,
    peer: SocketAddr,
    tls: Option<TlsAcceptor>,
    watcher: Watcher,
    open: OpenConnection,
) {
    // hyper's connection state (and a TLS session) is boxed.
    match tls {
        None if app.http2 => Box::pin(serve_plain(&app, socket, peer, watcher, Vec::new())).await,
        None => Box::pin(serve_http1(&app, socket, peer, watcher)).await,
        Some(acceptor) => Box::pin(serve_tls(&app, acceptor, socket, peer, watcher)).await,
    }
    drop(open);
}

/// A plain connection served by hyper from its first byte not yet served (`unread` holds
/// the bytes already read): HTTP/2 if it opens with the preface, else HTTP/1.1.
pub(crate) async fn serve_plain(
    app: &Arc<App>,
    mut socket: TcpStream,
    peer: SocketAddr,
    watcher: Watcher,
    mut unread: Vec<u8>,
) {
    if app.http2 {
        if let Err(error) = http2::sniff(app, &mut socket, &mut unread).await {
            tracing::debug!(%error, %peer, "connection ended before its first request");
            return;
        }
    }
    let http2 = app.http2 && http2::opens_http2(&unread);
    let (reader, writer) = socket.into_split();
    let io = tokio::io::join(prefixed::Prefixed::new(unread, reader), writer);
    match http2 {
        // Boxed: an HTTP/2 connection's state is several times an HTTP/1 one's, and would
        // otherwise be part of every plain connection's future.
        true => Box::pin(http2::serve(app, io, peer, watcher)).await,
        false => serve_http1(app, io, peer, watcher).await,
    }
}

/// A connection counted in `connections_open`, holding its slot under the connection limit,
/// until dropped (the bare front moves it with the connection when it parks a reader).
pub(crate) struct OpenConnection {
    app: Arc<App>,
    _slot: OwnedSemaphorePermit,
}

impl OpenConnection {
    fn new(app: Arc<App>, slot: OwnedSemaphorePermit) -> OpenConnection {
        app.metrics.connections_open.fetch_add(1, Ordering::Relaxed);
        OpenConnection { app, _slot: slot }
    }

    pub(crate) fn app(&self) -> &Arc<App> {
        &self.app
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.app.metrics.connections_open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A TLS handshake bounded by [`HANDSHAKE_TIMEOUT`], then HTTP/2 if ALPN chose `h2`, else
/// HTTP/1.1, through hyper.
async fn serve_tls(
    app: &Arc<App>,
    acceptor: TlsAcceptor,
    socket: TcpStream,
    peer: SocketAddr,
    watcher: Watcher,
) {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(socket)).await {
        Ok(Ok(stream)) if stream.get_ref().1.alpn_protocol() == Some(tls::ALPN_HTTP2) => {
            http2::serve(app, stream, peer, watcher).await;
        }
        Ok(Ok(stream)) => serve_http1(app, stream, peer, watcher).await,
        Ok(Err(error)) => {
            app.metrics.error(ErrorKind::TlsHandshake);
            tracing::debug!(%error, %peer, "TLS handshake failed");
        }
        Err(_) => {
            app.metrics.error(ErrorKind::TlsHandshake);
            tracing::debug!(%peer, "TLS handshake timed out");
        }
    }
}

/// HTTP/1.1 through hyper over `io` until the client or the shutdown ends it.
async fn serve_http1<I>(app: &Arc<App>, io: I, peer: SocketAddr, watcher: Watcher)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = Gated::new(guarded(app, Lingering::new(io, Arc::clone(&app.metrics))));
    let service_app = Arc::clone(app);
    // hyper keeps the answer's future in a slot of the connection's own, sized for it, for
    // the connection's whole life. So the route's future (several KB) is made inside the
    // answer, in a box freed with it: an idle connection holds none of it (and one made
    // outside and captured would be held twice over, captured and awaited).
    let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
        let app = Arc::clone(&service_app);
        async move {
            let routed = Box::pin(router::handle(app, request.map(RequestBody::Streamed))).await;
            Ok::<_, std::convert::Infallible>(routed.resolve().await)
        }
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .keep_alive(true)
        // The end of the stream in the middle of a request does not drop it: the gate ends
        // the stream at a refused head while hyper still answers the requests before it,
        // and a client that half-closes after its request still gets the answer.
        .half_close(true)
        .max_header_size(2 * HEAD_BYTES_MAX)
        .max_buf_size(2 * HEAD_BYTES_MAX)
        .header_read_timeout(app.idle_timeout)
        .serve_connection(TokioIo::new(io), service);
    connection_ended(app, peer, watcher.watch(connection).await);
}

/// A connection's I/O as hyper gets it: a blocked write fails after the stall timeout,
/// small vectored writes go out as one.
fn guarded<I: AsyncRead + AsyncWrite>(app: &App, io: I) -> StallGuard<Coalesced<I>> {
    StallGuard::new(Coalesced::new(io), app.write_stall_timeout, Arc::clone(&app.metrics))
}

/// Bytes asked of the socket per read before a connection's first request is known, on the
/// stack (most heads are a few hundred bytes).
const READ_BYTES: usize = 4096;

/// Waits for bytes from `socket` and appends what it has (up to [`READ_BYTES`], read on the
/// stack) to `unread`; the end of the stream is an error, as a request was still to come.
/// Read through tokio's `poll_read`, which takes a short read as proof that the socket is
/// drained: the next wait parks at once, where a `try_read` after a readiness wait would
/// first ask the socket again and get `EAGAIN` (one more `recvfrom` per request).
async fn read_some(socket: &mut TcpStream, unread: &mut Vec<u8>) -> std::io::Result<()> {
    std::future::poll_fn(|cx| {
        // Not zeroed first: the socket fills what it returns (4 KiB of `memset` a read saved).
        let mut chunk = [std::mem::MaybeUninit::<u8>::uninit(); READ_BYTES];
        let mut filled = ReadBuf::uninit(&mut chunk);
        std::task::ready!(std::pin::Pin::new(&mut *socket).poll_read(cx, &mut filled))?;
        if filled.filled().is_empty() {
            return std::task::Poll::Ready(Err(std::io::ErrorKind::UnexpectedEof.into()));
        }
        unread.extend_from_slice(filled.filled());
        std::task::Poll::Ready(Ok(()))
    })
    .await
}

/// Appends to `unread` what `socket` holds already, without waiting, until `unread` is at
/// least `total` bytes long (read straight into its room, reserved for exactly that): true
/// when it got there, false when the socket ran dry first. The end of the stream is an
/// error, as a request was still arriving.
fn read_ready(socket: &TcpStream, unread: &mut Vec<u8>, total: usize) -> std::io::Result<bool> {
    unread.reserve(total.saturating_sub(unread.len()));
    while unread.len() < total {
        match socket.try_read_buf(unread) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
            Err(error) => return Err(error),
        }
    }
    Ok(true)
}

/// Logs how a hyper connection ended (and counts it when it was an error).
fn connection_ended(app: &App, peer: SocketAddr, ended: Result<(), hyper::Error>) {
    match ended {
        Ok(()) => {}
        // A client hanging up (an SSE or long-poll reader leaving, say) is no error.
        Err(error) if client_went_away(&error) => tracing::debug!(%error, %peer, "client went away"),
        Err(error) => {
            app.metrics.error(ErrorKind::Connection);
            tracing::debug!(%error, %peer, "connection ended with an error");
        }
    }
}

/// Whether a connection's error only says the client closed it.
fn client_went_away(error: &hyper::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    if error.is_incomplete_message() || error.is_canceled() || error.is_closed() {
        return true;
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return matches!(io.kind(), BrokenPipe | ConnectionReset | ConnectionAborted | UnexpectedEof);
        }
        source = cause.source();
    }
    false
}

/// Answers 503 without reading the request, then closes.
async fn refuse(mut socket: TcpStream, _refusal: OwnedSemaphorePermit) {
    close_with(&mut socket, REFUSAL).await;
}

/// Writes `answer`, then closes after what the client still sends (so the close is not a
/// reset that could destroy the answer in flight), within [`REFUSAL_TIMEOUT`].
pub(crate) async fn close_with(socket: &mut TcpStream, answer: &[u8]) {
    let answer = async {
        socket.write_all(answer).await?;
        socket.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut drained = 0;
        while drained < HEAD_BYTES_MAX {
            match socket.read(&mut sink).await? {
                0 => break,
                read => drained += read,
            }
        }
        Ok::<(), std::io::Error>(())
    };
    let _ = tokio::time::timeout(REFUSAL_TIMEOUT, answer).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_is_a_complete_response() {
        let text = std::str::from_utf8(REFUSAL).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "));
        assert!(head.contains(&format!("content-length: {}", body.len())), "{head}");
        for every_answer in
            ["cache-control: no-store", "x-content-type-options: nosniff", "cross-origin-resource-policy"]
        {
            assert!(head.contains(every_answer), "{head}");
        }
        let document: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(document["status"], 503);
    }
}
