//! A connection wrapper that turns a small vectored write into one contiguous write.
//!
//! hyper hands the connection a chunked body frame as three slices (size line, data, CRLF)
//! and a short response as head plus body. The kernel's TCP send path costs more for a
//! three-slice `writev` than for one `write` of the same bytes (`bench/probes/
//! loopback_fanout.c` with `VEC=1` shows the difference; docs/performance/code-choices.md),
//! and SSE fan-out pays it once per subscriber per event. [`Coalesced`]
//! copies a vectored write of at most [`COALESCE_BYTES_MAX`] bytes into a per-thread buffer
//! and writes it once; a larger one passes through untouched, so big payloads are never
//! copied here. It owns nothing per connection.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Largest vectored write joined into one contiguous write, in bytes.
pub(crate) const COALESCE_BYTES_MAX: usize = 4096;

thread_local! {
    /// Scratch space for joining slices; one per worker thread, never larger than the cap.
    static JOINED: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(COALESCE_BYTES_MAX));
}

/// An I/O object whose small vectored writes reach the socket as one write.
pub(crate) struct Coalesced<I> {
    inner: I,
}

impl<I> Coalesced<I> {
    pub(crate) fn new(inner: I) -> Coalesced<I> {
        Coalesced { inner }
    }
}

/// The total length of `bufs` when they are worth joining: more than one slice, at most the cap.
fn joinable_bytes(bufs: &[io::IoSlice<'_>]) -> Option<usize> {
    if bufs.len() < 2 {
        return None;
    }
    let mut total = 0usize;
    for buf in bufs {
        total += buf.len();
        if total > COALESCE_BYTES_MAX {
            return None;
        }
    }
    Some(total)
}

impl<I: AsyncRead + Unpin> AsyncRead for Coalesced<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Coalesced<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let Some(total) = joinable_bytes(bufs) else {
            return Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        };
        JOINED.with(|joined| {
            let mut joined = joined.borrow_mut();
            joined.clear();
            for buf in bufs {
                joined.extend_from_slice(buf);
            }
            debug_assert_eq!(joined.len(), total);
            debug_assert!(joined.capacity() <= COALESCE_BYTES_MAX, "the scratch buffer never grows");
            // The same bytes in the same order: a partial write's count means the same thing.
            Pin::new(&mut self.inner).poll_write(cx, &joined)
        })
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

    /// Records each write call the wrapper makes, then passes it to a pipe.
    struct Recorder {
        pipe: tokio::io::DuplexStream,
        plain: usize,
        vectored: usize,
    }

    impl AsyncWrite for Recorder {
        fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            self.plain += 1;
            Pin::new(&mut self.pipe).poll_write(cx, buf)
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[io::IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            self.vectored += 1;
            Pin::new(&mut self.pipe).poll_write_vectored(cx, bufs)
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.pipe).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.pipe).poll_shutdown(cx)
        }
    }

    fn recorder(capacity: usize) -> (Coalesced<Recorder>, tokio::io::DuplexStream) {
        let (pipe, far) = tokio::io::duplex(capacity);
        (Coalesced::new(Recorder { pipe, plain: 0, vectored: 0 }), far)
    }

    #[tokio::test]
    async fn small_vectored_writes_become_one_plain_write_of_the_same_bytes() {
        let (mut io, mut far) = recorder(64 * 1024);
        let slices =
            [io::IoSlice::new(b"1a\r\n"), io::IoSlice::new(b"event: data\n\n"), io::IoSlice::new(b"\r\n")];
        let written = io.write_vectored(&slices).await.unwrap();
        assert_eq!(written, 19);
        assert_eq!((io.inner.plain, io.inner.vectored), (1, 0));
        let mut got = vec![0; written];
        far.read_exact(&mut got).await.unwrap();
        assert_eq!(got, b"1a\r\nevent: data\n\n\r\n");
    }

    #[tokio::test]
    async fn large_or_single_slice_writes_pass_through() {
        let (mut io, mut far) = recorder(64 * 1024);
        let big = vec![7u8; COALESCE_BYTES_MAX];
        let written = io.write_vectored(&[io::IoSlice::new(b"head"), io::IoSlice::new(&big)]).await.unwrap();
        assert_eq!((io.inner.plain, io.inner.vectored), (0, 1));
        assert_eq!(written, 4 + big.len());
        assert_eq!(io.write_vectored(&[io::IoSlice::new(b"alone")]).await.unwrap(), 5);
        assert_eq!((io.inner.plain, io.inner.vectored), (0, 2));
        let mut got = vec![0; written];
        far.read_exact(&mut got).await.unwrap();
        assert_eq!(&got[..4], b"head");
    }

    #[tokio::test]
    async fn a_partial_write_counts_bytes_of_the_joined_slices_in_order() {
        let (mut io, mut far) = recorder(5);
        let slices = [io::IoSlice::new(b"abc"), io::IoSlice::new(b"defg")];
        let written = io.write_vectored(&slices).await.unwrap();
        assert_eq!(written, 5, "the pipe takes five bytes");
        let mut got = [0; 5];
        far.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"abcde");
    }

    #[test]
    fn joins_only_several_slices_within_the_cap() {
        let small = [io::IoSlice::new(b"ab"), io::IoSlice::new(b"c")];
        assert_eq!(joinable_bytes(&small), Some(3));
        assert_eq!(joinable_bytes(&small[..1]), None);
        let big = vec![0u8; COALESCE_BYTES_MAX];
        assert_eq!(joinable_bytes(&[io::IoSlice::new(b"a"), io::IoSlice::new(&big)]), None);
    }
}
