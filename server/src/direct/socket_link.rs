//! A plain TCP connection that hyper drives and the SSE fan-out may write to directly.
//!
//! hyper owns the socket through a [`LinkedSocket`] (its I/O object); the connection's
//! [`SocketLink`] is what an SSE body of the connection lends to its stream's fan-out
//! (`super::fanout`) while hyper has nothing to write:
//!
//! - **When hyper has nothing to write.** hyper calls its I/O's `poll_flush` only once its
//!   own write buffer is empty (with its `pipeline_flush` off, the default `serve` keeps),
//!   so a body that marks the link [`unflushed`](SocketLink::mark_unflushed) when it hands
//!   hyper a frame knows hyper's bytes are all on the wire once a flush came through after
//!   it. A body waiting for that asks to be woken by the flush.
//! - **The end of a chunk the fan-out could not finish** comes back to the body, which
//!   gives it to the link ([`SocketLink::prepend`]); the [`LinkedSocket`] writes it before
//!   any byte of hyper's (and its flush waits for it), under the same stall guard.
//! - **The socket outlives every direct write.** The fan-out writes to the raw descriptor
//!   only while the reader is lent; a [`LinkedSocket`] being dropped takes any lent reader
//!   back (waiting out a write in progress) before its socket closes.
//!
//! TLS connections have no link: their bytes must go through the TLS session.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use socket2::SockRef;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A reader lent to a fan-out, as its connection sees it: something to take back before the
/// socket closes (after which nothing writes to the descriptor).
pub trait Lent: Send + Sync {
    fn take_back(&self);
}

/// What the connection's writers must know of each other. The flags and the remainder
/// are touched by the connection's own task only (relaxed order suffices).
pub struct SocketLink {
    fd: RawFd,
    /// The SSE body handed hyper a frame and no flush has come through since.
    unflushed: AtomicBool,
    /// Someone wants the connection's task polled again after the next flush.
    wake_on_flush: AtomicBool,
    /// Bytes that go out before anything of hyper's (`has_remainder` tells without locking).
    remainder: Mutex<Bytes>,
    has_remainder: AtomicBool,
    /// The reader lent to a fan-out, taken back before the socket closes.
    lent: Mutex<Option<Arc<dyn Lent>>>,
}

impl SocketLink {
    /// A frame was handed to hyper: its bytes may sit in hyper's buffer until the next flush.
    pub fn mark_unflushed(&self) {
        self.unflushed.store(true, Ordering::Relaxed);
    }

    /// Whether everything written so far is on the wire (hyper's buffer and any remainder);
    /// if not, the next flush wakes the connection's task so the caller can ask again.
    pub fn flushed_or_wake_later(&self) -> bool {
        if !self.unflushed.load(Ordering::Relaxed) && !self.has_remainder.load(Ordering::Relaxed) {
            return true;
        }
        self.wake_on_flush.store(true, Ordering::Relaxed);
        false
    }

    /// Queues `bytes` (the rest of a chunk the fan-out began) ahead of hyper's next bytes.
    pub fn prepend(&self, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        let mut remainder = self.remainder.lock().expect("remainder lock");
        debug_assert!(remainder.is_empty(), "one chunk is unfinished at a time");
        *remainder = bytes;
        self.has_remainder.store(true, Ordering::Relaxed);
    }

    /// Records the reader lent to a fan-out (or none), for [`LinkedSocket`]'s drop.
    pub fn set_lent(&self, lent: Option<Arc<dyn Lent>>) {
        *self.lent.lock().expect("lent reader lock") = lent;
    }

    /// Sends without blocking straight to the socket; `WouldBlock` when it is full.
    ///
    /// Only a lent reader's fan-out calls this, under the reader's lock, and the
    /// [`LinkedSocket`] takes the reader back under that lock before the socket closes: the
    /// descriptor is open for the whole call.
    pub fn send(&self, bytes: &[u8]) -> io::Result<usize> {
        // SAFETY: the descriptor stays open while the reader is lent (see above).
        let fd = unsafe { BorrowedFd::borrow_raw(self.fd) };
        SockRef::from(&fd).send(bytes)
    }
}

/// hyper's I/O object on a linked socket.
pub struct LinkedSocket {
    socket: TcpStream,
    link: Arc<SocketLink>,
}

impl LinkedSocket {
    /// Links `socket`: hyper's I/O object on it, with the link inside.
    pub fn new(socket: TcpStream) -> LinkedSocket {
        let link = Arc::new(SocketLink {
            fd: socket.as_raw_fd(),
            unflushed: AtomicBool::new(true),
            wake_on_flush: AtomicBool::new(false),
            remainder: Mutex::new(Bytes::new()),
            has_remainder: AtomicBool::new(false),
            lent: Mutex::new(None),
        });
        LinkedSocket { socket, link }
    }

    pub fn link(&self) -> &Arc<SocketLink> {
        &self.link
    }

    /// Writes any remainder queued by [`SocketLink::prepend`].
    fn poll_remainder(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.link.has_remainder.load(Ordering::Relaxed) {
            return Poll::Ready(Ok(()));
        }
        let mut remainder = self.link.remainder.lock().expect("remainder lock");
        while !remainder.is_empty() {
            let written = ready!(Pin::new(&mut self.socket).poll_write(cx, &remainder))?;
            if written == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            remainder.advance(written);
        }
        self.link.has_remainder.store(false, Ordering::Relaxed);
        Poll::Ready(Ok(()))
    }
}

impl Drop for LinkedSocket {
    fn drop(&mut self) {
        let lent = self.link.lent.lock().expect("lent reader lock").take();
        if let Some(lent) = lent {
            lent.take_back();
        }
    }
}

impl AsyncRead for LinkedSocket {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.socket).poll_read(cx, buf)
    }
}

impl AsyncWrite for LinkedSocket {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        ready!(self.poll_remainder(cx))?;
        Pin::new(&mut self.socket).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_remainder(cx))?;
        Pin::new(&mut self.socket).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.socket.is_write_vectored()
    }

    /// hyper flushes only with its own buffer empty: once the remainder is out too,
    /// everything it was given is written.
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_remainder(cx))?;
        ready!(Pin::new(&mut self.socket).poll_flush(cx))?;
        let link = &self.link;
        if link.unflushed.load(Ordering::Relaxed) {
            link.unflushed.store(false, Ordering::Relaxed);
        }
        if link.wake_on_flush.load(Ordering::Relaxed) {
            link.wake_on_flush.store(false, Ordering::Relaxed);
            cx.waker().wake_by_ref();
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_remainder(cx))?;
        Pin::new(&mut self.socket).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    async fn pair() -> (LinkedSocket, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (LinkedSocket::new(server), client)
    }

    #[tokio::test]
    async fn direct_sends_and_remainders_keep_their_place_among_hypers_bytes() {
        let (mut io, mut client) = pair().await;
        let link = Arc::clone(io.link());
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut head = [0u8; 18];
        io.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"GET / HTTP/1.1\r\n\r\n");
        io.write_all(b"from hyper;").await.unwrap();
        assert_eq!(link.send(b"direct, cut ").unwrap(), 12);
        link.prepend(Bytes::from_static(b"short;"));
        assert!(!link.flushed_or_wake_later(), "a remainder is not on the wire yet");
        io.write_all(b"hyper again;").await.unwrap();
        io.shutdown().await.unwrap();
        let mut seen = Vec::new();
        client.read_to_end(&mut seen).await.unwrap();
        assert_eq!(seen, b"from hyper;direct, cut short;hyper again;");
    }

    #[tokio::test]
    async fn a_flush_clears_unflushed_and_wakes_whoever_asked() {
        let (mut io, _client) = pair().await;
        let link = Arc::clone(io.link());
        assert!(!link.flushed_or_wake_later(), "a new link has hyper's head to write");
        let (waker, woken) = counting_waker();
        let mut context = Context::from_waker(&waker);
        assert!(Pin::new(&mut io).poll_flush(&mut context).is_ready());
        assert_eq!(woken.load(Ordering::SeqCst), 1, "the flush woke the task that asked");
        assert!(link.flushed_or_wake_later());
        link.mark_unflushed();
        assert!(!link.flushed_or_wake_later());
    }

    fn counting_waker() -> (std::task::Waker, Arc<std::sync::atomic::AtomicUsize>) {
        struct Count(Arc<std::sync::atomic::AtomicUsize>);
        impl std::task::Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        (std::task::Waker::from(Arc::new(Count(Arc::clone(&count)))), count)
    }
}
