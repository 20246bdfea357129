//! Request dispatch: path and method to route, and the headers every answer gets.
//!
//! `/healthz` and `/v1/stream/{name}` exist; everything else is a 404 problem, and a method
//! a path does not serve is a 405 with `Allow`. Every response, errors included, leaves
//! through [`handle`], which adds the common headers.

use std::convert::Infallible;
use std::sync::Arc;

use ds_engine::StreamName;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, ORIGIN};
use hyper::{Method, Request, Response, StatusCode};

use crate::app::App;
use crate::http::cors::ALLOWED_METHODS;
use crate::http::problem::Problem;
use crate::http::response::{finish, Body};
use crate::routes;

/// Where stream names start in the path.
pub const STREAM_PREFIX: &str = "/v1/stream/";

/// Answers one request (never fails: errors become problem responses).
pub async fn handle(app: Arc<App>, request: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let origin = request.headers().get(ORIGIN).cloned();
    let mut response = route(&app, request).await.unwrap_or_else(Problem::into_response);
    finish(&mut response, &app.cors, origin.as_ref());
    Ok(response)
}

async fn route(app: &Arc<App>, request: Request<Incoming>) -> Result<Response<Body>, Problem> {
    let path = request.uri().path();
    if path == "/healthz" {
        return routes::health::health(request.method());
    }
    let Some(raw_name) = path.strip_prefix(STREAM_PREFIX) else {
        return Err(Problem::new(StatusCode::NOT_FOUND, "no-route", format!("no resource at {path}")));
    };
    if request.method() == Method::OPTIONS {
        return Ok(routes::preflight::preflight());
    }
    let name = StreamName::from_path(raw_name)
        .map_err(|error| Problem::bad_request("invalid-name", error.to_string()))?;
    match *request.method() {
        Method::PUT => routes::create::create(app, name, request).await,
        Method::POST => routes::append::append(app, name, request).await,
        Method::GET => routes::read::read(app, name, request).await,
        Method::HEAD => routes::head::head(app, &name),
        Method::DELETE => routes::delete::delete(app, name).await,
        ref other => Err(Problem::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            format!("{other} is not allowed on streams"),
        )
        .with_header(ALLOW, HeaderValue::from_static(ALLOWED_METHODS))),
    }
}
