//! Reading one request head for the bare front: what it may serve itself, and what it leaves
//! to hyper.
//!
//! The bare front serves only requests whose form is plain: HTTP/1.1, a valid method,
//! target, header names and values, no `Transfer-Encoding`, no `Expect` and no `Upgrade`,
//! and at most one `Content-Length`, of digits only and at most [`BODY_BYTES_BARE_MAX`]. A
//! body so declared is part of the request: it is served once all of it is in the buffer
//! ([`Head::Incomplete`] until then). Anything else (a longer or chunked body, HTTP/1.0, a
//! head hyper would refuse, one past [`HEAD_BYTES_BARE_MAX`]) is [`Head::ToHyper`]: the
//! connection goes to hyper with the bytes read so far. A head hyper would refuse is
//! [`Head::Refused`] (`serve::gate::judge`): the bare front answers it itself, as the gate
//! in front of hyper answers it on every other connection. Pure: bytes in, a request out.

use std::ops::Range;

use bytes::Bytes;
use hyper::header::{
    HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH, EXPECT, TRANSFER_ENCODING, UPGRADE,
};
use hyper::{HeaderMap, Method, Request, Uri, Version};

use crate::http::request_body::RequestBody;
use crate::serve::gate::{self, Judged};
use crate::serve::http2::PREFACE_HEAD;

/// Largest head the bare front reads; a longer one goes to hyper (which applies the
/// server's head limits and answers 414 or 431 as it does on every connection).
pub(crate) const HEAD_BYTES_BARE_MAX: usize = 16 * 1024;
/// Largest body the bare front takes with its head (a producer's append, most often; as
/// long as the bodies it reads and drops for a route that takes none); a longer one goes to
/// hyper, which reads it as it arrives.
pub(crate) const BODY_BYTES_BARE_MAX: usize = 64 * 1024;
/// Most headers a bare request may carry (hyper's default limit; more goes to hyper).
const HEADERS_MAX: usize = 100;

/// What the bytes read so far hold.
pub(crate) enum Head {
    /// Not a whole head yet: read more.
    Partial,
    /// A whole head whose declared body has not all arrived: the request is the first
    /// `total` bytes.
    Incomplete { total: usize },
    /// A request the bare front serves: its head (the request's body still to be put in:
    /// [`take_body`]), and where its body lies in the buffer, which the request ends with.
    Bare { request: Box<Request<RequestBody>>, body: Range<usize>, close: bool },
    /// Leave the connection, from the first byte not yet served, to hyper.
    ToHyper,
    /// A head hyper would refuse, with this status: answered here, and the connection ends.
    Refused(hyper::StatusCode),
}

/// Parses the head at the start of `bytes`.
pub(crate) fn parse(bytes: &[u8]) -> Head {
    // HTTP/2's preface is no HTTP/1.1 head: hyper takes it (or, with HTTP/2 off, the gate
    // in front of hyper's HTTP/1.1 refuses it).
    if bytes.starts_with(PREFACE_HEAD) {
        return Head::ToHyper;
    }
    match gate::judge(bytes) {
        Judged::Refused(_) if PREFACE_HEAD.starts_with(bytes) => return Head::Partial,
        Judged::Refused(status) => return Head::Refused(status),
        Judged::Partial if bytes.len() > HEAD_BYTES_BARE_MAX => return Head::ToHyper,
        Judged::Partial => return Head::Partial,
        Judged::Taken { .. } => {}
    }
    let mut slots = [httparse::EMPTY_HEADER; HEADERS_MAX];
    let mut parsed = httparse::Request::new(&mut slots);
    let consumed = match parsed.parse(bytes) {
        Ok(httparse::Status::Complete(consumed)) => consumed,
        Ok(httparse::Status::Partial) if bytes.len() <= HEAD_BYTES_BARE_MAX => return Head::Partial,
        Ok(httparse::Status::Partial) | Err(_) => return Head::ToHyper,
    };
    if parsed.version != Some(1) {
        return Head::ToHyper;
    }
    let (Some(method), Some(target)) = (parsed.method, parsed.path) else { return Head::ToHyper };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else { return Head::ToHyper };
    let Ok(uri) = target.parse::<Uri>() else { return Head::ToHyper };
    let Some(headers) = header_map(parsed.headers) else { return Head::ToHyper };
    let Some(body_bytes) = bare_body_bytes(&headers) else { return Head::ToHyper };
    let total = consumed + body_bytes;
    if bytes.len() < total {
        return Head::Incomplete { total };
    }
    let close = says_close(&headers);
    let mut request = Request::new(RequestBody::Empty);
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = Version::HTTP_11;
    *request.headers_mut() = headers;
    Head::Bare { request: Box::new(request), body: consumed..total, close }
}

/// Takes the request whose body is `body` off the front of `buffer` (it ends where the body
/// does) and gives its body, if it has one: without a copy when the request is all the
/// buffer holds, as it is unless the client sent ahead (the buffer then becomes the body's);
/// else copied out. What is left is held at its own size; nothing, when nothing is left.
pub(crate) fn take_body(buffer: &mut Vec<u8>, body: Range<usize>) -> Option<Bytes> {
    assert!(body.start <= body.end && body.end <= buffer.len(), "the body lies in the buffer");
    let end = body.end;
    if !body.is_empty() && end == buffer.len() {
        // The buffer goes with the body (and leaves an empty one behind).
        return Some(Bytes::from(std::mem::take(buffer)).slice(body));
    }
    let taken = (!body.is_empty()).then(|| Bytes::copy_from_slice(&buffer[body]));
    buffer.drain(..end);
    match buffer.is_empty() {
        true => *buffer = Vec::new(),
        false => buffer.shrink_to_fit(),
    }
    taken
}

/// The parsed headers as a map; `None` when a name or value is not valid.
fn header_map(parsed: &[httparse::Header<'_>]) -> Option<HeaderMap> {
    let mut headers = HeaderMap::with_capacity(parsed.len());
    for header in parsed {
        let name = HeaderName::from_bytes(header.name.as_bytes()).ok()?;
        let value = HeaderValue::from_bytes(header.value).ok()?;
        headers.append(name, value);
    }
    Some(headers)
}

/// The length of the body the head declares, if the bare front may read it with the head:
/// one `Content-Length` of digits only, at most [`BODY_BYTES_BARE_MAX`] (none: 0); `None`
/// for any other length, a chunked body, a continue or an upgrade (hyper's to handle).
fn bare_body_bytes(headers: &HeaderMap) -> Option<usize> {
    if headers.contains_key(TRANSFER_ENCODING)
        || headers.contains_key(EXPECT)
        || headers.contains_key(UPGRADE)
    {
        return None;
    }
    let mut lengths = headers.get_all(CONTENT_LENGTH).iter();
    match (lengths.next(), lengths.next()) {
        (None, _) => Some(0),
        (Some(length), None) => digits_at_most(length.as_bytes(), BODY_BYTES_BARE_MAX),
        (Some(_), Some(_)) => None,
    }
}

/// The number `text` spells in decimal digits alone (no sign, no space), if at most `max`.
fn digits_at_most(text: &[u8], max: usize) -> Option<usize> {
    if text.is_empty() {
        return None;
    }
    let mut value = 0usize;
    for digit in text {
        if !digit.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(usize::from(digit - b'0'))?;
    }
    (value <= max).then_some(value)
}

/// Whether `headers` carry `Connection: close` (among other tokens or not, any case): of a
/// request, the client's wish; of a response, the route's.
pub(crate) fn says_close(headers: &HeaderMap) -> bool {
    let mut tokens =
        headers.get_all(CONNECTION).iter().flat_map(|value| value.as_bytes().split(|byte| *byte == b','));
    tokens.any(|token| token.trim_ascii().eq_ignore_ascii_case(b"close"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request at the start of `bytes`, its body taken, and how many bytes it took.
    fn bare(bytes: &[u8]) -> (Box<Request<RequestBody>>, usize, bool) {
        match parse(bytes) {
            Head::Bare { mut request, body, close } => {
                let mut buffer = bytes.to_vec();
                if let Some(body) = take_body(&mut buffer, body) {
                    *request.body_mut() = RequestBody::Whole(Some(body));
                }
                (request, bytes.len() - buffer.len(), close)
            }
            Head::Partial => panic!("partial: {:?}", String::from_utf8_lossy(bytes)),
            Head::ToHyper => panic!("to hyper: {:?}", String::from_utf8_lossy(bytes)),
            Head::Refused(status) => panic!("refused ({status}): {:?}", String::from_utf8_lossy(bytes)),
            Head::Incomplete { total } => {
                panic!("incomplete ({total}): {:?}", String::from_utf8_lossy(bytes))
            }
        }
    }

    fn to_hyper(bytes: &[u8]) -> bool {
        matches!(parse(bytes), Head::ToHyper)
    }

    fn refused(bytes: &[u8]) -> Option<hyper::StatusCode> {
        match parse(bytes) {
            Head::Refused(status) => Some(status),
            _ => None,
        }
    }

    #[test]
    fn a_plain_get_is_served_bare_with_its_headers() {
        let head =
            b"GET /v1/stream/a?offset=-1&live=sse HTTP/1.1\r\nHost: x\r\nX-Two: 1\r\nx-two: 2\r\n\r\nPUT";
        let (request, consumed, close) = bare(head);
        assert_eq!(consumed, head.len() - 3, "the next request's bytes are left");
        assert!(!close);
        assert_eq!(request.method(), Method::GET);
        assert_eq!(request.uri().path(), "/v1/stream/a");
        assert_eq!(request.uri().query(), Some("offset=-1&live=sse"));
        assert_eq!(request.headers().get_all("x-two").iter().count(), 2);
        assert_eq!(request.version(), Version::HTTP_11);
    }

    #[test]
    fn a_head_in_pieces_is_partial_until_whole() {
        let head = b"HEAD /v1/stream/a HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n";
        for cut in 0..head.len() {
            assert!(matches!(parse(&head[..cut]), Head::Partial), "cut at {cut}");
        }
        assert!(bare(head).2, "Connection: close is seen among other tokens");
    }

    #[test]
    fn bodiless_writes_are_served_bare() {
        assert_eq!(bare(b"PUT /v1/stream/a HTTP/1.1\r\nContent-Length: 0\r\n\r\n").0.method(), Method::PUT);
        assert_eq!(bare(b"POST /v1/stream/a HTTP/1.1\r\n\r\n").0.method(), Method::POST);
    }

    #[test]
    fn a_short_body_is_served_with_its_head() {
        let request = b"POST /v1/stream/a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET";
        let (request_read, consumed, _) = bare(request);
        assert_eq!(consumed, request.len() - 3, "the head and its body; the next request's bytes are left");
        let RequestBody::Whole(Some(body)) = request_read.into_body() else { panic!("a whole body") };
        assert_eq!(&body[..], b"hello");
        let largest = format!("PUT /v1/stream/a HTTP/1.1\r\nContent-Length: {BODY_BYTES_BARE_MAX}\r\n\r\n");
        let mut largest = largest.into_bytes();
        largest.resize(largest.len() + BODY_BYTES_BARE_MAX, b'x');
        assert_eq!(bare(&largest).1, largest.len());
    }

    #[test]
    fn a_body_is_taken_without_a_copy_when_it_ends_the_buffer_and_the_rest_is_kept() {
        let request = b"POST /v1/stream/a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello".to_vec();
        let Head::Bare { body, .. } = parse(&request) else { panic!("bare") };
        let mut alone = request.clone();
        let start = alone.as_ptr() as usize;
        let taken = take_body(&mut alone, body.clone()).expect("a body");
        assert_eq!((&taken[..], taken.as_ptr() as usize), (&b"hello"[..], start + body.start), "in place");
        assert_eq!(alone.capacity(), 0, "the buffer went with the body");
        let mut ahead = [request.as_slice(), b"GET /"].concat();
        assert_eq!(&take_body(&mut ahead, body).expect("a body")[..], b"hello");
        assert_eq!(ahead, b"GET /", "the next request's bytes are kept");
        let mut bodiless = b"GET / HTTP/1.1\r\n\r\nGET".to_vec();
        assert_eq!(take_body(&mut bodiless, 18..18), None);
        assert_eq!(bodiless, b"GET");
    }

    #[test]
    fn a_body_not_all_arrived_is_incomplete_with_the_requests_length() {
        let request = b"POST /v1/stream/a HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789";
        let head_bytes = request.len() - 10;
        for cut in head_bytes..request.len() {
            match parse(&request[..cut]) {
                Head::Incomplete { total } => assert_eq!(total, request.len(), "cut at {cut}"),
                _ => panic!("cut at {cut}: not incomplete"),
            }
        }
        assert_eq!(bare(request).1, request.len());
    }

    #[test]
    fn lengths_past_the_limit_go_to_hyper_and_lengths_hyper_refuses_are_refused() {
        let with_length =
            |length: &str| format!("POST /v1/stream/a HTTP/1.1\r\nContent-Length: {length}\r\n\r\n");
        let past = (BODY_BYTES_BARE_MAX + 1).to_string();
        assert!(to_hyper(with_length(&past).as_bytes()), "Content-Length: {past}");
        for length in ["+5", "-1", "5,5", "0x10", "1e3", "99999999999999999999999999"] {
            let status = refused(with_length(length).as_bytes());
            assert_eq!(status, Some(hyper::StatusCode::BAD_REQUEST), "Content-Length: {length}");
        }
        assert!(to_hyper(
            b"POST /v1/stream/a HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello"
        ));
        let both =
            b"POST /v1/stream/a HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\nhello";
        assert!(to_hyper(both), "a length beside a chunked coding");
    }

    #[test]
    fn chunked_bodies_and_unusual_forms_go_to_hyper() {
        assert!(to_hyper(b"POST /v1/stream/a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"));
        assert!(to_hyper(b"GET /v1/stream/a HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n"));
        assert!(to_hyper(b"PUT /v1/stream/a HTTP/1.1\r\nExpect: 100-continue\r\n\r\n"));
        assert!(to_hyper(b"GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n"));
        assert!(to_hyper(b"GET /v1/stream/a HTTP/1.0\r\n\r\n"));
        assert!(to_hyper(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), "HTTP/2's preface");
        assert!(matches!(parse(b"PRI * HTTP/2"), Head::Partial), "the start of the preface");
    }

    #[test]
    fn heads_hyper_would_refuse_are_refused() {
        let bad = Some(hyper::StatusCode::BAD_REQUEST);
        assert_eq!(refused(b"GET /v1/stream/a HTTP/1.1\r\nBad Name: x\r\n\r\n"), bad);
        assert_eq!(refused(b"NOT A REQUEST\r\n\r\n"), bad);
        assert_eq!(refused(b"POST /a HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"), bad);
    }

    #[test]
    fn a_head_past_the_bare_limit_goes_to_hyper_and_past_hyper_s_is_refused() {
        let mut head = b"GET /v1/stream/a HTTP/1.1\r\nX-Big: ".to_vec();
        head.resize(HEAD_BYTES_BARE_MAX + 1, b'a');
        assert!(to_hyper(&head));
        let many: String = (0..HEADERS_MAX + 1).map(|i| format!("X-{i}: v\r\n")).collect();
        let too_many = refused(format!("GET / HTTP/1.1\r\n{many}\r\n").as_bytes());
        assert_eq!(too_many, Some(hyper::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE), "hyper's limit");
    }
}
