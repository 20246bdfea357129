//! A lingering close: a connection the server closes while the client is still sending is
//! read to its end (briefly, and up to a bound) before its socket is closed.
//!
//! When the server ends a connection whose request body it left unread (a body too large for
//! its route, or refused before it was read: the answer says `Connection: close`), closing
//! the socket with those bytes still unread makes the kernel send a reset, not an orderly
//! end — and a reset that reaches the client before it has read the answer destroys the
//! answer: the client sees "connection reset" instead of, say, its 413. [`Lingering`] sits
//! under hyper: once hyper has shut the connection's write side (the answer and the end of
//! it are on their way) and dropped the connection, the read side is handed to a task that
//! reads and discards what the client still sends, until the client closes its side,
//! [`LINGER_BYTES_MAX`] bytes or [`LINGER_MS`] — the answer has reached the client by then —
//! and only then closes the socket. A connection the client closed first (its end was read)
//! needs none of this. At most [`CONNECTIONS_LINGERING_MAX`] connections linger at once,
//! so that they cannot hold descriptors without bound; past that a connection is closed at
//! once, as without this wrapper. `ds_connections_lingering` shows how many linger.

use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

use crate::metrics::{Metrics, CONNECTIONS_LINGERING_MAX};

/// Longest a closed connection is read before its socket is closed (milliseconds).
const LINGER_MS: u64 = 2000;
/// Most bytes read from a closed connection before its socket is closed.
const LINGER_BYTES_MAX: usize = 16 << 20;
/// Bytes read per call while lingering (a buffer of each lingering connection's own).
const SCRATCH_BYTES: usize = 16 << 10;

/// An I/O object that lingers when dropped after its write side was shut while the peer
/// had not ended its own.
pub(super) struct Lingering<I: AsyncRead + Unpin + Send + 'static> {
    /// Taken by the lingering task on drop.
    inner: Option<I>,
    /// The write side was shut (the server is closing the connection).
    shut: bool,
    /// A read found the end of what the client sends.
    ended: bool,
    /// Where the lingering connections are counted (and their number bounded).
    metrics: Arc<Metrics>,
}

impl<I: AsyncRead + Unpin + Send + 'static> Lingering<I> {
    pub(super) fn new(inner: I, metrics: Arc<Metrics>) -> Lingering<I> {
        Lingering { inner: Some(inner), shut: false, ended: false, metrics }
    }

    fn inner(&mut self) -> &mut I {
        self.inner.as_mut().expect("the inner I/O is only taken on drop")
    }
}

impl<I: AsyncRead + Unpin + Send + 'static> Drop for Lingering<I> {
    fn drop(&mut self) {
        if !self.shut || self.ended {
            return;
        }
        let (Some(inner), Ok(runtime)) = (self.inner.take(), tokio::runtime::Handle::try_current()) else {
            return;
        };
        let Some(slot) = LingerSlot::take(&self.metrics) else {
            return;
        };
        runtime.spawn(async move {
            let _ = tokio::time::timeout(Duration::from_millis(LINGER_MS), discard_until_end(inner)).await;
            drop(slot);
        });
    }
}

/// One of the [`CONNECTIONS_LINGERING_MAX`] places to linger, counted in the metrics' gauge
/// and given back when dropped (also when the lingering task is dropped unrun, at a
/// runtime's shutdown).
struct LingerSlot {
    metrics: Arc<Metrics>,
}

impl LingerSlot {
    fn take(metrics: &Arc<Metrics>) -> Option<LingerSlot> {
        let before = metrics.connections_lingering.fetch_add(1, Ordering::Relaxed);
        if before >= CONNECTIONS_LINGERING_MAX {
            metrics.connections_lingering.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(LingerSlot { metrics: Arc::clone(metrics) })
    }
}

impl Drop for LingerSlot {
    fn drop(&mut self) {
        let before = self.metrics.connections_lingering.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(before > 0, "a linger slot is given back once");
    }
}

/// Reads `io` until its end, an error or [`LINGER_BYTES_MAX`] bytes, keeping nothing.
async fn discard_until_end<I: AsyncRead + Unpin>(mut io: I) {
    let mut scratch = vec![0u8; SCRATCH_BYTES];
    let mut read_bytes = 0;
    while read_bytes < LINGER_BYTES_MAX {
        match io.read(&mut scratch).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read_bytes += read,
        }
    }
}

impl<I: AsyncRead + Unpin + Send + 'static> AsyncRead for Lingering<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let room = buf.remaining();
        let filled = buf.filled().len();
        let result = Pin::new(self.inner()).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && room > 0 && buf.filled().len() == filled {
            self.ended = true;
        }
        result
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin + Send + 'static> AsyncWrite for Lingering<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(self.inner()).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(self.inner()).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.as_ref().is_some_and(AsyncWrite::is_write_vectored)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.inner()).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.shut = true;
        Pin::new(self.inner()).poll_shutdown(cx)
    }
}
