//! What every read answer shares, catch-up or live: where it starts ([`ReadStart`]), one
//! read of at most the configured size ([`read_once`]), its 200 or 304 with the offset
//! headers and the ETag ([`chunk_response`]), and a read that fails as a problem
//! ([`read_problem`]).

use crate::http::cursor::Cursor;
use ds_engine::{json_array, ReadError, ReadResult, StartAt, StreamHandle};
use hyper::header::{HeaderMap, HeaderValue, CONTENT_TYPE, ETAG};
use hyper::{Response, StatusCode};

use super::headers::{
    self, LAST_EVENT_ID, STREAM_CLOSED, STREAM_CURSOR, STREAM_NEXT_OFFSET, STREAM_UP_TO_DATE,
};
use super::problem::Problem;
use super::query::{Live, ReadQuery};
use super::response::{response, set, Body};

/// Where a read starts, and how the client spelled it (the ETag repeats the spelling).
#[derive(Clone, Debug)]
pub(crate) struct ReadStart {
    pub at: StartAt,
    pub text: String,
}

impl ReadStart {
    /// The `offset` parameter, or for SSE without one a browser's `Last-Event-ID`, or `-1`
    /// for catch-up reads without one. Live reads must say where they start.
    pub(crate) fn resolve(query: &ReadQuery, headers: &HeaderMap) -> Result<ReadStart, Problem> {
        let text = match (&query.offset, query.live) {
            (Some(text), _) => text.clone(),
            (None, Live::Sse) => match headers::single(headers, &LAST_EVENT_ID)? {
                Some(last_event_id) => last_event_id.trim().to_string(),
                None => return Err(Problem::bad_request("missing-offset", "live reads need an offset")),
            },
            (None, Live::LongPoll) => {
                return Err(Problem::bad_request("missing-offset", "live reads need an offset"))
            }
            (None, Live::No) => "-1".to_string(),
        };
        if text.is_empty() {
            return Err(Problem::bad_request("invalid-offset", "offset is empty"));
        }
        let at = StartAt::parse(&text)
            .map_err(|error| Problem::bad_request("invalid-offset", error.to_string()))?;
        Ok(ReadStart { at, text })
    }
}

/// One read of at most the configured size; 400 off a boundary, 404 once gone, 500 at
/// damage.
pub(crate) fn read_once(
    handle: &StreamHandle,
    start: &ReadStart,
    bytes_max: usize,
) -> Result<ReadResult, Problem> {
    handle
        .read(start.at, bytes_max)
        .map_err(|error| read_problem(error, &start.text))?
        .ok_or_else(Problem::not_found)
}

/// A 200 (or 304) answer carrying the messages of `result`.
pub(crate) fn chunk_response(
    handle: &StreamHandle,
    result: ReadResult,
    start_text: &str,
    if_none_match: Option<&HeaderValue>,
    cursor: Option<Cursor>,
) -> Response<Body> {
    let closed = result.closed_at_tail();
    let etag = format!("\"{start_text}:{}{}\"", result.chunk.next, if closed { ":c" } else { "" });
    let not_modified = if_none_match.is_some_and(|value| etag_matches(value, &etag));
    let (next, up_to_date) = (result.chunk.next, result.up_to_date());
    let mut reply = if not_modified {
        response(StatusCode::NOT_MODIFIED, Body::Empty)
    } else {
        let slices = result.chunk.slices;
        let json = handle.config().content_type.is_json();
        response(StatusCode::OK, Body::slices(if json { json_array(slices) } else { slices }))
    };
    let headers = reply.headers_mut();
    if !not_modified {
        set(headers, CONTENT_TYPE, handle.config().content_type.as_str());
    }
    headers.insert(STREAM_NEXT_OFFSET, headers::offset_value(next));
    if up_to_date {
        headers.insert(STREAM_UP_TO_DATE, headers::TRUE);
    }
    if closed {
        headers.insert(STREAM_CLOSED, headers::TRUE);
    }
    if let Some(cursor) = cursor {
        headers.insert(STREAM_CURSOR, headers::cursor_value(&cursor));
    }
    set(headers, ETAG, &etag);
    reply
}

/// Whether an `If-None-Match` value names `etag` (or is `*`).
fn etag_matches(value: &HeaderValue, etag: &str) -> bool {
    let Ok(text) = value.to_str() else {
        return false;
    };
    text.split(',')
        .map(str::trim)
        .any(|candidate| candidate == "*" || candidate.strip_prefix("W/").unwrap_or(candidate) == etag)
}

/// The HTTP answer to a read that cannot start at `offset` (as the client spelled it).
pub(crate) fn read_problem(error: ReadError, offset: &str) -> Problem {
    match error {
        ReadError::NotBoundary => Problem::bad_request("invalid-offset", error.to_string()),
        ReadError::Damaged => Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "stream-damaged",
            format!(
                "the stored data of this stream is damaged at offset {offset}: it cannot be served \
                 from there (what comes before it can)"
            ),
        ),
        ReadError::Storage => {
            tracing::error!("a read failed: stored data could not be read");
            Problem::new(StatusCode::INTERNAL_SERVER_ERROR, "storage-error", error.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_match_exactly_or_in_lists() {
        let etag = "\"-1:0000000000000001_0000000000000003\"";
        assert!(etag_matches(&HeaderValue::from_str(etag).unwrap(), etag));
        assert!(etag_matches(
            &HeaderValue::from_static("\"x\", W/\"-1:0000000000000001_0000000000000003\""),
            etag
        ));
        assert!(etag_matches(&HeaderValue::from_static("*"), etag));
        assert!(!etag_matches(&HeaderValue::from_static("\"wrong-etag\""), etag));
        let weakened_twice = format!("W/W/W/{etag}");
        assert!(!etag_matches(&HeaderValue::from_str(&weakened_twice).unwrap(), etag), "one W/ at most");
    }

    #[test]
    fn live_reads_need_an_offset() {
        let query = |live| ReadQuery { offset: None, live, cursor: None };
        assert_eq!(ReadStart::resolve(&query(Live::No), &HeaderMap::new()).unwrap().text, "-1");
        assert!(ReadStart::resolve(&query(Live::LongPoll), &HeaderMap::new()).is_err());
        assert!(ReadStart::resolve(&query(Live::Sse), &HeaderMap::new()).is_err());
        let mut headers = HeaderMap::new();
        headers.insert(LAST_EVENT_ID, HeaderValue::from_static("0000000000000002_0000000000000004"));
        let start = ReadStart::resolve(&query(Live::Sse), &headers).unwrap();
        assert_eq!(start.text, "0000000000000002_0000000000000004");
        let empty = ReadQuery { offset: Some(String::new()), live: Live::No, cursor: None };
        assert!(ReadStart::resolve(&empty, &HeaderMap::new()).is_err());
    }
}
