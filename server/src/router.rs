//! Request dispatch: path and method to route, and the headers every answer gets.
//!
//! `/healthz`, `/metrics` and `/v1/stream/{name}` exist; everything else is a 404 problem,
//! and a method a path does not serve is a 405 with `Allow`. Every response, errors
//! included, leaves through [`handle`], which adds the common headers, counts the request
//! in the metrics and writes its access log line.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use ds_engine::StreamName;
use hyper::body::Body as _;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, ORIGIN};
use hyper::{Method, Request, Response, StatusCode, Uri};

use crate::access_log::AccessRecord;
use crate::app::App;
use crate::http::cors::ALLOWED_METHODS;
use crate::http::problem::Problem;
use crate::http::response::{finish, Body};
use crate::metrics::{Metrics, Route};
use crate::routes;
use crate::socket_link::SocketLink;

/// Where stream names start in the path.
pub const STREAM_PREFIX: &str = "/v1/stream/";

/// Answers one request (never fails: errors become problem responses). `link`: the
/// connection's socket when it is plain TCP (an SSE response may write to it directly; no
/// other route gets it).
pub fn handle(
    app: Arc<App>,
    request: Request<Incoming>,
    link: &Option<Arc<SocketLink>>,
) -> impl Future<Output = Result<Response<Body>, Infallible>> + Send + 'static {
    let label = route_label(request.method(), request.uri());
    let link = if label == Route::Sse { link.clone() } else { None };
    handle_route(app, request, label, link)
}

async fn handle_route(
    app: Arc<App>,
    request: Request<Incoming>,
    label: Route,
    link: Option<Arc<SocketLink>>,
) -> Result<Response<Body>, Infallible> {
    // A worker kept busy never goes idle to ring the shards it held rings back for.
    ds_engine::wake_batch::ring_overdue();
    let origin = request.headers().get(ORIGIN).cloned();
    let access = AccessRecord::begin(&request);
    let mut response = route(&app, label, request, link).await.unwrap_or_else(Problem::into_response);
    finish(&mut response, &app.cors, origin.as_ref());
    let status = response.status().as_u16();
    let bytes = response.body().size_hint().exact();
    app.metrics.request(label, status);
    if matches!(label, Route::Read | Route::LongPoll) && response.status().is_success() {
        Metrics::add(&app.metrics.read_bytes, bytes.unwrap_or(0));
    }
    if let Some(access) = access {
        access.finish(status, bytes);
    }
    Ok(response)
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
            let live = uri.query().unwrap_or("").split('&').find_map(|pair| pair.strip_prefix("live="));
            match live {
                Some("sse") => Route::Sse,
                Some("long-poll") => Route::LongPoll,
                _ => Route::Read,
            }
        }
        _ => Route::Other,
    }
}

/// Runs the route `label` names (an unknown path is a 404, an unknown method a 405).
async fn route(
    app: &Arc<App>,
    label: Route,
    request: Request<Incoming>,
    link: Option<Arc<SocketLink>>,
) -> Result<Response<Body>, Problem> {
    match label {
        Route::Health => return routes::health::health(request.method()),
        Route::Metrics => return routes::metrics::metrics(app, request.method()),
        Route::Preflight => return Ok(routes::preflight::preflight()),
        _ => {}
    }
    let path = request.uri().path();
    let Some(raw_name) = path.strip_prefix(STREAM_PREFIX) else {
        return Err(Problem::new(StatusCode::NOT_FOUND, "no-route", format!("no resource at {path}")));
    };
    let name = StreamName::from_path(raw_name)
        .map_err(|error| Problem::bad_request("invalid-name", error.to_string()))?;
    match label {
        Route::Create => routes::create::create(app, name, request).await,
        Route::Append => routes::append::append(app, name, request).await,
        Route::Read | Route::LongPoll | Route::Sse => routes::read::read(app, name, request, link).await,
        Route::Head => routes::head::head(app, &name),
        Route::Delete => routes::delete::delete(app, name).await,
        _ => Err(Problem::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            format!("{} is not allowed on streams", request.method()),
        )
        .with_header(ALLOW, HeaderValue::from_static(ALLOWED_METHODS))),
    }
}
