//! Writing one response of the bare front: its head, then its body as the body yields it.
//!
//! Framing follows HTTP/1.1 as hyper's server applies it, so a client cannot tell the two
//! writers apart: a known length is sent as `content-length` (a route's own `Content-Length`,
//! as on HEAD answers, is kept), an unknown one (SSE) as `transfer-encoding: chunked`; HEAD
//! answers, 1xx, 204 and 304 carry no body; `date` is added. The head goes out with the first
//! frame of a body that is already there, in one `writev`; a frame's slices (up to
//! `FRAME_SLICES_MAX` stored messages) go out with one `writev`, and a small chunked frame is
//! joined with its framing first. Nothing is kept between frames. (SSE answers are written by
//! `super::events` with `send_frame` and `write_all` from here.)

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::time::{Duration, SystemTime};

use bytes::{Buf, BufMut, Bytes};
use http_body::Body as _;
use http_body_util::BodyExt;
use hyper::header::CONTENT_LENGTH;
use hyper::{Method, Response, StatusCode};
use tokio::net::TcpStream;

use super::gather;
use crate::app::App;
use crate::http::response::{Body, SliceBuf};

/// Most slices one `writev` passes (the kernel's `IOV_MAX` is 1024).
const IOVECS_MAX: usize = 128;
/// A frame this small is copied together with the head before it (if any) and its chunk
/// framing, and written with one plain `write` (cheaper in the kernel than a `writev` of
/// a few slices).
const JOIN_BYTES_MAX: usize = 4096;

/// How a response's body is framed on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body bytes go out (HEAD, 1xx, 204, 304, or an empty body).
    None,
    Length,
    Chunked,
}

/// The response head as bytes, and how its body is framed. `close`: the connection ends
/// after this response (`connection: close` is added when the route did not say so).
pub(crate) fn head(response: &Response<Body>, method: &Method, close: bool) -> (Vec<u8>, Framing) {
    let status = response.status();
    let headers = response.headers();
    let mut out = Vec::with_capacity(256 + headers.len() * 48);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        line(&mut out, name.as_str(), value.as_bytes());
    }
    let head_request = method == Method::HEAD;
    let has_length = headers.contains_key(CONTENT_LENGTH);
    let can_length =
        !(status.is_informational() || matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED));
    let can_body = can_length && !head_request;
    let framing = match response.body().size_hint().exact() {
        None if can_body => {
            line(&mut out, "transfer-encoding", b"chunked");
            Framing::Chunked
        }
        None => Framing::None,
        Some(length) => {
            let implicit_zero = length == 0 && head_request;
            if can_length && !has_length && !implicit_zero {
                line(&mut out, "content-length", length.to_string().as_bytes());
            }
            if can_body && length > 0 {
                Framing::Length
            } else {
                Framing::None
            }
        }
    };
    if close && !closes(response) {
        line(&mut out, "connection", b"close");
    }
    line(&mut out, "date", httpdate::fmt_http_date(SystemTime::now()).as_bytes());
    out.extend_from_slice(b"\r\n");
    (out, framing)
}

fn line(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Whether the route asked for the connection to end after its answer.
pub(crate) fn closes(response: &Response<Body>) -> bool {
    super::head::says_close(response.headers())
}

/// Writes `head` and then `body` framed as `framing`; a write blocked for the app's stall
/// timeout fails with `TimedOut`. Ends with the body (a chunked body with its last chunk).
pub(crate) async fn send(
    socket: &TcpStream,
    head: Vec<u8>,
    mut body: Body,
    framing: Framing,
    app: &App,
) -> io::Result<()> {
    let stall = app.write_stall_timeout;
    // Every write is a boxed step: what a live body holds while it waits for its next frame
    // is the body and this function's few locals.
    let mut pending_head = Some(head);
    // What a known length promises; a body that ends short of it (a relayed answer that
    // broke off) fails the send, so the connection ends rather than leave the client waiting.
    let promised = body.size_hint().exact().filter(|_| framing == Framing::Length);
    let mut sent = 0u64;
    if let Body::Slices { slices, remaining } = &mut body {
        if app.gather_reads && framing == Framing::Length && gather::worth_gathering(slices, *remaining) {
            let head = pending_head.take().unwrap_or_default();
            let before = *remaining;
            pending_head = Box::pin(send_gathered(socket, head, slices, remaining, stall)).await?;
            sent += before - *remaining;
            if slices.is_empty() {
                return Ok(());
            }
            // The budget is spent: the rest goes out as slices, as below.
        }
    }
    if framing == Framing::None || matches!(body, Body::Live(_)) {
        // Nothing to wait for, or a live body that may not have a frame yet: the head now.
        Box::pin(write_one(socket, pending_head.take().unwrap_or_default(), stall)).await?;
        if framing == Framing::None {
            return Ok(());
        }
    }
    while let Some(data) = next_data(&mut body).await {
        let head = pending_head.take().unwrap_or_default();
        sent += data.remaining() as u64;
        Box::pin(send_frame(socket, &head, data, framing, stall)).await?;
    }
    if promised.is_some_and(|promised| sent < promised) {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the body ended short of its length"));
    }
    match (framing, pending_head) {
        (Framing::Chunked, _) => Box::pin(write_one(socket, b"0\r\n\r\n".to_vec(), stall)).await,
        (_, Some(head)) => Box::pin(write_one(socket, head, stall)).await,
        (_, None) => Ok(()),
    }
}

/// Writes `head` and `slices` through gather buffers, one `write` per buffer, until all is
/// written or no buffer is free; `slices` and `remaining` keep what is left. Returns the
/// head when it is not written yet.
async fn send_gathered(
    socket: &TcpStream,
    head: Vec<u8>,
    slices: &mut VecDeque<Bytes>,
    remaining: &mut u64,
    stall: Duration,
) -> io::Result<Option<Vec<u8>>> {
    let mut head = Some(head);
    while !slices.is_empty() {
        let Some(mut buffer) = gather::Buffer::take() else { return Ok(head) };
        *remaining -= buffer.fill(&head.take().unwrap_or_default(), slices);
        write_all(socket, &mut [IoSlice::new(buffer.as_slice())], stall).await?;
    }
    debug_assert_eq!(*remaining, 0);
    Ok(head)
}

/// The body's next non-empty data frame.
async fn next_data(body: &mut Body) -> Option<SliceBuf> {
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.unwrap_or_else(|never| match never {}).into_data() else { continue };
        if data.has_remaining() {
            return Some(data);
        }
    }
    None
}

async fn write_one(socket: &TcpStream, bytes: Vec<u8>, stall: Duration) -> io::Result<()> {
    write_all(socket, &mut [IoSlice::new(&bytes)], stall).await
}

/// One frame (with the head before it when it is the first), chunk-framed if chunked.
pub(crate) async fn send_frame(
    socket: &TcpStream,
    head: &[u8],
    data: SliceBuf,
    framing: Framing,
    stall: Duration,
) -> io::Result<()> {
    let size = data.remaining();
    let size_line = match framing {
        Framing::Chunked => format!("{size:x}\r\n").into_bytes(),
        _ => Vec::new(),
    };
    let trailer: &[u8] = if framing == Framing::Chunked { b"\r\n" } else { b"" };
    if head.len() + size <= JOIN_BYTES_MAX {
        let mut joined = Vec::with_capacity(head.len() + size_line.len() + size + trailer.len());
        joined.extend_from_slice(head);
        joined.extend_from_slice(&size_line);
        joined.put(data);
        joined.extend_from_slice(trailer);
        return write_all(socket, &mut [IoSlice::new(&joined)], stall).await;
    }
    let mut data = data;
    let mut first = true;
    while data.has_remaining() {
        let mut slices = [IoSlice::new(&[]); IOVECS_MAX];
        let mut filled = 0;
        for piece in [head, size_line.as_slice()].into_iter().filter(|piece| first && !piece.is_empty()) {
            slices[filled] = IoSlice::new(piece);
            filled += 1;
        }
        let body_slices = data.chunks_vectored(&mut slices[filled..IOVECS_MAX - 1]);
        let body_bytes: usize = slices[filled..filled + body_slices].iter().map(|slice| slice.len()).sum();
        filled += body_slices;
        if body_bytes == data.remaining() && !trailer.is_empty() {
            slices[filled] = IoSlice::new(trailer);
            filled += 1;
        }
        write_all(socket, &mut slices[..filled], stall).await?;
        data.advance(body_bytes);
        first = false;
    }
    Ok(())
}

/// Writes every byte of `slices`; a socket that takes nothing for `stall` fails the write.
pub(crate) async fn write_all(
    socket: &TcpStream,
    mut slices: &mut [IoSlice<'_>],
    stall: Duration,
) -> io::Result<()> {
    while !slices.is_empty() {
        match socket.try_write_vectored(slices) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(written) => IoSlice::advance_slices(&mut slices, written),
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                // Boxed: the stall timer exists only while the socket is full.
                let writable = std::future::poll_fn(|cx| socket.poll_write_ready(cx));
                match Box::pin(tokio::time::timeout(stall, writable)).await {
                    Ok(ready) => ready?,
                    Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "client stopped reading")),
                }
            }
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use hyper::header::{HeaderValue, CONNECTION};

    use crate::http::response::response;

    fn text(response: &Response<Body>, method: Method) -> (String, Framing) {
        let (bytes, framing) = head(response, &method, false);
        (String::from_utf8(bytes).unwrap(), framing)
    }

    #[test]
    fn a_known_length_is_sent_as_content_length() {
        let mut reply = response(StatusCode::OK, Body::full(Bytes::from_static(b"hello")));
        reply.headers_mut().insert("x-a", HeaderValue::from_static("1"));
        let (head, framing) = text(&reply, Method::GET);
        assert!(head.starts_with("HTTP/1.1 200 OK\r\nx-a: 1\r\ncontent-length: 5\r\ndate: "), "{head}");
        assert!(head.ends_with(" GMT\r\n\r\n"), "{head}");
        assert_eq!(framing, Framing::Length);
    }

    #[test]
    fn empty_answers_say_zero_except_to_head_and_bodiless_statuses() {
        let (head, framing) = text(&response(StatusCode::CREATED, Body::Empty), Method::PUT);
        assert!(head.contains("content-length: 0\r\n"), "{head}");
        assert_eq!(framing, Framing::None);
        let (head, _) = text(&response(StatusCode::NO_CONTENT, Body::Empty), Method::GET);
        assert!(!head.contains("content-length"), "{head}");
        let (head, _) = text(&response(StatusCode::NOT_MODIFIED, Body::Empty), Method::GET);
        assert!(!head.contains("content-length"), "{head}");
        let (head, framing) = text(&response(StatusCode::OK, Body::Empty), Method::HEAD);
        assert!(!head.contains("content-length"), "{head}");
        assert_eq!(framing, Framing::None);
    }

    #[test]
    fn a_head_answer_keeps_the_routes_length_and_sends_no_body() {
        let mut reply = response(StatusCode::OK, Body::Empty);
        reply.headers_mut().insert(CONTENT_LENGTH, HeaderValue::from_static("42"));
        let (head, framing) = text(&reply, Method::HEAD);
        assert_eq!(head.matches("content-length").count(), 1, "{head}");
        assert!(head.contains("content-length: 42\r\n"));
        assert_eq!(framing, Framing::None);
    }

    /// A live body with no frames and no known length.
    struct Unknown;

    impl crate::http::response::LiveSource for Unknown {}

    impl http_body::Body for Unknown {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
            std::task::Poll::Ready(None)
        }
    }

    #[test]
    fn an_unknown_length_is_chunked_and_close_is_said_once() {
        let mut reply = response(StatusCode::OK, Body::Live(Box::pin(Unknown)));
        let (head, framing) = text(&reply, Method::GET);
        assert!(head.contains("transfer-encoding: chunked\r\n"), "{head}");
        assert_eq!(framing, Framing::Chunked);
        reply.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
        let (bytes, _) = super::head(&reply, &Method::GET, true);
        assert_eq!(String::from_utf8(bytes).unwrap().matches("close").count(), 1);
        assert!(closes(&reply));
    }
}
