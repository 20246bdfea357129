//! POST /v1/stream/{name}: append messages and/or close the stream.
//!
//! A body needs a `Content-Type` matching the stream's; an empty body is only allowed with
//! `Stream-Closed: true` (a close-only request, whose content type is ignored). Producer
//! tags make retries safe: 200 for new data, 204 for a duplicate.

use ds_engine::{AppendKind, AppendOutcome, AppendRequest, StreamName};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};

use super::{op_problem, payload_of};
use crate::app::App;
use crate::http::headers::{self, PRODUCER_EPOCH, PRODUCER_SEQ, STREAM_CLOSED, STREAM_NEXT_OFFSET};
use crate::http::problem::Problem;
use crate::http::request_body;
use crate::http::response::{response, Body};
use crate::metrics::Metrics;

pub async fn append(
    app: &App,
    name: StreamName,
    request: Request<Incoming>,
) -> Result<Response<Body>, Problem> {
    let (parts, body) = request.into_parts();
    let content_type = headers::content_type(&parts.headers)?;
    let close = headers::stream_closed(&parts.headers)?;
    let producer = headers::producer(&parts.headers)?;
    let stream_seq = headers::stream_seq(&parts.headers)?;
    let body = request_body::read(body, &parts.headers, app.body_bytes_max).await?;
    let body_bytes = body.len() as u64;
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
