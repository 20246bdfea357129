//! Reading a request body: never past its limit, never stalled for long, never more bodies
//! in memory than the server has room for.
//!
//! A declared `Content-Length` over the limit is refused before a byte is read; a chunked
//! body is read until it passes the limit and refused then (413 either way, nothing
//! stored). The bytes a body holds are charged to a [`BodyBudget`] shared by all
//! connections as they arrive (a declared length up front): past it the request gets 503
//! with `Retry-After`, so many slow uploads cannot fill memory between them. A body that
//! sends nothing for the body timeout is cut (408). The charge is held ([`HeldBody`]) until
//! the request is answered, since the engine keeps the bytes until they are committed.
//!
//! A request refused before its body is read ([`refuse_unread`]), or served by a route that
//! has no use for a body (a read, a deletion, a health check: [`discard_unread`]), keeps its
//! connection when the body is short: it is read and dropped first. Any answer that leaves
//! a body unread says `Connection: close`, since the connection cannot carry another
//! request after it; the client then knows to open a new one instead of finding this one
//! reset.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Body as _;
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue, CONNECTION, CONTENT_LENGTH, RETRY_AFTER};
use hyper::StatusCode;

use super::problem::Problem;

/// A request's body as the routes see it: streamed in by hyper; read whole with its head
/// (a short body that had arrived with it, served by the bare front, `crate::serve::bare`;
/// taken once); or none at all (a head that says there is no body).
pub(crate) enum RequestBody {
    Streamed(Incoming),
    Whole(Option<Bytes>),
    Empty,
}

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            RequestBody::Streamed(incoming) => Pin::new(incoming).poll_frame(cx),
            RequestBody::Whole(bytes) => {
                Poll::Ready(bytes.take().map(|bytes| Ok(http_body::Frame::data(bytes))))
            }
            RequestBody::Empty => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Streamed(incoming) => incoming.is_end_stream(),
            RequestBody::Whole(bytes) => bytes.is_none(),
            RequestBody::Empty => true,
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            RequestBody::Streamed(incoming) => incoming.size_hint(),
            RequestBody::Whole(bytes) => {
                http_body::SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            RequestBody::Empty => http_body::SizeHint::with_exact(0),
        }
    }
}

/// Request body bytes held in memory across all connections, against a maximum.
#[derive(Debug)]
pub(crate) struct BodyBudget {
    held: AtomicU64,
    max: u64,
}

impl BodyBudget {
    pub(crate) fn new(max: u64) -> BodyBudget {
        BodyBudget { held: AtomicU64::new(0), max }
    }

    /// Bytes held right now.
    pub(crate) fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    fn try_hold(&self, bytes: u64) -> bool {
        let held = self.held.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |held| {
            held.checked_add(bytes).filter(|total| *total <= self.max)
        });
        held.is_ok()
    }
}

/// Bytes charged to a [`BodyBudget`], given back when dropped.
#[derive(Debug)]
pub(crate) struct HeldBody {
    budget: Arc<BodyBudget>,
    bytes: u64,
}

impl HeldBody {
    fn none(budget: &Arc<BodyBudget>) -> HeldBody {
        HeldBody { budget: Arc::clone(budget), bytes: 0 }
    }

    /// Charges `bytes` more; false (charging nothing) when the budget has no room.
    fn grow(&mut self, bytes: u64) -> bool {
        let held = self.budget.try_hold(bytes);
        self.bytes += if held { bytes } else { 0 };
        held
    }
}

impl Drop for HeldBody {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// How a body may be read.
#[derive(Clone, Debug)]
pub(crate) struct BodyRules {
    pub bytes_max: u64,
    pub timeout: Duration,
    pub budget: Arc<BodyBudget>,
}

/// Bodies at most this long are read and dropped when their request is refused before its
/// body is read, so that the connection can carry the client's next request.
const DISCARD_BYTES_MAX: u64 = 64 * 1024;
/// How long such a body may take to arrive before the connection is closed instead.
const DISCARD_WAIT: Duration = Duration::from_secs(1);

/// `problem`, as the answer to a request whose body was not read: a short body is read and
/// dropped first, so the connection stays usable; a longer one (or one that does not arrive
/// at once) is left unread, and the answer closes the connection.
pub(crate) async fn refuse_unread(body: RequestBody, headers: &HeaderMap, problem: Problem) -> Problem {
    match discard_unread(body, headers).await {
        true => problem,
        false => closing(problem),
    }
}

/// Drops a body its route has no use for (a read's, a deletion's, a health check's): a
/// short one — declared at most [`DISCARD_BYTES_MAX`] long, or chunked and ending within
/// it — is read and dropped within [`DISCARD_WAIT`]. True when the connection can carry
/// another request; false when the body is left unread and the answer must close it.
pub(crate) async fn discard_unread(body: RequestBody, headers: &HeaderMap) -> bool {
    if body.is_end_stream() {
        return true;
    }
    let short = declared_length(headers).is_none_or(|length| length <= DISCARD_BYTES_MAX);
    // Boxed: the wait (a timer and the body's read) is rare, and would otherwise make every
    // route's future that may await this one larger, bodiless requests' included.
    short && Box::pin(tokio::time::timeout(DISCARD_WAIT, discard(body))).await == Ok(true)
}

/// Reads `body` to its end, keeping nothing; false if it fails or passes
/// [`DISCARD_BYTES_MAX`].
async fn discard(mut body: RequestBody) -> bool {
    let mut left = DISCARD_BYTES_MAX;
    loop {
        match body.frame().await {
            None => return true,
            Some(Err(_)) => return false,
            Some(Ok(frame)) => {
                let bytes = frame.data_ref().map_or(0, |data| data.len() as u64);
                match left.checked_sub(bytes) {
                    Some(still) => left = still,
                    None => return false,
                }
            }
        }
    }
}

/// `problem`, closing the connection (its request's body is left unread).
fn closing(problem: Problem) -> Problem {
    problem.with_header(CONNECTION, HeaderValue::from_static("close"))
}

/// The length a request declares for its body, if it does.
pub(crate) fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok())
}

/// The whole body, if it is at most `rules.bytes_max` long, arrives without a pause as long
/// as `rules.timeout`, and fits the shared budget; with its charge. A refusal leaves the
/// rest of the body unread, and closes the connection.
pub(crate) async fn read(
    body: RequestBody,
    headers: &HeaderMap,
    rules: &BodyRules,
) -> Result<(Bytes, HeldBody), Problem> {
    read_whole(body, headers, rules).await.map_err(closing)
}

async fn read_whole(
    mut body: RequestBody,
    headers: &HeaderMap,
    rules: &BodyRules,
) -> Result<(Bytes, HeldBody), Problem> {
    let bytes_max = rules.bytes_max;
    let too_large = || {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            format!("request body is larger than {bytes_max} bytes"),
        )
    };
    let mut held = HeldBody::none(&rules.budget);
    let declared = declared_length(headers);
    if declared.is_some_and(|length| length > bytes_max) {
        return Err(too_large());
    }
    if !held.grow(declared.unwrap_or(0)) {
        return Err(busy());
    }
    // The declared length is within the limit and charged: the joined buffer starts at it.
    let mut collected = Collected { expected: declared.unwrap_or(0) as usize, ..Collected::default() };
    loop {
        let frame = match tokio::time::timeout(rules.timeout, body.frame()).await {
            Err(_) => return Err(stalled(rules.timeout)),
            Ok(None) => break,
            Ok(Some(Err(_))) => {
                return Err(Problem::bad_request("body-unreadable", "request body could not be read"))
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else { continue };
        let length = collected.len() + data.len() as u64;
        if length > bytes_max {
            return Err(too_large());
        }
        if length > held.bytes && !held.grow(length - held.bytes) {
            return Err(busy());
        }
        collected.push(data);
    }
    Ok((collected.into_bytes(), held))
}

/// A body's frames so far: the first kept as it came (most bodies are one frame, and are
/// then never copied), later ones joined into one buffer, allocated once at the declared
/// length when there is one.
#[derive(Default)]
struct Collected {
    first: Option<Bytes>,
    joined: Option<BytesMut>,
    expected: usize,
}

impl Collected {
    fn len(&self) -> u64 {
        match (&self.first, &self.joined) {
            (_, Some(joined)) => joined.len() as u64,
            (Some(first), None) => first.len() as u64,
            (None, None) => 0,
        }
    }

    fn push(&mut self, data: Bytes) {
        match (self.first.take(), &mut self.joined) {
            (None, None) => self.first = Some(data),
            (Some(first), None) => {
                let mut joined = BytesMut::with_capacity(self.expected.max(first.len() + data.len()));
                joined.extend_from_slice(&first);
                joined.extend_from_slice(&data);
                self.joined = Some(joined);
            }
            (_, Some(joined)) => joined.extend_from_slice(&data),
        }
    }

    fn into_bytes(self) -> Bytes {
        match (self.first, self.joined) {
            (_, Some(joined)) => joined.freeze(),
            (first, None) => first.unwrap_or_default(),
        }
    }
}

fn busy() -> Problem {
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "too-many-bodies",
        "the server holds as many request bodies as it has room for; try again shortly",
    )
    .with_header(RETRY_AFTER, HeaderValue::from_static("1"))
}

fn stalled(timeout: Duration) -> Problem {
    Problem::new(
        StatusCode::REQUEST_TIMEOUT,
        "body-timeout",
        format!("no request body bytes arrived for {} seconds", timeout.as_secs()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holding_stops_at_the_budget_and_drops_give_back() {
        let budget = Arc::new(BodyBudget::new(100));
        let mut first = HeldBody::none(&budget);
        assert!(first.grow(60));
        let mut second = HeldBody::none(&budget);
        assert!(!second.grow(41), "past the budget");
        assert!(second.grow(40));
        assert_eq!(budget.held(), 100);
        drop(first);
        assert_eq!(budget.held(), 40);
        drop(second);
        assert_eq!(budget.held(), 0);
    }
}
