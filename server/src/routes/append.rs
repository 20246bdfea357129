//! POST /v1/stream/{name}: append messages and/or close the stream.
//!
//! A body needs a `Content-Type` matching the stream's; an empty body is only allowed with
//! `Stream-Closed: true` (a close-only request, whose `Content-Type` is ignored entirely,
//! even an empty or malformed one: PROTOCOL.md §5.2 says a server must not reject it for
//! that, as clients and libraries attach default headers). Producer tags make retries safe:
//! 200 for new data, 204 for a duplicate.

use ds_engine::{AppendKind, AppendOutcome, AppendRequest, StreamName};
use hyper::{Request, Response, StatusCode};

use super::{op_problem, payload_of};
use crate::app::App;
use crate::http::headers::{self, PRODUCER_EPOCH, PRODUCER_SEQ, STREAM_CLOSED, STREAM_NEXT_OFFSET};
use crate::http::problem::Problem;
use crate::http::request_body::{self, RequestBody};
use crate::http::response::{response, Body};
use crate::metrics::Metrics;

pub(crate) async fn append(
    app: &App,
    name: StreamName,
    request: Request<RequestBody>,
) -> Result<Response<Body>, Problem> {
    let (parts, body) = request.into_parts();
    let head = match judge_head(app, &name, &parts.headers) {
        Ok(head) => head,
        Err(problem) => return Err(request_body::refuse_unread(body, &parts.headers, problem).await),
    };
    let Head { content_type, close, producer, stream_seq } = head;
    let (body, _held) = request_body::read(body, &parts.headers, &app.body).await?;
    let body_bytes = body.len() as u64;
    let content_type = match (content_type, body.is_empty() && close) {
        (_, true) => None,
        (declared, false) => declared?,
    };
    let payload = match (&content_type, body.is_empty()) {
        (_, true) if close => None,
        (_, true) => {
            return Err(Problem::bad_request(
                "empty-body",
                "an append needs a body unless it closes the stream",
            ))
        }
        (None, false) => {
            return Err(Problem::bad_request(
                "missing-content-type",
                "an append with a body needs a Content-Type",
            ))
        }
        (Some(content_type), false) => payload_of(content_type, body, false)?,
    };
    let tagged = producer.is_some();
    let request = AppendRequest { name, content_type, payload, close, producer, stream_seq };
    let outcome = app.engine.append(request).await.map_err(op_problem)?;
    if outcome.kind == AppendKind::Stored {
        Metrics::add(&app.metrics.append_bytes, body_bytes);
    }
    Ok(reply(outcome, tagged))
}

/// An append's headers.
struct Head {
    /// Judged once the body is read: a close-only request's is ignored, whatever it is.
    content_type: Result<Option<ds_engine::ContentType>, Problem>,
    close: bool,
    producer: Option<ds_engine::ProducerTag>,
    stream_seq: Option<Box<str>>,
}

/// The append's headers, parsed, and judged before a byte of the body is read (a bad
/// `Content-Type` only when a body is declared: without one it may be a close-only request).
fn judge_head(app: &App, name: &StreamName, headers: &hyper::HeaderMap) -> Result<Head, Problem> {
    let content_type = headers::content_type(headers);
    let declares_body = request_body::declared_length(headers).is_some_and(|length| length > 0);
    let head = Head {
        content_type: match declares_body {
            true => Ok(content_type?),
            false => content_type,
        },
        close: headers::stream_closed(headers)?,
        producer: headers::producer(headers)?,
        stream_seq: headers::stream_seq(headers)?,
    };
    let declared = head.content_type.as_ref().ok().and_then(Option::as_ref);
    refuse_before_the_body(app, name, headers, declared)?;
    Ok(head)
}

/// What can be refused before a byte of the body is read (so a body sent to a stream that
/// is not there, or is of another type, never takes memory): a missing or damaged stream,
/// and a body whose content type is not an open stream's (on a closed one the shard answers
/// that it is closed, which comes first). The shard decides all of it again with the body.
fn refuse_before_the_body(
    app: &App,
    name: &StreamName,
    headers: &hyper::HeaderMap,
    content_type: Option<&ds_engine::ContentType>,
) -> Result<(), Problem> {
    let handle = super::open_stream(app, name)?;
    if let Some(damage) = handle.damage() {
        return Err(op_problem(ds_engine::OpError::StreamDamaged { at: damage.at }));
    }
    // A close-only request's content type does not matter; only a declared body is judged.
    if request_body::declared_length(headers).unwrap_or(0) == 0 {
        return Ok(());
    }
    let open = handle.status().is_some_and(|published| !published.closed);
    match content_type {
        Some(content_type) if open && !content_type.matches(&handle.config().content_type) => {
            Err(op_problem(ds_engine::OpError::ContentTypeMismatch))
        }
        _ => Ok(()),
    }
}

fn reply(outcome: AppendOutcome, tagged: bool) -> Response<Body> {
    let status = match outcome.kind {
        AppendKind::Stored if tagged => StatusCode::OK,
        AppendKind::Stored | AppendKind::Closed | AppendKind::Duplicate => StatusCode::NO_CONTENT,
    };
    let mut reply = response(status, Body::Empty);
    let headers = reply.headers_mut();
    headers.insert(STREAM_NEXT_OFFSET, headers::offset_value(outcome.tail));
    if outcome.closed {
        headers.insert(STREAM_CLOSED, headers::TRUE);
    }
    if let Some((epoch, seq)) = outcome.producer {
        headers.insert(PRODUCER_EPOCH, headers::number_value(epoch));
        headers.insert(PRODUCER_SEQ, headers::number_value(seq));
    }
    reply
}
