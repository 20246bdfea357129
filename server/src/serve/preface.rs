//! A deadline for the HTTP/2 connection preface.
//!
//! hyper's HTTP/2 server (the `h2` crate) waits for a client's 24-byte connection preface
//! without a time limit, and its keep-alive pings only start once the preface is in: a
//! client that sends part of it (or, after ALPN `h2`, nothing) would hold its connection and
//! its slot under the connection limit for ever. [`PrefaceDeadline`] fails the connection's
//! reads once the deadline passes with the preface still incomplete, as an HTTP/1.1 head
//! must arrive within the idle timeout (`DS_SERVER__IDLE_TIMEOUT_SECS`); after the preface
//! it passes reads through and holds no timer.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// The HTTP/2 client connection preface's length in bytes (RFC 9113 §3.4).
const PREFACE_BYTES: usize = 24;

/// An I/O object whose reads fail when the first [`PREFACE_BYTES`] do not arrive in time.
pub(super) struct PrefaceDeadline<I> {
    inner: I,
    /// Preface bytes still to come.
    awaited: usize,
    /// Armed until the preface is in.
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<I> PrefaceDeadline<I> {
    pub(super) fn new(inner: I, timeout: Duration) -> PrefaceDeadline<I> {
        PrefaceDeadline {
            inner,
            awaited: PREFACE_BYTES,
            deadline: Some(Box::pin(tokio::time::sleep(timeout))),
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for PrefaceDeadline<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let filled_before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        let Some(deadline) = self.deadline.as_mut() else { return result };
        if result.is_pending() {
            if deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no HTTP/2 preface in time",
                )));
            }
            return Poll::Pending;
        }
        let read = buf.filled().len() - filled_before;
        self.awaited = self.awaited.saturating_sub(read);
        if self.awaited == 0 {
            self.deadline = None;
        }
        result
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for PrefaceDeadline<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    #[test]
    fn the_preface_is_as_long_as_rfc_9113_says() {
        assert_eq!(PREFACE.len(), PREFACE_BYTES);
    }

    #[tokio::test(start_paused = true)]
    async fn a_preface_cut_short_fails_the_reads_at_the_deadline() {
        let (server, mut client) = tokio::io::duplex(1024);
        let mut guarded = PrefaceDeadline::new(server, Duration::from_secs(30));
        client.write_all(&PREFACE[..18]).await.unwrap();
        let mut first = [0u8; 18];
        guarded.read_exact(&mut first).await.expect("what came is read");
        let started = tokio::time::Instant::now();
        let error = guarded.read(&mut [0u8; 64]).await.expect_err("the rest never comes");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() <= Duration::from_secs(30), "failed at the deadline");
    }

    #[tokio::test(start_paused = true)]
    async fn after_the_preface_a_connection_may_idle() {
        let (server, mut client) = tokio::io::duplex(1024);
        let mut guarded = PrefaceDeadline::new(server, Duration::from_secs(30));
        client.write_all(PREFACE).await.unwrap();
        let mut preface = [0u8; PREFACE_BYTES];
        guarded.read_exact(&mut preface).await.unwrap();
        assert!(guarded.deadline.is_none(), "no timer held after the preface");
        tokio::time::sleep(Duration::from_secs(3600)).await;
        client.write_all(b"frames").await.unwrap();
        let mut later = [0u8; 6];
        guarded.read_exact(&mut later).await.expect("an idle connection is not cut here");
        assert_eq!(&later, b"frames");
    }
}
