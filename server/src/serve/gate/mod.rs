//! The gate in front of hyper's HTTP/1.1: every request head is judged before hyper reads
//! it, so that a head hyper would refuse is answered here, as a problem document, and
//! hyper never writes an answer of its own.
//!
//! [`Gated`] sits between a connection and hyper. Bytes the client sends pass to hyper as
//! the gate follows their framing: a head is held until it is whole and judged
//! (`judge`: hyper's own rules); a body passes straight through, read into hyper's own
//! buffer, while the gate counts its `Content-Length` or follows its chunks (`chunked`) to
//! find where the next head begins (a chunked body whose framing breaks is followed no
//! further: everything after it passes unjudged, and hyper fails the body). A refused head is never handed over: hyper reads the
//! end of the stream instead, finishes the answers it owes (pipelined requests before the
//! refused one), and shuts the connection down, and at that shutdown the gate writes its
//! answer (`refusal`) and the request's access line. Writes pass through untouched.

mod chunked;
mod judge;
mod refusal;

pub(crate) use judge::{judge, Framing, Judged};

pub(crate) use refusal::refusal;

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use hyper::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::access_log;
use chunked::Chunks;

/// Bytes asked of the connection per read while a head is held.
const READ_BYTES: usize = 4096;

/// Where the gate is in the stream of requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// At (or in) a request head.
    Head,
    /// In a body of this many bytes more.
    Length(u64),
    /// In a chunked body.
    Chunked(Chunks),
    /// A head was refused: hyper reads the end of the stream.
    Refused,
}

/// A connection whose request heads are judged before hyper sees them.
pub(crate) struct Gated<I> {
    inner: I,
    /// Bytes read and not yet handed to hyper: the first `cleared` of them judged (a head
    /// taken, or body bytes after it), the rest a head not yet whole.
    held: Vec<u8>,
    cleared: usize,
    state: State,
    /// The refusal still to write at shutdown.
    refusal: Option<Bytes>,
}

impl<I> Gated<I> {
    pub(crate) fn new(inner: I) -> Gated<I> {
        Gated { inner, held: Vec::new(), cleared: 0, state: State::Head, refusal: None }
    }

    /// Judges what is held after the cleared bytes as far as it goes.
    fn advance(&mut self) {
        while self.cleared < self.held.len() {
            let pending = &self.held[self.cleared..];
            match self.state {
                State::Head => match judge(pending) {
                    Judged::Partial => return,
                    Judged::Taken { head_bytes, framing } => {
                        self.cleared += head_bytes;
                        self.state = body_state(framing);
                    }
                    Judged::Refused(status) => return self.refuse(status),
                },
                State::Refused => return,
                _ => self.cleared += follow_body(&mut self.state, pending),
            }
        }
    }

    /// Refuses the head being judged: nothing more reaches hyper, and the answer waits for
    /// hyper's shutdown.
    fn refuse(&mut self, status: StatusCode) {
        let (answer, body_bytes) = refusal(status);
        access_log::unparsed(status.as_u16(), body_bytes);
        self.state = State::Refused;
        self.held.truncate(self.cleared);
        self.refusal = Some(answer);
    }

    /// Hands judged bytes to hyper; whether there were any.
    fn hand_over(&mut self, buf: &mut ReadBuf<'_>) -> bool {
        if self.cleared == 0 || buf.remaining() == 0 {
            return false;
        }
        let count = self.cleared.min(buf.remaining());
        buf.put_slice(&self.held[..count]);
        self.held.drain(..count);
        self.cleared -= count;
        if self.held.is_empty() {
            self.held = Vec::new();
        }
        true
    }
}

/// Follows `bytes` of the body `state` is in; how many of them belong to it.
pub(crate) fn follow_body(state: &mut State, bytes: &[u8]) -> usize {
    let (taken, next) = match *state {
        State::Length(left) => {
            let taken = left.min(bytes.len() as u64);
            (taken as usize, if taken == left { State::Head } else { State::Length(left - taken) })
        }
        State::Chunked(mut chunks) => {
            let taken = chunks.follow(bytes);
            (taken, if chunks == Chunks::Done { State::Head } else { State::Chunked(chunks) })
        }
        State::Head | State::Refused => (0, *state),
    };
    *state = next;
    taken
}

/// The state a body of `framing` starts in.
pub(crate) fn body_state(framing: Framing) -> State {
    match framing {
        Framing::Length(0) => State::Head,
        Framing::Length(bytes) => State::Length(bytes),
        Framing::Chunked => State::Chunked(Chunks::start()),
    }
}

impl<I: AsyncRead + Unpin> Gated<I> {
    /// Reads a body straight into hyper's buffer; the bytes past its end, if it ends there,
    /// are taken back and held for judging. Whether any body byte was handed over.
    fn poll_body(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<bool>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        let read = buf.filled().len() - before;
        if read == 0 {
            return Poll::Ready(Ok(true));
        }
        let taken = follow_body(&mut self.state, &buf.filled()[before..]);
        if taken < read {
            self.held.extend_from_slice(&buf.filled()[before + taken..]);
            buf.set_filled(before + taken);
            self.advance();
        }
        Poll::Ready(Ok(taken > 0))
    }

    /// Reads more of a head into `held`; false at the end of the stream.
    fn poll_head(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        let mut chunk = [0u8; READ_BYTES];
        let mut filled = ReadBuf::new(&mut chunk);
        ready!(Pin::new(&mut self.inner).poll_read(cx, &mut filled))?;
        if filled.filled().is_empty() {
            return Poll::Ready(Ok(false));
        }
        self.held.extend_from_slice(filled.filled());
        self.advance();
        Poll::Ready(Ok(true))
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Gated<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.hand_over(buf) {
                return Poll::Ready(Ok(()));
            }
            match this.state {
                // hyper reads the end of the stream, and shuts down.
                State::Refused => return Poll::Ready(Ok(())),
                State::Head => {
                    if !ready!(this.poll_head(cx))? {
                        return Poll::Ready(Ok(()));
                    }
                }
                _ if this.held.is_empty() => {
                    if ready!(this.poll_body(cx, buf))? {
                        return Poll::Ready(Ok(()));
                    }
                }
                _ => this.advance(),
            }
        }
    }
}

impl<I: AsyncWrite + Unpin> Gated<I> {
    /// Writes what is left of the refusal; ready once it is all out.
    fn poll_refusal(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some(answer) = &mut self.refusal {
            let written = ready!(Pin::new(&mut self.inner).poll_write(cx, answer))?;
            if written == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            answer.advance(written);
            if answer.is_empty() {
                self.refusal = None;
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Gated<I> {
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
        ready!(self.poll_refusal(cx))?;
        ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gives its bytes in pieces of the given sizes, then the end of the stream.
    struct Pieces {
        bytes: Vec<u8>,
        sizes: Vec<usize>,
    }

    impl AsyncRead for Pieces {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let size = if self.sizes.is_empty() { usize::MAX } else { self.sizes.remove(0) };
            let count = size.min(self.bytes.len()).min(buf.remaining());
            let piece: Vec<u8> = self.bytes.drain(..count).collect();
            buf.put_slice(&piece);
            Poll::Ready(Ok(()))
        }
    }

    /// Everything hyper would read through the gate, with reads of `read_bytes`.
    fn through(bytes: &[u8], sizes: Vec<usize>, read_bytes: usize) -> (Vec<u8>, bool) {
        let mut gated = Gated::new(Pieces { bytes: bytes.to_vec(), sizes });
        let mut out = Vec::new();
        let mut context = Context::from_waker(std::task::Waker::noop());
        loop {
            let mut chunk = vec![0u8; read_bytes];
            let mut buf = ReadBuf::new(&mut chunk);
            match Pin::new(&mut gated).poll_read(&mut context, &mut buf) {
                Poll::Ready(Ok(())) if buf.filled().is_empty() => return (out, gated.refusal.is_some()),
                Poll::Ready(Ok(())) => out.extend_from_slice(buf.filled()),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn requests_pass_whole_in_any_pieces_and_a_bad_head_stops_them() {
        let good = [
            &b"OPTIONS /a HTTP/1.1\r\nContent-Length: 5000\r\n\r\n"[..],
            &[b'x'; 5000],
            b"PUT /a HTTP/1.0\r\nContent-Length: 12\r\n\r\n[[[[[[[[[[[[",
            b"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\n",
            b"GET /a HTTP/1.1\r\n\r\n",
        ]
        .concat();
        let bad = b"NOT A HEAD\r\n\r\n";
        for (piece, read) in [(1, 7), (3, 4096), (100, 64), (4096, 8192), (usize::MAX, 3)] {
            let sizes = vec![piece; good.len() + bad.len()];
            assert_eq!(through(&good, sizes.clone(), read), (good.clone(), false), "pieces of {piece}");
            let (passed, refused) = through(&[&good[..], bad].concat(), sizes, read);
            assert_eq!(
                (passed, refused),
                (good.clone(), true),
                "pieces of {piece}: the bad head is held back"
            );
        }
    }
}
