//! The accept loop: one hyper HTTP/1.1 connection task per client, the connection limit,
//! TLS handshakes, graceful shutdown.
//!
//! Connections get keep-alive, `TCP_NODELAY`, a bounded request head (size and hyper's
//! default of 100 headers), a head read timeout, a write-stall guard ([`StallGuard`]) and
//! small vectored writes joined into one ([`Coalesced`]). A plain TCP socket is shared
//! through a [`SocketLink`], so SSE's fan-out can write to it directly.
//! At most `DS_SERVER__MAX_CONNECTIONS` are served at once; one more gets a canned 503 with
//! `Retry-After` and is closed (at most [`REFUSALS_MAX`] of those at a time, past which a
//! connection is simply closed). With TLS, the handshake runs in the connection's task,
//! bounded by [`HANDSHAKE_TIMEOUT`]. On shutdown the loop stops accepting, live reads end
//! (clients reconnect from their offsets), and in-flight requests get [`DRAIN_TIMEOUT`].

pub mod canned;
pub mod coalesce;
pub mod stall;
pub mod tls;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::app::App;
use crate::direct::socket_link::{LinkedSocket, SocketLink};
use crate::metrics::ErrorKind;
use crate::router::{self, HEAD_BYTES_MAX};
use crate::serve::canned::Canned;
use crate::serve::coalesce::Coalesced;
use crate::serve::stall::StallGuard;

/// Most request headers accepted is hyper's default, 100 (more is refused with 431).
/// How long a client may take to send a request head.
pub const HEAD_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a TLS handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for in-flight requests.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Refused connections being answered at once.
pub const REFUSALS_MAX: usize = 256;
/// How long a refused connection is given to take its 503.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause after a failed accept (such as running out of file descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The answer past the connection limit (sent before reading the request).
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/problem+json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 125\r\n\r\n\
{\"type\":\"urn:ds:problem:too-many-connections\",\"title\":\"Service Unavailable\",\"status\":503,\"detail\":\"connection limit reached\"}";

/// Serves `listener` until the app's shutdown signal fires, then drains.
pub async fn serve(listener: TcpListener, app: Arc<App>, tls: Option<TlsAcceptor>) {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(app.connections_max));
    let refusals = Arc::new(Semaphore::new(REFUSALS_MAX));
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
        tokio::spawn(connection(Arc::clone(&app), socket, peer, tls.clone(), graceful.watcher(), slot));
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => tracing::info!("all connections drained"),
        _ = tokio::time::sleep(DRAIN_TIMEOUT) => tracing::warn!("drain timeout; closing remaining connections"),
    }
}

/// One client connection, from the TLS handshake (if any) to its end; holds its slot.
async fn connection(
    app: Arc<App>,
    socket: TcpStream,
    peer: SocketAddr,
    tls: Option<TlsAcceptor>,
    watcher: Watcher,
    _slot: OwnedSemaphorePermit,
) {
    app.metrics.connections_open.fetch_add(1, Ordering::Relaxed);
    match tls {
        None if app.direct.enabled() => {
            let io = LinkedSocket::new(socket);
            let link = Arc::clone(io.link());
            serve_http(&app, io, Some(link), peer, watcher).await
        }
        None => serve_http(&app, socket, None, peer, watcher).await,
        Some(acceptor) => match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(socket)).await {
            Ok(Ok(stream)) => serve_http(&app, stream, None, peer, watcher).await,
            Ok(Err(error)) => {
                app.metrics.error(ErrorKind::TlsHandshake);
                tracing::debug!(%error, %peer, "TLS handshake failed");
            }
            Err(_) => {
                app.metrics.error(ErrorKind::TlsHandshake);
                tracing::debug!(%peer, "TLS handshake timed out");
            }
        },
    }
    app.metrics.connections_open.fetch_sub(1, Ordering::Relaxed);
}

/// HTTP/1.1 over `io` until the client or the shutdown ends it; `link` is the socket under
/// `io` when the connection is plain TCP.
async fn serve_http<I>(
    app: &Arc<App>,
    io: I,
    link: Option<Arc<SocketLink>>,
    peer: SocketAddr,
    watcher: Watcher,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = StallGuard::new(Coalesced::new(io), app.write_stall_timeout, Arc::clone(&app.metrics));
    let io = Canned::new(io);
    let service_app = Arc::clone(app);
    let service = service_fn(move |request| router::handle(Arc::clone(&service_app), request, &link));
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .keep_alive(true)
        .max_header_size(2 * HEAD_BYTES_MAX)
        .max_buf_size(2 * HEAD_BYTES_MAX)
        .header_read_timeout(HEAD_READ_TIMEOUT)
        .serve_connection(TokioIo::new(io), service);
    match watcher.watch(connection).await {
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

/// Answers 503 without reading the request, then closes after the client's request bytes
/// (so the close is not a reset that could destroy the answer in flight).
async fn refuse(mut socket: TcpStream, _refusal: OwnedSemaphorePermit) {
    let answer = async {
        socket.write_all(REFUSAL).await?;
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
    use std::convert::Infallible;
    use std::io;
    use std::pin::Pin;
    use std::sync::Mutex;
    use std::task::{Context, Poll};

    use bytes::Bytes;
    use tokio::io::ReadBuf;

    use crate::metrics::Metrics;

    /// What the socket under the whole I/O chain saw: bytes written, frames the body had
    /// handed hyper by then, and every flush that came while some of them were not written.
    #[derive(Default)]
    struct Log {
        written: Vec<u8>,
        /// Frames handed over and not yet found in `written` (in order), and where in
        /// `written` to look for the next one.
        pending: std::collections::VecDeque<Vec<u8>>,
        search_from: usize,
        handed: usize,
        flushes: usize,
        early_flushes: Vec<String>,
    }

    impl Log {
        /// Whether every frame handed over is in what was written (found in order).
        fn all_written(&mut self) -> bool {
            while let Some(frame) = self.pending.front() {
                let rest = &self.written[self.search_from..];
                let Some(at) = rest.windows(frame.len()).position(|window| window == frame.as_slice()) else {
                    return false;
                };
                self.search_from += at + frame.len();
                self.pending.pop_front();
            }
            true
        }
    }

    /// The socket: a duplex stream that records what passes through.
    struct Recording {
        inner: tokio::io::DuplexStream,
        log: Arc<Mutex<Log>>,
    }

    impl AsyncRead for Recording {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Recording {
        fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            let written = Pin::new(&mut self.inner).poll_write(cx, buf);
            if let Poll::Ready(Ok(count)) = &written {
                self.log.lock().unwrap().written.extend_from_slice(&buf[..*count]);
            }
            written
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            {
                let mut log = self.log.lock().unwrap();
                log.flushes += 1;
                if !log.all_written() {
                    let note = format!("flush {} before every handed frame was written", log.flushes);
                    log.early_flushes.push(note);
                }
            }
            Pin::new(&mut self.inner).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    /// A body of `count` frames of mixed sizes, each noted in the log as it is handed over.
    struct Frames {
        log: Arc<Mutex<Log>>,
        next: usize,
        count: usize,
    }

    impl http_body::Body for Frames {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
            if self.next == self.count {
                return Poll::Ready(None);
            }
            let size = [40, 3_000, 70_000][self.next % 3];
            let mut frame = format!("<frame {:04}>", self.next).into_bytes();
            frame.resize(size, b'.');
            self.next += 1;
            let mut log = self.log.lock().unwrap();
            log.handed += 1;
            log.pending.push_back(frame.clone());
            drop(log);
            Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from(frame)))))
        }
    }

    /// What the SSE direct path relies on (`crate::direct`): through the server's whole I/O
    /// chain, the socket sees a flush only once every byte of every frame the body handed
    /// hyper has been written to it. A hyper (or wrapper) change that breaks this fails here.
    #[tokio::test]
    async fn the_socket_is_flushed_only_after_every_handed_frame_is_written() {
        let log = Arc::new(Mutex::new(Log::default()));
        let (server_end, mut client) = tokio::io::duplex(1 << 16);
        let socket = Recording { inner: server_end, log: Arc::clone(&log) };
        let io =
            StallGuard::new(Coalesced::new(socket), Duration::from_secs(10), Arc::new(Metrics::default()));
        let body_log = Arc::clone(&log);
        let service = service_fn(move |_request| {
            let body = Frames { log: Arc::clone(&body_log), next: 0, count: 60 };
            async move { Ok::<_, Infallible>(hyper::Response::new(body)) }
        });
        let server = tokio::spawn(
            http1::Builder::new()
                .timer(TokioTimer::new())
                .serve_connection(TokioIo::new(Canned::new(io)), service),
        );
        client.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut response = Vec::new();
        client.read_to_end(&mut response).await.unwrap();
        server.await.unwrap().unwrap();
        let log = log.lock().unwrap();
        assert_eq!(log.handed, 60, "the whole body was sent");
        assert!(log.flushes > 1, "hyper flushed as it went ({} flushes)", log.flushes);
        assert_eq!(log.early_flushes, Vec::<String>::new());
    }

    #[test]
    fn the_refusal_is_a_complete_response() {
        let text = std::str::from_utf8(REFUSAL).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "));
        assert!(head.contains(&format!("content-length: {}", body.len())), "{head}");
        let document: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(document["status"], 503);
    }
}
