//! The accept loop: one hyper HTTP/1.1 connection task per client, graceful shutdown.
//!
//! Connections get keep-alive, `TCP_NODELAY`, a bounded request head (size and hyper's
//! default of 100 headers), and a head read timeout. On shutdown the loop stops accepting, live reads end (clients
//! reconnect from their offsets), and in-flight requests get [`DRAIN_TIMEOUT`] to finish.

use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use crate::app::App;
use crate::router;

/// Largest request head (request line and headers) accepted, in bytes.
pub const HEAD_BYTES_MAX: usize = 64 * 1024;
/// Most request headers accepted is hyper's default, 100 (more is refused with 431).
/// How long a client may take to send a request head.
pub const HEAD_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long shutdown waits for in-flight requests.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed accept (such as running out of file descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Serves `listener` until the app's shutdown signal fires, then drains.
pub async fn serve(listener: TcpListener, app: Arc<App>) {
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = app.shutdown.wait() => break,
        };
        let (socket, peer) = match accepted {
            Ok(connection) => connection,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        if let Err(error) = socket.set_nodelay(true) {
            tracing::debug!(%error, %peer, "cannot set TCP_NODELAY");
        }
        let service_app = Arc::clone(&app);
        let service = service_fn(move |request| router::handle(Arc::clone(&service_app), request));
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .keep_alive(true)
            .max_header_size(HEAD_BYTES_MAX)
            .header_read_timeout(HEAD_READ_TIMEOUT)
            .serve_connection(TokioIo::new(socket), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, %peer, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => tracing::info!("all connections drained"),
        _ = tokio::time::sleep(DRAIN_TIMEOUT) => tracing::warn!("drain timeout; closing remaining connections"),
    }
}
