//! `live=long-poll`: answer as soon as there is data after the offset, or 204 at the timeout.
//!
//! Data already there is returned at once (as a catch-up read would). At the tail of a
//! closed stream the answer is an immediate 204 with `Stream-Closed`. Otherwise the request
//! subscribes to the stream's tail, enables its wait, looks again, and sleeps until a wake,
//! the timeout (after which it looks once more) or server shutdown. `offset=now` waits for
//! data after the tail as it was when the request arrived.

use std::sync::Arc;

use ds_engine::{ReadResult, StartAt, StreamHandle};
use hyper::header::HeaderValue;
use hyper::{Response, StatusCode};
use tokio::time::Instant;

use crate::app::App;
use crate::http::cursor::{response_cursor, Cursor};
use crate::http::headers::{self, STREAM_CLOSED, STREAM_CURSOR, STREAM_NEXT_OFFSET, STREAM_UP_TO_DATE};
use crate::http::problem::Problem;
use crate::http::read_reply::{chunk_response, read_once, ReadStart};
use crate::http::response::{response, Body};

pub(crate) async fn serve(
    app: Arc<App>,
    handle: StreamHandle,
    start: ReadStart,
    client_cursor: Option<String>,
    if_none_match: Option<HeaderValue>,
) -> Result<Response<Body>, Problem> {
    let _counted = app.metrics.live_reader(false);
    let subscription = handle.subscribe();
    let at = match start.at {
        StartAt::Tail => StartAt::At(handle.status().ok_or_else(Problem::not_found)?.tail),
        other => other,
    };
    let resolved = ReadStart { at, text: start.text.clone() };
    let deadline = Instant::now() + app.long_poll_timeout;
    let mut timed_out = false;
    loop {
        let woken = subscription.notify().notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let result = read_once(&handle, &resolved, app.read_bytes_max)?;
        let cursor = || response_cursor(client_cursor.as_deref(), now_ms());
        if !result.chunk.is_empty() {
            return Ok(chunk_response(&handle, result, &start.text, if_none_match.as_ref(), Some(cursor())));
        }
        if result.closed_at_tail() || timed_out || app.shutdown.is_triggered() {
            return Ok(no_content(&result, cursor()));
        }
        tokio::select! {
            _ = &mut woken => {}
            _ = tokio::time::sleep_until(deadline) => timed_out = true,
            _ = app.shutdown.wait() => {}
        }
    }
}

/// 204: nothing new (yet), with where to continue from.
fn no_content(result: &ReadResult, cursor: Cursor) -> Response<Body> {
    let mut reply = response(StatusCode::NO_CONTENT, Body::Empty);
    let headers = reply.headers_mut();
    headers.insert(STREAM_NEXT_OFFSET, headers::offset_value(result.chunk.next));
    headers.insert(STREAM_UP_TO_DATE, headers::TRUE);
    headers.insert(STREAM_CURSOR, headers::cursor_value(&cursor));
    if result.closed_at_tail() {
        headers.insert(STREAM_CLOSED, headers::TRUE);
    }
    reply
}

fn now_ms() -> u64 {
    ds_engine::Clock::System.now_ms()
}
