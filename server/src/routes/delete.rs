//! DELETE /v1/stream/{name}: remove a stream and all its data (204, or 404).

use ds_engine::StreamName;
use hyper::{Response, StatusCode};

use super::op_problem;
use crate::app::App;
use crate::http::problem::Problem;
use crate::http::response::{response, Body};

pub(crate) async fn delete(app: &App, name: StreamName) -> Result<Response<Body>, Problem> {
    app.engine.delete(name).await.map_err(op_problem)?;
    Ok(response(StatusCode::NO_CONTENT, Body::Empty))
}
