//! A connection handed to hyper with bytes already read from it: those bytes are served
//! first, then the socket's, and their buffer is freed as soon as they are all read.
//!
//! The bare front reads a request before it knows whether hyper must serve it (a body it
//! does not take, a head it leaves to hyper's checks); what it read goes to hyper ahead of
//! the socket. `tokio::io::AsyncReadExt::chain` would keep that buffer (up to a head and a
//! short body) for the connection's whole life; [`Prefixed`] holds it only until it is read.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// `prefix`, then `inner`.
pub(super) struct Prefixed<R> {
    prefix: Vec<u8>,
    /// Bytes of `prefix` already read.
    at: usize,
    inner: R,
}

impl<R> Prefixed<R> {
    pub(super) fn new(prefix: Vec<u8>, inner: R) -> Prefixed<R> {
        Prefixed { prefix, at: 0, inner }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Prefixed<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.at == this.prefix.len() {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let taken = (this.prefix.len() - this.at).min(buf.remaining());
        buf.put_slice(&this.prefix[this.at..this.at + taken]);
        this.at += taken;
        if this.at == this.prefix.len() {
            this.prefix = Vec::new();
            this.at = 0;
        }
        debug_assert!(this.at <= this.prefix.len());
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn the_prefix_comes_first_in_pieces_and_is_freed_once_read() {
        let (mut far, near) = tokio::io::duplex(64);
        far.write_all(b" and then the socket").await.unwrap();
        drop(far);
        let mut reader = Prefixed::new(b"read before".to_vec(), near);
        let mut piece = [0u8; 4];
        let read = reader.read(&mut piece).await.unwrap();
        assert_eq!(&piece[..read], b"read", "no more than the buffer takes");
        assert!(reader.prefix.capacity() > 0, "held while unread");
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b" before and then the socket");
        assert_eq!(reader.prefix.capacity(), 0, "freed once read");
    }

    #[tokio::test]
    async fn an_empty_prefix_reads_the_socket_alone() {
        let (mut far, near) = tokio::io::duplex(64);
        far.write_all(b"socket").await.unwrap();
        drop(far);
        let mut all = Vec::new();
        Prefixed::new(Vec::new(), near).read_to_end(&mut all).await.unwrap();
        assert_eq!(all, b"socket");
    }
}
