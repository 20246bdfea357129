//! Request dispatch: path and method to route, and the headers every answer gets.
//!
//! `/healthz`, `/metrics` and `/v1/stream/{name}` exist; everything else is a 404 problem,
//! and a method a path does not serve is a 405 with `Allow`. Every response, errors
//! included, leaves through [`handle`], which adds the common headers, counts the request
//! in the metrics and writes its access log line.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ds_engine::StreamName;
use hyper::body::Body as _;
use hyper::header::{HeaderValue, ALLOW, CONNECTION, ORIGIN, TRANSFER_ENCODING};
use hyper::{Method, Request, Response, StatusCode, Uri};

use crate::access_log::AccessRecord;
use crate::app::App;
use crate::http::cors::ALLOWED_METHODS;
use crate::http::problem::Problem;
use crate::http::request_body::{self, RequestBody};
use crate::http::response::{finish, Body};
use crate::metrics::{Metrics, Route};
use crate::placement;
use crate::routes::{self, Reply};

use routes::STREAM_PREFIX;

/// Answers one request (never fails: errors become problem responses).
pub(crate) fn handle(
    app: Arc<App>,
    request: Request<RequestBody>,
) -> impl Future<Output = Routed> + Send + 'static {
    let label = route_label(request.method(), request.uri());
    handle_route(app, request, label)
}

/// A request's answer: ready, or a long-poll still waiting. A waiting answer holds only
/// the wait's own state (stream handle, offsets, timer) and what finishes the answer
/// (metrics, the access line): the request and the route's state are gone.
pub(crate) enum Routed {
    Now(Response<Body>),
    Later(Pin<Box<dyn Future<Output = Response<Body>> + Send>>),
}

impl Routed {
    /// The answer, once it is there.
    pub(crate) async fn resolve(self) -> Response<Body> {
        match self {
            Routed::Now(response) => response,
            Routed::Later(waiting) => waiting.await,
        }
    }
}

async fn handle_route(app: Arc<App>, request: Request<RequestBody>, label: Route) -> Routed {
    // A worker kept busy never goes idle to ring the shards it held rings back for.
    ds_engine::wake_batch::ring_overdue();
    let origin = request.headers().get(ORIGIN).cloned();
    if let Some(problem) = refused_head(&request) {
        let access = AccessRecord::begin(&request);
        let mut response = refuse(request, problem).await.into_response();
        finish(&mut response, &app.cors, origin.as_ref());
        app.metrics.request(label, response.status().as_u16());
        if let Some(access) = access {
            access.finish(response.status().as_u16(), response.body().size_hint().exact());
        }
        return Routed::Now(response);
    }
    let (request, closes) = match label {
        Route::Create | Route::Append => (request, false),
        _ => without_body(request).await,
    };
    let access = AccessRecord::begin(&request);
    let answer = Unanswered { app: Arc::clone(&app), label, access, closes, answered: false };
    match route(&app, label, request).await {
        Ok(Reply::Now(response)) => Routed::Now(answer.finish(response, origin)),
        Err(problem) => Routed::Now(answer.finish(problem.into_response(), origin)),
        Ok(Reply::Later(waiting)) => Routed::Later(Box::pin(async move {
            let response = waiting.await.unwrap_or_else(Problem::into_response);
            answer.finish(response, origin)
        })),
    }
}

/// Largest request head (request line and headers) accepted, in bytes (`router` answers
/// 431 past it; hyper reads heads up to twice as large, so that a long URI is told apart
/// and answered 414, and gives up on anything larger with 431).
pub(crate) const HEAD_BYTES_MAX: usize = 64 * 1024;
/// Longest request target (path and query) served, in bytes: a stream name of 1024 bytes
/// fully percent-encoded and a read's parameters fit well inside.
pub(crate) const URI_BYTES_MAX: usize = 8 * 1024;

/// 414 for a request target past [`URI_BYTES_MAX`], 431 for a head past `HEAD_BYTES_MAX`,
/// 501 for a transfer coding other than `chunked` alone.
fn refused_head(request: &Request<RequestBody>) -> Option<Problem> {
    oversized_head(request).or_else(|| unsupported_transfer_coding(request))
}

/// 501 for a `Transfer-Encoding` that is not `chunked` alone (`gzip, chunked`, say): hyper
/// takes the chunked framing off, and what is left would be stored still encoded (RFC 9112
/// §6.1: a server that does not understand a coding answers 501).
fn unsupported_transfer_coding(request: &Request<RequestBody>) -> Option<Problem> {
    let values = request.headers().get_all(TRANSFER_ENCODING);
    let mut codings = values
        .iter()
        .flat_map(|value| value.to_str().unwrap_or("\u{fffd}").split(','))
        .map(str::trim)
        .filter(|coding| !coding.is_empty());
    let first = codings.next()?;
    let rest: Vec<&str> = codings.collect();
    if first.eq_ignore_ascii_case("chunked") && rest.is_empty() {
        return None;
    }
    let listed = [first].into_iter().chain(rest).collect::<Vec<_>>().join(", ");
    let detail = format!("Transfer-Encoding {listed} is not supported: only chunked alone");
    Some(Problem::new(StatusCode::NOT_IMPLEMENTED, "unsupported-transfer-coding", detail))
}

/// 414 for a request target past [`URI_BYTES_MAX`], 431 for a head past `HEAD_BYTES_MAX`.
fn oversized_head(request: &Request<RequestBody>) -> Option<Problem> {
    let uri_bytes = request.uri().path_and_query().map_or(0, |target| target.as_str().len());
    if uri_bytes > URI_BYTES_MAX {
        let detail = format!("the request target is longer than {URI_BYTES_MAX} bytes");
        return Some(Problem::new(StatusCode::URI_TOO_LONG, "uri-too-long", detail));
    }
    let header_bytes: usize =
        request.headers().iter().map(|(name, value)| name.as_str().len() + value.len() + 4).sum();
    if uri_bytes + header_bytes > HEAD_BYTES_MAX {
        let detail = format!("the request head is larger than {} bytes", HEAD_BYTES_MAX);
        return Some(Problem::new(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "head-too-large", detail));
    }
    None
}

/// What the client closed the connection before its answer is counted and logged as (the
/// code nginx gives it).
pub(crate) const CLIENT_CLOSED: u16 = 499;

/// A request not answered yet: if the client goes away first (hyper drops the request's
/// future), it is still counted and logged, as [`CLIENT_CLOSED`].
struct Unanswered {
    app: Arc<App>,
    label: Route,
    access: Option<AccessRecord>,
    /// The request's body was left unread: the answer closes the connection.
    closes: bool,
    answered: bool,
}

impl Unanswered {
    /// Adds the common headers to `response`, counts it and writes its access line.
    fn finish(mut self, mut response: Response<Body>, origin: Option<HeaderValue>) -> Response<Body> {
        finish(&mut response, &self.app.cors, origin.as_ref());
        if self.closes {
            response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
        }
        let status = response.status().as_u16();
        let bytes = response.body().size_hint().exact();
        self.app.metrics.request(self.label, status);
        if matches!(self.label, Route::Read | Route::LongPoll) && response.status().is_success() {
            Metrics::add(&self.app.metrics.read_bytes, bytes.unwrap_or(0));
        }
        self.answered = true;
        if let Some(access) = self.access.take() {
            access.finish(status, bytes);
        }
        response
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        self.app.metrics.request(self.label, CLIENT_CLOSED);
        if let Some(access) = self.access.take() {
            access.finish(CLIENT_CLOSED, None);
        }
    }
}

/// Whether a request waits for data not yet written (a long-poll, SSE): the only kind whose
/// client hanging up drops it; any other is carried to its answer.
pub(crate) fn waits_for_data(method: &Method, uri: &Uri) -> bool {
    matches!(route_label(method, uri), Route::LongPoll | Route::Sse)
}

/// Which route serves a request, by path and method (live reads told apart by their `live`
/// parameter); also the request's metrics label.
fn route_label(method: &Method, uri: &Uri) -> Route {
    match uri.path() {
        "/healthz" => return Route::Health,
        "/metrics" => return Route::Metrics,
        path if !path.starts_with(STREAM_PREFIX) => return Route::Other,
        _ => {}
    }
    match *method {
        Method::PUT => Route::Create,
        Method::POST => Route::Append,
        Method::HEAD => Route::Head,
        Method::DELETE => Route::Delete,
        Method::OPTIONS => Route::Preflight,
        Method::GET => {
            let mut live = uri.query().unwrap_or("").split('&').filter_map(|pair| pair.strip_prefix("live="));
            // A repeated `live` is refused by the read route, and counted as a plain read.
            match (live.next(), live.next()) {
                (Some("sse"), None) => Route::Sse,
                (Some("long-poll"), None) => Route::LongPoll,
                _ => Route::Read,
            }
        }
        _ => Route::Other,
    }
}

/// Runs the route `label` names (an unknown path is a 404, an unknown method a 405).
async fn route(app: &Arc<App>, label: Route, request: Request<RequestBody>) -> Result<Reply, Problem> {
    match label {
        Route::Health => return routes::health::health(request.method()).map(Reply::Now),
        Route::Metrics => return routes::metrics::metrics(app, request.method()).map(Reply::Now),
        Route::Preflight => return Ok(Reply::Now(routes::preflight::preflight())),
        _ => {}
    }
    let name = match stream_name(request.uri()) {
        Ok(name) => name,
        Err(problem) => return Err(refuse(request, problem).await),
    };
    if !matches!(
        label,
        Route::Create
            | Route::Append
            | Route::Read
            | Route::LongPoll
            | Route::Sse
            | Route::Head
            | Route::Delete
    ) {
        let problem = Problem::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            format!("{} is not allowed on streams", request.method()),
        );
        let problem = problem.with_header(ALLOW, HeaderValue::from_static(ALLOWED_METHODS));
        return Err(refuse(request, problem).await);
    }
    // Boxed: a request's future then holds only the route it takes (a waiting long-poll
    // does not carry the state of a forwarded create).
    match &app.cluster {
        Some(cluster) => Box::pin(placement::serve(app, cluster, label, name, request)).await,
        None => routes::stream(app, label, name, request).await,
    }
}

/// The stream `uri` names: 404 for a path outside the streams, 400 for a name that is not
/// valid.
fn stream_name(uri: &Uri) -> Result<StreamName, Problem> {
    let path = uri.path();
    let Some(raw_name) = path.strip_prefix(STREAM_PREFIX) else {
        return Err(Problem::new(StatusCode::NOT_FOUND, "no-route", format!("no resource at {path}")));
    };
    StreamName::from_path(raw_name).map_err(|error| Problem::bad_request("invalid-name", error.to_string()))
}

/// `request` without its body, for a route that has no use for one (only creates and
/// appends read theirs): a short body is dropped so the connection can carry the next
/// request; true when it was left unread instead, and the answer must close the connection
/// (hyper closes it either way: the client is told, rather than finding it reset).
async fn without_body(request: Request<RequestBody>) -> (Request<RequestBody>, bool) {
    let (parts, body) = request.into_parts();
    let kept = request_body::discard_unread(body, &parts.headers).await;
    (Request::from_parts(parts, RequestBody::Empty), !kept)
}

/// `problem`, as the answer to `request` before its body was read. Boxed: a refusal is
/// rare, and its state would otherwise be part of every request's future.
async fn refuse(request: Request<RequestBody>, problem: Problem) -> Problem {
    let (parts, body) = request.into_parts();
    Box::pin(request_body::refuse_unread(body, &parts.headers, problem)).await
}
