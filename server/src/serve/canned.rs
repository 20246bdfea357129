//! hyper's own error answers, made into problem documents like every other answer.
//!
//! A request hyper cannot parse (a bad request line, a duplicate `Content-Length`, a head
//! past its size limit) never reaches the router: hyper answers it itself with a bare head
//! (`content-length: 0`, `connection: close`) and closes the connection. [`Canned`] sits
//! between hyper and the connection and replaces such a head with a complete answer: the
//! same status, a short `application/problem+json` body, and the headers every answer
//! carries; and it writes the request's access line, which the router writes for every
//! other. It tells hyper's heads from ours by what only ours have (`x-content-type-
//! options`, added to every routed answer). Everything else passes through untouched.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use hyper::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::access_log;

/// Longest write that can be one of hyper's bare error heads.
const BARE_HEAD_BYTES_MAX: usize = 512;

/// An I/O object whose bare error heads from hyper become problem answers.
pub(crate) struct Canned<I> {
    inner: I,
    /// A replacement answer still being written.
    pending: Option<Bytes>,
}

impl<I> Canned<I> {
    pub(crate) fn new(inner: I) -> Canned<I> {
        Canned { inner, pending: None }
    }

    /// The answer to write instead of `bytes`, if they are one of hyper's bare error heads
    /// (its access line written: the router never saw the request).
    fn replacement(&self, bytes: &[u8]) -> Option<Bytes> {
        let status = bare_error_status(bytes)?;
        let (answer, body_bytes) = problem_answer(status);
        access_log::unparsed(status.as_u16(), body_bytes);
        Some(answer)
    }
}

/// The status of `bytes` if they are exactly one bare error head as hyper writes them.
fn bare_error_status(bytes: &[u8]) -> Option<StatusCode> {
    if bytes.len() > BARE_HEAD_BYTES_MAX || !bytes.ends_with(b"\r\n\r\n") {
        return None;
    }
    // Routed answers pass here far more often than hyper's own, and are mostly successes:
    // their status settles it before anything is allocated or searched.
    let code = status_code(bytes).filter(|code| (400..600).contains(code))?;
    let text = std::str::from_utf8(bytes).ok()?.to_ascii_lowercase();
    let bare = text.matches("\r\n\r\n").count() == 1
        && text.contains("\r\ncontent-length: 0\r\n")
        && text.contains("\r\nconnection: close\r\n")
        && !text.contains("\r\nx-content-type-options:");
    bare.then(|| StatusCode::from_u16(code).ok()).flatten()
}

/// The status code of an HTTP/1.x status line at the start of `bytes`.
fn status_code(bytes: &[u8]) -> Option<u16> {
    let version = bytes.get(..9)?;
    if !version.eq_ignore_ascii_case(b"http/1.1 ") && !version.eq_ignore_ascii_case(b"http/1.0 ") {
        return None;
    }
    let digits = bytes.get(9..12)?;
    digits
        .iter()
        .try_fold(0u16, |code, digit| digit.is_ascii_digit().then(|| code * 10 + u16::from(digit - b'0')))
}

/// A complete answer of `status` with its problem document and the common headers, and the
/// document's length.
fn problem_answer(status: StatusCode) -> (Bytes, usize) {
    let (kind, detail) = match status {
        StatusCode::URI_TOO_LONG => ("uri-too-long", "the request line is too long"),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => {
            ("head-too-large", "the request head is too large or has too many headers")
        }
        StatusCode::BAD_REQUEST => ("malformed-request", "the request could not be parsed as HTTP/1.1"),
        _ => ("malformed-request", "the request could not be served"),
    };
    let reason = status.canonical_reason().unwrap_or("Error");
    let body = format!(
        "{{\"type\":\"urn:ds:problem:{kind}\",\"title\":\"{reason}\",\"status\":{},\"detail\":\"{detail}\"}}",
        status.as_u16()
    );
    let answer = Bytes::from(format!(
        "HTTP/1.1 {} {reason}\r\ncontent-type: application/problem+json\r\ncache-control: no-store\r\n\
         x-content-type-options: nosniff\r\ncross-origin-resource-policy: cross-origin\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        status.as_u16(),
        body.len()
    ));
    (answer, body.len())
}

impl<I: AsyncWrite + Unpin> Canned<I> {
    /// Writes what is left of a replacement; ready once it is all out.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some(pending) = &mut self.pending {
            let written = std::task::ready!(Pin::new(&mut self.inner).poll_write(cx, pending))?;
            if written == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            pending.advance(written);
            if pending.is_empty() {
                self.pending = None;
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Canned<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Canned<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        std::task::ready!(self.poll_pending(cx))?;
        if let Some(answer) = self.replacement(buf) {
            self.pending = Some(answer);
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.poll_pending(cx))?;
        let total: usize = bufs.iter().map(|buf| buf.len()).sum();
        // The status line is in the first slice: most answers (successes) go straight on.
        let error_head = bufs.first().and_then(|first| status_code(first)).is_some_and(|code| code >= 400);
        if total <= BARE_HEAD_BYTES_MAX && error_head {
            let mut joined = Vec::with_capacity(total);
            bufs.iter().for_each(|buf| joined.extend_from_slice(buf));
            if let Some(answer) = self.replacement(&joined) {
                self.pending = Some(answer);
                return Poll::Ready(Ok(total));
            }
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_heads_are_told_from_routed_answers() {
        let bare = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        assert_eq!(bare_error_status(bare), Some(StatusCode::BAD_REQUEST));
        let ours = b"HTTP/1.1 400 Bad Request\r\nx-content-type-options: nosniff\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(bare_error_status(ours), None);
        assert_eq!(
            bare_error_status(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"),
            None
        );
        let with_body =
            b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\nxy\r\n\r\n";
        assert_eq!(bare_error_status(with_body), None);
    }

    #[test]
    fn status_codes_are_read_from_the_status_line_alone() {
        assert_eq!(status_code(b"HTTP/1.1 204 No Content\r\n"), Some(204));
        assert_eq!(status_code(b"http/1.0 503 x"), Some(503));
        for not_one in [&b"HTTP/1.1 4x0 Bad\r\n"[..], b"HTTP/2 400 x", b"HTTP/1.1 40", b"HTTP/1.1 ", b""] {
            assert_eq!(status_code(not_one), None, "{:?}", String::from_utf8_lossy(not_one));
        }
    }

    #[test]
    fn answers_are_complete_problem_documents() {
        let (answer, body_bytes) = problem_answer(StatusCode::URI_TOO_LONG);
        let text = std::str::from_utf8(&answer).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(body.len(), body_bytes);
        assert!(head.starts_with("HTTP/1.1 414 URI Too Long\r\n"), "{head}");
        assert!(head.contains(&format!("content-length: {}", body.len())));
        assert!(head.contains("x-content-type-options: nosniff") && head.contains("cache-control: no-store"));
        let document: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(document["status"], 414);
        assert_eq!(document["type"], "urn:ds:problem:uri-too-long");
    }
}
