//! A connection wrapper that fails a write the client has not taken for too long.
//!
//! Responses are pulled from the store as the socket drains (see `crate::live::sse`), so
//! what a slow reader holds in this process is bounded: one frame of at most
//! `FRAME_STORED_BYTES_MAX` stored bytes plus hyper's write buffer. What is not bounded by
//! that is time: a client that stops reading would hold its connection, its slot under the
//! connection limit and its stream subscription forever. [`StallGuard`] ends that: when a
//! write stays blocked for `DS_SERVER__WRITE_STALL_TIMEOUT_SECS`, the write fails, hyper
//! closes the connection, and the client reconnects from the last offset it received
//! (nothing is lost: the data stays in the stream).

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::metrics::{ErrorKind, Metrics};

/// An I/O object whose writes give up after a stall of `timeout`.
pub(crate) struct StallGuard<I> {
    inner: I,
    timeout: Duration,
    /// Armed while a write is blocked; re-armed at the first block after progress.
    timer: Pin<Box<Sleep>>,
    armed: bool,
    metrics: Arc<Metrics>,
}

impl<I> StallGuard<I> {
    pub(crate) fn new(inner: I, timeout: Duration, metrics: Arc<Metrics>) -> StallGuard<I> {
        StallGuard { inner, timeout, timer: Box::pin(tokio::time::sleep(timeout)), armed: false, metrics }
    }

    /// Passes a finished write through (disarming); a blocked one checks the timer.
    fn guard<T>(&mut self, cx: &mut Context<'_>, result: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if result.is_ready() {
            self.armed = false;
            return result;
        }
        if !self.armed {
            self.armed = true;
            self.timer.as_mut().reset(Instant::now() + self.timeout);
        }
        if self.timer.as_mut().poll(cx).is_ready() {
            self.metrics.error(ErrorKind::WriteStall);
            tracing::debug!(timeout_secs = self.timeout.as_secs(), "client stopped reading; closing");
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "client stopped reading")));
        }
        Poll::Pending
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for StallGuard<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for StallGuard<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.guard(cx, result)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.guard(cx, result)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let result = Pin::new(&mut self.inner).poll_flush(cx);
        self.guard(cx, result)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test(start_paused = true)]
    async fn a_write_the_peer_never_takes_fails_after_the_timeout() {
        let (client, _server) = tokio::io::duplex(64);
        let metrics = Arc::new(Metrics::default());
        let mut guarded = StallGuard::new(client, Duration::from_secs(5), Arc::clone(&metrics));
        guarded.write_all(&[7; 64]).await.expect("fits in the pipe");
        let error = guarded.write_all(&[7; 64]).await.expect_err("the peer reads nothing");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        let stats = Default::default();
        let engine = crate::metrics::EngineView {
            stats: &stats,
            shards: &[],
            disk: false,
            flushes: None,
            zero_waits: None,
        };
        let text = crate::metrics::render(&metrics, Default::default(), engine);
        assert!(text.contains("ds_errors_total{kind=\"write-stall\"} 1"), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_but_moving_peer_is_not_cut() {
        let (client, mut server) = tokio::io::duplex(64);
        let metrics = Arc::new(Metrics::default());
        let mut guarded = StallGuard::new(client, Duration::from_secs(5), metrics);
        let reader = tokio::spawn(async move {
            let mut buf = [0; 64];
            let mut total = 0;
            while total < 640 {
                tokio::time::sleep(Duration::from_secs(3)).await;
                total += tokio::io::AsyncReadExt::read(&mut server, &mut buf).await.unwrap();
            }
            total
        });
        guarded.write_all(&[7; 640]).await.expect("each block is shorter than the timeout");
        assert_eq!(reader.await.unwrap(), 640);
    }
}
