//! A plain TCP connection that hyper drives and the SSE fan-out may write to directly.
//!
//! [`SocketLink`] owns the socket; hyper gets it through [`SharedSocket`] (its I/O object),
//! and an SSE body of the connection may lend it to its stream's fan-out
//! (`crate::live::fanout`) while hyper has nothing to write. The link knows when that is:
//! hyper calls its I/O's `poll_flush` only once its own write buffer is empty, so a body
//! that marks the link [`unflushed`](SocketLink::mark_unflushed) when it hands hyper a frame
//! knows hyper's bytes are all on the wire once a flush came through after it. A body
//! waiting for that asks to be woken by the flush. TLS connections have no link: their
//! bytes must go through the TLS session.

use std::io;
use std::mem::MaybeUninit;
use std::net::Shutdown;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use socket2::SockRef;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// The socket of one plain TCP connection and what its writers must know of each other.
/// All flags are touched by the connection's own task only (relaxed order suffices).
pub struct SocketLink {
    socket: TcpStream,
    /// The SSE body handed hyper a frame and no flush has come through since.
    unflushed: AtomicBool,
    /// Someone wants the connection's task polled again after the next flush.
    wake_on_flush: AtomicBool,
}

impl SocketLink {
    /// Links `socket`; the second value is hyper's I/O object on it.
    pub fn new(socket: TcpStream) -> (Arc<SocketLink>, SharedSocket) {
        let link = Arc::new(SocketLink {
            socket,
            unflushed: AtomicBool::new(true),
            wake_on_flush: AtomicBool::new(false),
        });
        (Arc::clone(&link), SharedSocket { link })
    }

    pub fn socket(&self) -> &TcpStream {
        &self.socket
    }

    /// A frame was handed to hyper: its bytes may sit in hyper's buffer until the next flush.
    pub fn mark_unflushed(&self) {
        self.unflushed.store(true, Ordering::Relaxed);
    }

    /// Whether hyper's write buffer is known to be empty; if not, the next flush wakes the
    /// connection's task so the caller can ask again.
    pub fn flushed_or_wake_later(&self) -> bool {
        if !self.unflushed.load(Ordering::Relaxed) {
            return true;
        }
        self.wake_on_flush.store(true, Ordering::Relaxed);
        false
    }

    /// Ends the connection both ways (a write that cannot finish leaves a broken response,
    /// which the client must see as broken).
    pub fn abort(&self) {
        let _ = SockRef::from(&self.socket).shutdown(Shutdown::Both);
    }
}

/// hyper's I/O object on a [`SocketLink`].
pub struct SharedSocket {
    link: Arc<SocketLink>,
}

impl AsyncRead for SharedSocket {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let socket = &self.link.socket;
        loop {
            ready!(socket.poll_read_ready(cx))?;
            // SAFETY: `recv` only writes into the slice, and only the `read` bytes it reports
            // are marked initialised and filled below.
            let unfilled: &mut [MaybeUninit<u8>] = unsafe { buf.unfilled_mut() };
            match socket.try_io(Interest::READABLE, || SockRef::from(socket).recv(unfilled)) {
                Ok(read) => {
                    // SAFETY: the kernel initialised the first `read` bytes.
                    unsafe { buf.assume_init(read) };
                    buf.advance(read);
                    return Poll::Ready(Ok(()));
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
                Err(error) => return Poll::Ready(Err(error)),
            }
        }
    }
}

impl AsyncWrite for SharedSocket {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let socket = &self.link.socket;
        loop {
            ready!(socket.poll_write_ready(cx))?;
            match socket.try_write(buf) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
                result => return Poll::Ready(result),
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let socket = &self.link.socket;
        loop {
            ready!(socket.poll_write_ready(cx))?;
            match socket.try_write_vectored(bufs) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
                result => return Poll::Ready(result),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// hyper flushes only with its own buffer empty: everything it was given is written.
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.link.unflushed.store(false, Ordering::Relaxed);
        if self.link.wake_on_flush.swap(false, Ordering::Relaxed) {
            cx.waker().wake_by_ref();
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(SockRef::from(&self.link.socket).shutdown(Shutdown::Write))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    async fn pair() -> (Arc<SocketLink>, SharedSocket, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let (link, io) = SocketLink::new(server);
        (link, io, client)
    }

    #[tokio::test]
    async fn hyper_side_reads_and_writes_and_direct_writes_share_the_socket() {
        let (link, mut io, mut client) = pair().await;
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut head = [0u8; 18];
        io.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"GET / HTTP/1.1\r\n\r\n");
        io.write_all(b"from hyper;").await.unwrap();
        assert_eq!(link.socket().try_write(b"direct;").unwrap(), 7);
        io.shutdown().await.unwrap();
        let mut seen = Vec::new();
        client.read_to_end(&mut seen).await.unwrap();
        assert_eq!(seen, b"from hyper;direct;");
    }

    #[tokio::test]
    async fn a_flush_clears_unflushed_and_wakes_whoever_asked() {
        let (link, mut io, _client) = pair().await;
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
