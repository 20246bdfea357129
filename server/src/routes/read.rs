//! GET /v1/stream/{name}: reads. Catch-up is answered here; long-poll and SSE in `live`.
//!
//! A catch-up read returns whole messages from the offset, at most `DS_LIMITS__MAX_READ_BYTES`
//! of them (a partial answer has no `Stream-Up-To-Date`, and its `Stream-Next-Offset` says
//! where to continue). JSON streams answer with a JSON array. Every 200 carries an ETag of
//! `"start:end"` (`:c` appended when the reader reached the tail of a closed stream), and an
//! `If-None-Match` naming that ETag gets 304 (`crate::http::read_reply`).

use std::sync::Arc;

use ds_engine::StreamName;
use hyper::header::IF_NONE_MATCH;
use hyper::Request;

use crate::app::App;
use crate::http::problem::Problem;
use crate::http::query::{Live, ReadQuery};
use crate::http::read_reply::{chunk_response, read_once, ReadStart};
use crate::http::request_body::RequestBody;
use crate::live::{long_poll, sse};
use crate::routes::Reply;

/// Answers a read: a catch-up or SSE answer now, a long-poll once it has data or times out.
pub(crate) fn read(
    app: &Arc<App>,
    name: StreamName,
    request: Request<RequestBody>,
) -> Result<Reply, Problem> {
    let query = ReadQuery::parse(request.uri().query())?;
    let start = ReadStart::resolve(&query, request.headers())?;
    let if_none_match = request.headers().get(IF_NONE_MATCH).cloned();
    let handle = super::open_stream(app, &name)?;
    match query.live {
        Live::No => {
            let result = read_once(&handle, &start, app.read_bytes_max)?;
            Ok(Reply::Now(chunk_response(&handle, result, &start.text, if_none_match.as_ref(), None)))
        }
        Live::LongPoll => {
            let wait = long_poll::serve(Arc::clone(app), handle, start, query.cursor, if_none_match);
            Ok(Reply::Later(Box::pin(wait)))
        }
        Live::Sse => sse::serve(app, handle, start, query.cursor).map(Reply::Now),
    }
}
