//! HTTP/2: which connections speak it, and what one may hold.
//!
//! PROTOCOL.md asks servers to support HTTP/2's streaming (a browser multiplexes all its
//! live reads of an origin over one connection instead of six). A client speaks it with
//! prior knowledge on plain TCP — it opens with the connection preface, which the bare
//! front reads as a head it leaves to hyper, or [`sniff`] reads when the bare front is off —
//! or by ALPN `h2` on TLS (`super::tls`). hyper serves the connection
//! (`hyper::server::conn::http2`); every request goes through the router as on HTTP/1.1,
//! live reads as hyper bodies. `DS_SERVER__HTTP2=false` turns it off (the preface is then
//! an HTTP/1.1 request hyper refuses, and ALPN offers `http/1.1` only).
//!
//! Limits. A connection takes at most [`STREAMS_PER_CONNECTION_MAX`] requests at once (the
//! client is told in its settings), and all HTTP/2 connections together at most
//! `DS_SERVER__MAX_CONNECTIONS` (`App::http2_streams`): one more is answered 503
//! `too-many-requests` with `Retry-After`, so a multiplexed connection can hold no more
//! than as many connections could. Each request holds its permit until its answer's body
//! ends or is dropped ([`Held`]). An answer is handed to hyper in pieces, and what it may
//! queue for a client that does not read it is [`SEND_BUFFER_BYTES_MAX`] more (flow
//! control then stops the body being pulled); a request body the client may send ahead of
//! its reading is hyper's 1 MiB window. The connection preface must arrive within the idle
//! timeout (`super::preface`); after it, a connection whose peer stops answering pings for
//! [`PING_TIMEOUT`] is closed, the write stall guard closes one whose client stops reading
//! altogether, and the connection's watch (`super::http2_watch`) one with an answer stalled
//! in flow control or, after a GOAWAY, one with no request open for the idle timeout.
//! Header lists are bounded as HTTP/1.1 heads are; hyper's resets-per-connection limits
//! stand against rapid resets.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Body as _;
use hyper::header::RETRY_AFTER;
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::Watcher;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::http2_watch::{ConnectionWatch, Held, Verdict};
use super::preface::PrefaceDeadline;
use crate::access_log::AccessRecord;
use crate::app::App;
use crate::http::problem::Problem;
use crate::http::request_body::RequestBody;
use crate::http::response::finish;
use crate::metrics::ErrorKind;
use crate::router::{self, HEAD_BYTES_MAX};

/// How an HTTP/2 connection opens: the preface's first part, an HTTP/1.1-shaped head that no
/// HTTP/1.1 client sends.
pub(crate) const PREFACE_HEAD: &[u8] = b"PRI * HTTP/2.0\r\n\r\n";
/// Requests one connection may have open at once (its `SETTINGS_MAX_CONCURRENT_STREAMS`).
pub(crate) const STREAMS_PER_CONNECTION_MAX: u32 = 100;
/// Bytes of one answer queued for a client that has not taken them (beyond the piece hyper
/// holds, `http2_watch::PIECE_BYTES_MAX`).
const SEND_BUFFER_BYTES_MAX: usize = 16 * 1024;
/// How often an idle connection's peer is pinged, and how long it has to answer.
const PING_INTERVAL: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(20);

/// Whether a connection whose first bytes are `first` speaks HTTP/2 (with prior knowledge).
pub(crate) fn opens_http2(first: &[u8]) -> bool {
    first.starts_with(PREFACE_HEAD)
}

/// Reads a plain connection's first bytes into `unread` until they tell HTTP/2's preface
/// from anything else ([`opens_http2`]), within the head read timeout (and unless the server
/// is stopping).
pub(crate) async fn sniff(app: &App, socket: &mut TcpStream, unread: &mut Vec<u8>) -> io::Result<()> {
    let deadline = Instant::now() + app.idle_timeout;
    while unread.len() < PREFACE_HEAD.len() && PREFACE_HEAD.starts_with(unread) {
        tokio::select! {
            read = super::read_some(socket, unread) => read?,
            () = tokio::time::sleep_until(deadline) => {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "no request in time"));
            }
            () = app.shutdown.wait() => return Err(io::Error::other("shutting down")),
        }
    }
    Ok(())
}

/// HTTP/2 through hyper over `io` until the client, the server's shutdown or the
/// connection's watch (`super::http2_watch`) ends it; `watcher` is held until then, so the
/// server's drain waits for it.
pub(crate) async fn serve<I>(app: &Arc<App>, io: I, peer: SocketAddr, watcher: Watcher)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    app.metrics.http2_connections.fetch_add(1, Ordering::Relaxed);
    let watch = Arc::new(ConnectionWatch::new());
    let (service_app, service_watch) = (Arc::clone(app), Arc::clone(&watch));
    let service = service_fn(move |request: Request<hyper::body::Incoming>| {
        let (app, watch) = (Arc::clone(&service_app), Arc::clone(&service_watch));
        async move { Ok::<_, std::convert::Infallible>(answer(app, &watch, request).await) }
    });
    let connection = http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .max_concurrent_streams(STREAMS_PER_CONNECTION_MAX)
        .max_header_list_size(2 * HEAD_BYTES_MAX as u32)
        .max_send_buf_size(SEND_BUFFER_BYTES_MAX)
        .keep_alive_interval(PING_INTERVAL)
        .keep_alive_timeout(PING_TIMEOUT)
        .serve_connection(
            TokioIo::new(super::guarded(app, PrefaceDeadline::new(io, app.idle_timeout))),
            service,
        );
    if let Some(ended) = watched(app, connection, &watch, peer).await {
        super::connection_ended(app, peer, ended);
    }
    drop(watcher);
}

/// Drives `connection` to its end (`Some`), or until its watch says to drop it (`None`):
/// GOAWAY when the server stops or the connection is idle; dropped when an answer stalls
/// or the connection has not ended a write-stall timeout after its GOAWAY.
async fn watched<C>(app: &App, connection: C, watch: &ConnectionWatch, peer: SocketAddr) -> Option<C::Output>
where
    C: Future + GoAway,
{
    let (stall, idle) = (app.write_stall_timeout, app.idle_timeout);
    let tick = stall.min(idle) / 2;
    let mut connection = std::pin::pin!(connection);
    let mut going_away_since: Option<Instant> = None;
    loop {
        tokio::select! {
            ended = connection.as_mut() => return Some(ended),
            () = app.shutdown.wait(), if going_away_since.is_none() => {
                connection.as_mut().go_away();
                going_away_since = Some(Instant::now());
            }
            () = tokio::time::sleep(tick) => match (watch.verdict(stall, idle), going_away_since) {
                (Verdict::Stalled, _) => {
                    app.metrics.error(ErrorKind::WriteStall);
                    tracing::debug!(%peer, stall_secs = stall.as_secs(), "an HTTP/2 answer stalled; closing");
                    return None;
                }
                (_, Some(since)) if since.elapsed() >= stall => {
                    tracing::debug!(%peer, "an HTTP/2 connection did not end after GOAWAY; closing");
                    return None;
                }
                (Verdict::Idle, None) => {
                    connection.as_mut().go_away();
                    going_away_since = Some(Instant::now());
                }
                _ => {}
            },
        }
    }
}

/// A connection that can be asked to finish what it serves and take nothing new.
trait GoAway {
    fn go_away(self: Pin<&mut Self>);
}

impl<I, S, E, B> GoAway for http2::Connection<I, S, E>
where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: http_body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, B>,
{
    fn go_away(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

/// One request: routed under a permit of the HTTP/2 budget, or refused without one.
async fn answer(
    app: Arc<App>,
    watch: &Arc<ConnectionWatch>,
    request: Request<hyper::body::Incoming>,
) -> Response<Held> {
    let open = watch.begin();
    let Ok(permit) = Arc::clone(&app.http2_streams).try_acquire_owned() else {
        app.metrics.http2_refused.fetch_add(1, Ordering::Relaxed);
        let access = AccessRecord::begin(&request);
        let origin = request.headers().get(hyper::header::ORIGIN).cloned();
        let problem = Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too-many-requests",
            "the server has as many HTTP/2 requests open as it takes; retry shortly",
        );
        let mut refusal =
            problem.with_header(RETRY_AFTER, hyper::header::HeaderValue::from_static("1")).into_response();
        finish(&mut refusal, &app.cors, origin.as_ref());
        if let Some(access) = access {
            access.finish(refusal.status().as_u16(), refusal.body().size_hint().exact());
        }
        return refusal.map(|body| open.hold(body, None));
    };
    let routed = router::handle(Arc::clone(&app), request.map(RequestBody::Streamed));
    routed.await.resolve().await.map(|body| open.hold(body, Some(permit)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_preface_opens_http2() {
        assert!(opens_http2(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"));
        assert!(opens_http2(PREFACE_HEAD));
        assert!(!opens_http2(b"PRI * HTTP/2.0\r\n"), "a partial preface is not yet HTTP/2");
        assert!(!opens_http2(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
        assert!(!opens_http2(b"PRI * HTTP/1.1\r\n\r\n"));
    }
}
