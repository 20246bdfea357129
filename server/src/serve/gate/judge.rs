//! Whether a request head is one hyper takes, judged before hyper sees it: hyper's own
//! rules (httparse, then the framing of RFC 9112 §6), so that a head hyper would refuse is
//! refused here instead, with a problem document, and hyper never writes an answer of its
//! own. Pure: bytes in, a judgment out.

use hyper::StatusCode;

use crate::router::HEAD_BYTES_MAX;

/// Largest head taken, as hyper is configured (`serve_http1`: twice the router's limit, so
/// that the router tells a long URI (414) from a large head (431) itself).
pub(crate) const HEAD_TAKEN_MAX: usize = 2 * HEAD_BYTES_MAX;
/// Longest request target hyper takes.
const URI_BYTES_MAX: usize = (u16::MAX - 1) as usize;
/// Most headers hyper takes (its default).
const HEADERS_MAX: usize = 100;

/// How a request's body is framed, once its head is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// `Content-Length` bytes (0: none).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// What the head at the start of some bytes is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Judged {
    /// Not a whole head yet, and no reason to refuse it yet.
    Partial,
    /// A head hyper takes: its length in bytes and its body's framing.
    Taken { head_bytes: usize, framing: Framing },
    /// A head hyper would refuse, and with which status.
    Refused(StatusCode),
}

/// Judges the head at the start of `bytes`.
pub(crate) fn judge(bytes: &[u8]) -> Judged {
    let mut slots = [httparse::EMPTY_HEADER; HEADERS_MAX];
    let mut request = httparse::Request::new(&mut slots);
    let head_bytes = match request.parse(bytes) {
        Ok(httparse::Status::Complete(head_bytes)) => head_bytes,
        Ok(httparse::Status::Partial) if bytes.len() <= HEAD_TAKEN_MAX => return Judged::Partial,
        Ok(httparse::Status::Partial) | Err(httparse::Error::TooManyHeaders) => {
            return Judged::Refused(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
        }
        Err(_) => return Judged::Refused(StatusCode::BAD_REQUEST),
    };
    if head_bytes > HEAD_TAKEN_MAX {
        return Judged::Refused(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    }
    let target = request.path.unwrap_or_default();
    if target.len() > URI_BYTES_MAX {
        return Judged::Refused(StatusCode::URI_TOO_LONG);
    }
    let method_ok = request.method.is_some_and(|method| hyper::Method::from_bytes(method.as_bytes()).is_ok());
    if !method_ok || target.parse::<hyper::Uri>().is_err() {
        return Judged::Refused(StatusCode::BAD_REQUEST);
    }
    let http11 = request.version == Some(1);
    match framing(request.headers, http11) {
        Some(framing) => Judged::Taken { head_bytes, framing },
        None => Judged::Refused(StatusCode::BAD_REQUEST),
    }
}

/// The body's framing by `headers`, as hyper reads it: `Transfer-Encoding` (HTTP/1.1 only)
/// must end in `chunked` and overrides any `Content-Length`; every `Content-Length` must be
/// digits alone, all of one value. `None`: a head hyper refuses (400).
fn framing(headers: &[httparse::Header<'_>], http11: bool) -> Option<Framing> {
    let mut chunked = None;
    let mut length = None;
    for header in headers {
        if header.name.eq_ignore_ascii_case("transfer-encoding") {
            if !http11 {
                return None;
            }
            let last = header.value.rsplit(|byte| *byte == b',').next().unwrap_or_default();
            chunked = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if header.name.eq_ignore_ascii_case("content-length") && chunked.is_none() {
            let value = digits(header.value).filter(|value| *value <= u64::MAX - 2)?;
            if length.is_some_and(|earlier| earlier != value) {
                return None;
            }
            length = Some(value);
        }
    }
    match chunked {
        Some(true) => Some(Framing::Chunked),
        Some(false) => None,
        None => Some(Framing::Length(length.unwrap_or(0))),
    }
}

/// The number `text` spells in decimal digits alone, if it fits.
fn digits(text: &[u8]) -> Option<u64> {
    if text.is_empty() {
        return None;
    }
    text.iter().try_fold(0u64, |value, digit| {
        digit.is_ascii_digit().then_some(())?;
        value.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(head: &str) -> Framing {
        match judge(head.as_bytes()) {
            Judged::Taken { head_bytes, framing } => {
                assert_eq!(head_bytes, head.len(), "{head:?}");
                framing
            }
            other => panic!("{head:?}: {other:?}"),
        }
    }

    fn refused(head: &[u8]) -> StatusCode {
        match judge(head) {
            Judged::Refused(status) => status,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(head)),
        }
    }

    #[test]
    fn framing_follows_hyper() {
        assert_eq!(taken("GET / HTTP/1.1\r\n\r\n"), Framing::Length(0));
        assert_eq!(taken("POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\n"), Framing::Length(5));
        assert_eq!(
            taken("POST /a HTTP/1.1\r\ncontent-length: 5\r\nContent-Length: 5\r\n\r\n"),
            Framing::Length(5)
        );
        assert_eq!(taken("POST /a HTTP/1.1\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n"), Framing::Chunked);
        let both = "POST /a HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(taken(both), Framing::Chunked, "the coding overrides the length");
        assert_eq!(taken("GET /a HTTP/1.0\r\n\r\n"), Framing::Length(0));
    }

    #[test]
    fn what_hyper_refuses_is_refused() {
        for head in [
            &b"POST /a HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"[..],
            b"POST /a HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
            b"POST /a HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n",
            b"POST /a HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
            b"POST /a HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"NOT A REQUEST\r\n\r\n",
            b"GET /a HTTP/1.1\r\nBad Name: x\r\n\r\n",
            b"GET /a HTTP/2.0\r\n\r\n",
        ] {
            assert_eq!(refused(head), StatusCode::BAD_REQUEST, "{:?}", String::from_utf8_lossy(head));
        }
        let many: String = (0..=HEADERS_MAX).map(|i| format!("X-{i}: v\r\n")).collect();
        assert_eq!(
            refused(format!("GET / HTTP/1.1\r\n{many}\r\n").as_bytes()),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
        );
        let mut endless = b"GET / HTTP/1.1\r\nX: ".to_vec();
        endless.resize(HEAD_TAKEN_MAX + 1, b'a');
        assert_eq!(refused(&endless), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(URI_BYTES_MAX));
        assert_eq!(refused(long.as_bytes()), StatusCode::URI_TOO_LONG);
        assert_eq!(judge(b"GET / HTTP/1.1\r\nHost"), Judged::Partial);
    }
}
