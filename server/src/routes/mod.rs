//! One module per endpoint, plus what they share: engine errors as HTTP problems, and turning
//! a request body into a payload.
//!
//! - `create` (PUT), `append` (POST), `read` (GET catch-up; live modes are in `crate::live`),
//!   `head` (HEAD), `delete` (DELETE), `health` (`/healthz`), `metrics` (`/metrics`),
//!   `preflight` (CORS OPTIONS).

pub(crate) mod append;
pub(crate) mod create;
pub(crate) mod delete;
pub(crate) mod head;
pub(crate) mod health;
pub(crate) mod metrics;
pub(crate) mod preflight;
pub(crate) mod read;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use ds_engine::ContentType;
use ds_engine::StreamName;
use ds_engine::{OpError, Payload};
use hyper::header::HeaderValue;
use hyper::{Request, Response, StatusCode};

use crate::app::App;
use crate::http::headers::{self, STREAM_CLOSED, STREAM_NEXT_OFFSET};
use crate::http::problem::Problem;
use crate::http::request_body::RequestBody;
use crate::http::response::Body;
use crate::metrics::Route;

/// Where stream names start in a path (request paths and `Stream-Forked-From`).
pub(crate) const STREAM_PREFIX: &str = "/v1/stream/";

/// A route's answer: ready now, or once a wait ends (a long-poll). A waiting answer owns
/// what it needs; the request and the route's state are gone while it waits.
pub(crate) enum Reply {
    Now(Response<Body>),
    Later(Waiting),
}

/// An answer still waiting, as a boxed future that owns its state.
pub(crate) type Waiting = Pin<Box<dyn Future<Output = Result<Response<Body>, Problem>> + Send>>;

/// Serves a stream request on this node (`label` one of the stream routes).
pub(crate) async fn stream(
    app: &Arc<App>,
    label: Route,
    name: StreamName,
    request: Request<RequestBody>,
) -> Result<Reply, Problem> {
    let now = match label {
        // Boxed: a create's state (the larger) is then not part of every append's future.
        Route::Create => Box::pin(create::create(app, name, request)).await,
        Route::Append => append::append(app, name, request).await,
        Route::Head => head::head(app, &name),
        Route::Delete => delete::delete(app, name).await,
        _ => return read::read(app, name, request),
    };
    now.map(Reply::Now)
}

/// The HTTP answer to an engine refusal.
pub(crate) fn op_problem(error: OpError) -> Problem {
    let detail = error.to_string();
    match error {
        OpError::NotFound => Problem::not_found(),
        OpError::EmptyAppend => Problem::bad_request("empty-body", detail),
        OpError::ConfigMismatch => Problem::new(StatusCode::CONFLICT, "config-mismatch", detail),
        OpError::ContentTypeMismatch => Problem::new(StatusCode::CONFLICT, "content-type-mismatch", detail),
        OpError::StreamClosed { tail } => Problem::new(StatusCode::CONFLICT, "stream-closed", detail)
            .with_header(STREAM_CLOSED, headers::TRUE)
            .with_header(STREAM_NEXT_OFFSET, headers::offset_value(tail)),
        OpError::StaleEpoch { current } => {
            Problem::new(StatusCode::FORBIDDEN, "stale-producer-epoch", detail)
                .with_header(headers::PRODUCER_EPOCH, headers::number_value(current))
        }
        OpError::EpochSeqNotZero => Problem::bad_request("invalid-producer-seq", detail),
        OpError::SeqGap { expected, received } => {
            Problem::new(StatusCode::CONFLICT, "producer-seq-gap", detail)
                .with_header(headers::PRODUCER_EXPECTED_SEQ, headers::number_value(expected))
                .with_header(headers::PRODUCER_RECEIVED_SEQ, headers::number_value(received))
        }
        OpError::StreamSeqRegression => Problem::new(StatusCode::CONFLICT, "stream-seq-regression", detail),
        OpError::StreamFull => Problem::new(StatusCode::PAYLOAD_TOO_LARGE, "stream-full", detail),
        OpError::AppendTooLarge { .. } => {
            Problem::new(StatusCode::PAYLOAD_TOO_LARGE, "append-too-large", detail)
        }
        OpError::MemoryFull => Problem::new(StatusCode::PAYLOAD_TOO_LARGE, "storage-full", detail),
        OpError::TooManyProducers => {
            Problem::new(StatusCode::TOO_MANY_REQUESTS, "too-many-producers", detail)
        }
        OpError::Overloaded => Problem::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded", detail)
            .with_header(hyper::header::RETRY_AFTER, HeaderValue::from_static("1")),
        OpError::ShuttingDown => Problem::new(StatusCode::SERVICE_UNAVAILABLE, "shutting-down", detail)
            .with_header(hyper::header::RETRY_AFTER, HeaderValue::from_static("1")),
        OpError::StreamDamaged { .. } => {
            Problem::new(StatusCode::INTERNAL_SERVER_ERROR, "stream-damaged", detail)
        }
        OpError::Unavailable => Problem::new(StatusCode::SERVICE_UNAVAILABLE, "storage-unavailable", detail)
            .with_header(hyper::header::RETRY_AFTER, HeaderValue::from_static("1")),
        OpError::InsufficientStorage => Problem::new(StatusCode::INSUFFICIENT_STORAGE, "disk-full", detail)
            .with_header(hyper::header::RETRY_AFTER, HeaderValue::from_static("5")),
        OpError::DirectoryRemoved => {
            Problem::new(StatusCode::SERVICE_UNAVAILABLE, "data-directory-removed", detail)
        }
        OpError::StorageFailed => Problem::new(StatusCode::SERVICE_UNAVAILABLE, "storage-failed", detail),
        OpError::TooManyStreams => Problem::new(StatusCode::INSUFFICIENT_STORAGE, "too-many-streams", detail),
        OpError::Gone => Problem::new(StatusCode::GONE, "stream-deleted", detail),
        OpError::NameHeld => Problem::new(StatusCode::CONFLICT, "name-held-by-deleted-stream", detail),
        OpError::SourceDeleted => Problem::new(StatusCode::CONFLICT, "fork-source-deleted", detail),
        OpError::ForkPoint(_) => Problem::bad_request("invalid-fork-point", detail),
    }
}

/// A handle on the stream called `name` for a client request: 404 when there is none, 410
/// when it was deleted while forks still read it.
pub(crate) fn open_stream(
    app: &crate::app::App,
    name: &ds_engine::StreamName,
) -> Result<ds_engine::StreamHandle, Problem> {
    let handle = app.engine.open(name).ok_or_else(Problem::not_found)?;
    match handle.status() {
        Some(status) if status.deleted => Err(op_problem(OpError::Gone)),
        Some(_) => Ok(handle),
        None => Err(Problem::not_found()),
    }
}

/// The messages a request body stores for a stream of `content_type` (`None` when empty).
///
/// `allow_empty_array`: a create may carry `[]` (no initial messages); an append may not.
pub(crate) fn payload_of(
    content_type: &ContentType,
    body: Bytes,
    allow_empty_array: bool,
) -> Result<Option<Payload>, Problem> {
    if body.is_empty() {
        return Ok(None);
    }
    if !content_type.is_json() {
        return Ok(Some(Payload::raw(body)));
    }
    Payload::json(body, allow_empty_array)
        .map(|payload| (!payload.is_empty()).then_some(payload))
        .map_err(|error| Problem::bad_request("invalid-json", error.to_string()))
}
