//! Protocol headers: their names, and strict parsing of every request header we act on.
//!
//! Each parser returns a typed value or a [`Problem`] (400) that says which header is wrong.
//! A header we act on that appears more than once is refused rather than guessed at.

use crate::http::cursor::Cursor;
use ds_engine::parse_rfc3339_ms;
use ds_engine::ContentType;
use ds_engine::Offset;
use ds_engine::STREAM_SEQ_BYTES_MAX;
use ds_engine::{ProducerTag, PRODUCER_ID_BYTES_MAX, PRODUCER_NUMBER_MAX};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};

use super::problem::Problem;

pub(crate) const STREAM_NEXT_OFFSET: HeaderName = HeaderName::from_static("stream-next-offset");
pub(crate) const STREAM_UP_TO_DATE: HeaderName = HeaderName::from_static("stream-up-to-date");
pub(crate) const STREAM_CLOSED: HeaderName = HeaderName::from_static("stream-closed");
pub(crate) const STREAM_CURSOR: HeaderName = HeaderName::from_static("stream-cursor");
pub(crate) const STREAM_TTL: HeaderName = HeaderName::from_static("stream-ttl");
pub(crate) const STREAM_FORKED_FROM: HeaderName = HeaderName::from_static("stream-forked-from");
pub(crate) const STREAM_FORK_OFFSET: HeaderName = HeaderName::from_static("stream-fork-offset");
pub(crate) const STREAM_FORK_SUB_OFFSET: HeaderName = HeaderName::from_static("stream-fork-sub-offset");
pub(crate) const STREAM_EXPIRES_AT: HeaderName = HeaderName::from_static("stream-expires-at");
pub(crate) const STREAM_SEQ: HeaderName = HeaderName::from_static("stream-seq");
pub(crate) const STREAM_SSE_DATA_ENCODING: HeaderName = HeaderName::from_static("stream-sse-data-encoding");
pub(crate) const PRODUCER_ID: HeaderName = HeaderName::from_static("producer-id");
pub(crate) const PRODUCER_EPOCH: HeaderName = HeaderName::from_static("producer-epoch");
pub(crate) const PRODUCER_SEQ: HeaderName = HeaderName::from_static("producer-seq");
pub(crate) const PRODUCER_EXPECTED_SEQ: HeaderName = HeaderName::from_static("producer-expected-seq");
pub(crate) const PRODUCER_RECEIVED_SEQ: HeaderName = HeaderName::from_static("producer-received-seq");
pub(crate) const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// Longest accepted `Stream-TTL`: 100 years.
pub(crate) const TTL_SECS_MAX: u64 = 100 * 365 * 24 * 3600;

/// `true` as a header value.
pub(crate) const TRUE: HeaderValue = HeaderValue::from_static("true");

/// An offset as a header value.
pub(crate) fn offset_value(offset: Offset) -> HeaderValue {
    HeaderValue::from_str(offset.text().as_str()).expect("offsets are ASCII")
}

/// A number as a header value.
/// A `Stream-Cursor` value.
pub(crate) fn cursor_value(cursor: &Cursor) -> HeaderValue {
    match cursor {
        Cursor::Interval(interval) => number_value(*interval),
        Cursor::Beyond(digits) => HeaderValue::from_str(digits).expect("cursors are decimal digits"),
    }
}

pub(crate) fn number_value(number: u64) -> HeaderValue {
    HeaderValue::from(number)
}

/// The single value of `name` as text, `None` when absent.
pub(crate) fn single<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Result<Option<&'a str>, Problem> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(given_twice(name));
    }
    let text = first
        .to_str()
        .map_err(|_| Problem::bad_request("invalid-header", format!("{name} is not visible ASCII")))?;
    Ok(Some(text))
}

/// 400 for a header the protocol reads once, given more than once.
fn given_twice(name: &HeaderName) -> Problem {
    Problem::bad_request("duplicate-header", format!("{name} is given more than once"))
}

/// `Content-Type`: absent, or a valid media type (an empty value is an error).
pub(crate) fn content_type(headers: &HeaderMap) -> Result<Option<ContentType>, Problem> {
    let Some(text) = single(headers, &hyper::header::CONTENT_TYPE)? else {
        return Ok(None);
    };
    ContentType::parse(text)
        .map(Some)
        .map_err(|error| Problem::bad_request("invalid-content-type", error.to_string()))
}

/// `Stream-Closed`: set only by the value `true` (any case). Any other value — `false`,
/// `yes`, `1`, empty, not even text — is as if the header were absent, and no error: the
/// protocol says so (§4.1). Given twice, it is refused like every header read once.
pub(crate) fn stream_closed(headers: &HeaderMap) -> Result<bool, Problem> {
    let mut values = headers.get_all(&STREAM_CLOSED).iter();
    match (values.next(), values.next()) {
        (None, _) => Ok(false),
        (Some(value), None) => Ok(value.as_bytes().trim_ascii().eq_ignore_ascii_case(b"true")),
        (Some(_), Some(_)) => Err(given_twice(&STREAM_CLOSED)),
    }
}

/// `Stream-TTL`: whole seconds, no sign, no leading zeros.
pub(crate) fn ttl_secs(headers: &HeaderMap) -> Result<Option<u64>, Problem> {
    let Some(text) = single(headers, &STREAM_TTL)? else {
        return Ok(None);
    };
    if !is_canonical_digits(text) {
        return Err(Problem::bad_request(
            "invalid-ttl",
            "Stream-TTL must be whole seconds (digits, no leading zeros)",
        ));
    }
    match text.parse::<u64>().ok().filter(|secs| *secs <= TTL_SECS_MAX) {
        Some(secs) => Ok(Some(secs)),
        None => Err(Problem::bad_request(
            "invalid-ttl",
            format!("Stream-TTL must be at most {TTL_SECS_MAX} seconds (100 years)"),
        )),
    }
}

/// `Stream-Expires-At`: an RFC 3339 timestamp.
pub(crate) fn expires_at_ms(headers: &HeaderMap) -> Result<Option<i64>, Problem> {
    let Some(text) = single(headers, &STREAM_EXPIRES_AT)? else {
        return Ok(None);
    };
    parse_rfc3339_ms(text.trim()).map(Some).ok_or_else(|| {
        Problem::bad_request("invalid-expires-at", "Stream-Expires-At must be an RFC 3339 timestamp")
    })
}

/// `Producer-Id`, `Producer-Epoch`, `Producer-Seq`: all three or none.
pub(crate) fn producer(headers: &HeaderMap) -> Result<Option<ProducerTag>, Problem> {
    let id = single(headers, &PRODUCER_ID)?;
    let epoch = single(headers, &PRODUCER_EPOCH)?;
    let seq = single(headers, &PRODUCER_SEQ)?;
    let (id, epoch, seq) = match (id, epoch, seq) {
        (None, None, None) => return Ok(None),
        (Some(id), Some(epoch), Some(seq)) => (id, epoch, seq),
        _ => {
            return Err(Problem::bad_request(
                "invalid-producer",
                "Producer-Id, Producer-Epoch and Producer-Seq must be given together",
            ))
        }
    };
    if id.is_empty() || id.len() > PRODUCER_ID_BYTES_MAX {
        return Err(Problem::bad_request("invalid-producer", "Producer-Id must be 1 to 256 bytes"));
    }
    let number = |name: &str, text: &str| {
        producer_number(text).ok_or_else(|| {
            Problem::bad_request("invalid-producer", format!("{name} must be an integer from 0 to 2^53-1"))
        })
    };
    let epoch = number("Producer-Epoch", epoch)?;
    let seq = number("Producer-Seq", seq)?;
    Ok(Some(ProducerTag { id: id.into(), epoch, seq }))
}

/// `Stream-Seq`: an opaque, non-empty string compared bytewise.
pub(crate) fn stream_seq(headers: &HeaderMap) -> Result<Option<Box<str>>, Problem> {
    let Some(text) = single(headers, &STREAM_SEQ)? else {
        return Ok(None);
    };
    if text.is_empty() || text.len() > STREAM_SEQ_BYTES_MAX {
        return Err(Problem::bad_request("invalid-stream-seq", "Stream-Seq must be 1 to 256 bytes"));
    }
    Ok(Some(text.into()))
}

/// The authority a request names: its `Host`, or else (HTTP/2 sends none) its URI's.
pub(crate) fn authority<'a>(headers: &'a HeaderMap, uri: &'a hyper::Uri) -> Option<&'a str> {
    match headers.get(hyper::header::HOST) {
        Some(host) => host.to_str().ok(),
        None => uri.authority().map(|authority| authority.as_str()),
    }
}

/// Digits only, no leading zeros (except `0` itself), whatever their value.
fn is_canonical_digits(text: &str) -> bool {
    let digits_only = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    digits_only && !(text.len() > 1 && text.starts_with('0'))
}

/// Digits only, at most 2^53-1.
fn producer_number(text: &str) -> Option<u64> {
    let digits_only = !text.is_empty() && text.len() <= 20 && text.bytes().all(|b| b.is_ascii_digit());
    let value: u64 = digits_only.then(|| text.parse().ok()).flatten()?;
    (value <= PRODUCER_NUMBER_MAX).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header a route acts on but a browser may not send makes that request impossible
    /// cross-origin (the preflight fails): forks' headers were once missing from the CORS
    /// preflight answer (`crate::http::cors`).
    #[test]
    fn every_request_header_a_route_reads_is_allowed() {
        let allowed: Vec<String> =
            crate::http::cors::ALLOWED_HEADERS.split(", ").map(str::to_ascii_lowercase).collect();
        let read_by_routes = [
            hyper::header::CONTENT_TYPE,
            hyper::header::IF_NONE_MATCH,
            LAST_EVENT_ID,
            STREAM_SEQ,
            STREAM_TTL,
            STREAM_EXPIRES_AT,
            STREAM_CLOSED,
            PRODUCER_ID,
            PRODUCER_EPOCH,
            PRODUCER_SEQ,
            STREAM_FORKED_FROM,
            STREAM_FORK_OFFSET,
            STREAM_FORK_SUB_OFFSET,
        ];
        for name in read_by_routes {
            assert!(allowed.iter().any(|header| header == name.as_str()), "{name} is not allowed");
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(HeaderName::from_static(name), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn ttl_is_strict() {
        assert_eq!(ttl_secs(&headers(&[("stream-ttl", "3600")])).unwrap(), Some(3600));
        assert_eq!(ttl_secs(&headers(&[("stream-ttl", "0")])).unwrap(), Some(0));
        assert_eq!(ttl_secs(&headers(&[])).unwrap(), None);
        for bad in ["abc", "-1", "+60", "00060", "60.5", "1e3", "", " 60"] {
            let refused = format!("{:?}", ttl_secs(&headers(&[("stream-ttl", bad)])).unwrap_err());
            assert!(refused.contains("whole seconds"), "{bad:?}: {refused}");
        }
        let most = TTL_SECS_MAX.to_string();
        assert_eq!(ttl_secs(&headers(&[("stream-ttl", &most)])).unwrap(), Some(TTL_SECS_MAX));
        let past_max = (TTL_SECS_MAX + 1).to_string();
        for too_long in [past_max.as_str(), "99999999999999999999999"] {
            let refused = format!("{:?}", ttl_secs(&headers(&[("stream-ttl", too_long)])).unwrap_err());
            assert!(refused.contains("at most 3153600000 seconds"), "{too_long}: {refused}");
        }
    }

    #[test]
    fn producer_headers_come_together_and_are_integers() {
        let tag = producer(&headers(&[("producer-id", "p"), ("producer-epoch", "2"), ("producer-seq", "0")]));
        assert_eq!(tag.unwrap(), Some(ProducerTag { id: "p".into(), epoch: 2, seq: 0 }));
        assert_eq!(producer(&headers(&[])).unwrap(), None);
        let partial = [
            &[("producer-id", "p")][..],
            &[("producer-epoch", "0")][..],
            &[("producer-id", "p"), ("producer-epoch", "0")][..],
        ];
        for pairs in partial {
            assert!(producer(&headers(pairs)).is_err());
        }
        for (epoch, seq) in
            [("1abc", "0"), ("0", "1abc"), ("1e3", "0"), ("-1", "0"), ("9007199254740992", "0"), ("", "0")]
        {
            let pairs = [("producer-id", "p"), ("producer-epoch", epoch), ("producer-seq", seq)];
            assert!(producer(&headers(&pairs)).is_err(), "{epoch} {seq}");
        }
        let empty_id = [("producer-id", ""), ("producer-epoch", "0"), ("producer-seq", "0")];
        assert!(producer(&headers(&empty_id)).is_err());
        let max = [("producer-id", "p"), ("producer-epoch", "9007199254740991"), ("producer-seq", "0")];
        assert!(producer(&headers(&max)).is_ok());
    }

    #[test]
    fn closed_flag_and_duplicates() {
        assert!(stream_closed(&headers(&[("stream-closed", "TRUE")])).unwrap());
        assert!(!stream_closed(&headers(&[("stream-closed", "false")])).unwrap());
        for other in ["yes", "1", "", "tru", "true!", "falsch"] {
            assert!(!stream_closed(&headers(&[("stream-closed", other)])).unwrap(), "{other:?} is no close");
        }
        let not_text = HeaderMap::from_iter([(STREAM_CLOSED, HeaderValue::from_bytes(b"\xfftrue").unwrap())]);
        assert!(!stream_closed(&not_text).unwrap());
        assert!(stream_closed(&headers(&[("stream-closed", "true"), ("stream-closed", "true")])).is_err());
    }

    #[test]
    fn content_type_and_expiry() {
        assert!(content_type(&headers(&[("content-type", "")])).is_err());
        assert!(content_type(&headers(&[("content-type", "nonsense")])).is_err());
        assert!(content_type(&headers(&[("content-type", "text/plain")])).unwrap().is_some());
        assert_eq!(
            expires_at_ms(&headers(&[("stream-expires-at", "1970-01-01T00:00:01Z")])).unwrap(),
            Some(1000)
        );
        assert!(expires_at_ms(&headers(&[("stream-expires-at", "not-a-timestamp")])).is_err());
        assert!(stream_seq(&headers(&[("stream-seq", "")])).is_err());
    }

    #[test]
    fn the_authority_comes_from_host_or_else_the_uri() {
        let uri: hyper::Uri = "https://example.com:8443/v1/stream/a".parse().unwrap();
        let mut headers = HeaderMap::new();
        assert_eq!(authority(&headers, &uri), Some("example.com:8443"));
        headers.insert(hyper::header::HOST, "other:1".parse().unwrap());
        assert_eq!(authority(&headers, &uri), Some("other:1"));
        let relative: hyper::Uri = "/v1/stream/a".parse().unwrap();
        assert_eq!(authority(&HeaderMap::new(), &relative), None);
    }
}
