//! GET /metrics: the Prometheus text exposition of the front's and the engine's counters.

use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Response, StatusCode};

use ds_engine::StorageMode;

use crate::app::App;
use crate::http::problem::Problem;
use crate::http::response::{response, Body};
use crate::metrics::{render, EngineView, FrontGauges};

pub(crate) fn metrics(app: &App, method: &Method) -> Result<Response<Body>, Problem> {
    if method != Method::GET {
        return Err(Problem::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            format!("{method} is not allowed on /metrics"),
        )
        .with_header(ALLOW, HeaderValue::from_static("GET")));
    }
    let mode = app.engine.config().mode;
    let front = FrontGauges { body_held_bytes: app.body.budget.held() };
    let (stats, shards, flushes) = (app.engine.stats(), app.engine.shard_stats(), app.engine.flush_stats());
    let zero_waits = app.engine.zero_wait_stats();
    let engine = EngineView {
        stats: &stats,
        shards: &shards,
        disk: mode != StorageMode::Memory,
        flushes: (mode == StorageMode::Acid).then_some(&flushes),
        zero_waits: zero_waits.as_ref(),
    };
    let text = render(&app.metrics, front, engine);
    let mut reply = response(StatusCode::OK, Body::full(text.into_bytes()));
    reply.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
    Ok(reply)
}
