//! A request passed on to its stream's owner, and the owner's answer streamed back: status
//! and headers untouched but for the hop-by-hop ones, the body frame by frame as it comes
//! (long-poll and SSE included), the request body likewise, never buffered whole.
//!
//! A forwarded request carries [`FORWARDED_BY`]; a node never forwards such a request again
//! (it answers 503 instead), so a directory in flux cannot bounce a request around.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::header::{HeaderName, HeaderValue, CONNECTION, DATE, HOST, RETRY_AFTER, TRANSFER_ENCODING};
use hyper::{Request, Response, StatusCode};

use crate::app::App;
use crate::cluster::{Cluster, OutBody, PeerError, Pooled};
use crate::http::problem::Problem;
use crate::http::request_body::RequestBody;
use crate::http::response::{Body, LiveSource};

/// Marks a request one node passed to another (its value: the forwarding node's id).
pub(super) const FORWARDED_BY: HeaderName = HeaderName::from_static("ds-forwarded-by");
/// How long connecting to an owner may take before the request is answered 503.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How much longer than the long-poll timeout an owner may take to start its answer.
const ANSWER_MARGIN: Duration = Duration::from_secs(5);
/// What a client is told when a forwarded request may or may not have been applied.
const UNKNOWN: &str =
    "whether the owner applied it is unknown (an append is safe to retry only with producer headers)";
/// Headers that belong to one connection, not to the request or answer.
const HOP_BY_HOP: [&str; 7] =
    ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"];

/// 503 with `Retry-After: 1`: the stream exists but cannot be served right now.
pub(super) fn unavailable(kind: &'static str, detail: String) -> Problem {
    Problem::new(StatusCode::SERVICE_UNAVAILABLE, kind, detail)
        .with_header(RETRY_AFTER, HeaderValue::from_static("1"))
}

/// Passes `request` to node `owner` and returns its answer.
///
/// The owner's answer head must come within the long-poll timeout and
/// [`ANSWER_MARGIN`]: a stopped owner does not hold the request forever. What broke before
/// a byte was sent is 503 (the request did nothing, retry it); what broke after is 502,
/// and no head in time is 504, both `outcome-unknown`: the owner may have applied it.
pub(super) async fn forward(
    app: &App,
    cluster: &Cluster,
    owner: &str,
    request: Request<RequestBody>,
) -> Result<Response<Body>, Problem> {
    if request.headers().contains_key(FORWARDED_BY) {
        let detail = format!("this node was asked on behalf of another, but node {owner:?} owns the stream");
        return Err(unavailable("directory-in-flux", detail));
    }
    let node = cluster.directory().node(owner).await.map_err(|error| {
        unavailable("directory-unavailable", format!("the cluster's directory cannot be reached ({error})"))
    })?;
    let Some(authority) = node else {
        return Err(unavailable(
            "owner-unavailable",
            format!("node {owner:?}, which holds the stream, is down"),
        ));
    };
    let outgoing = outgoing(request, &authority, &cluster.node_id);
    let answer_timeout = app.long_poll_timeout + ANSWER_MARGIN;
    let sending = cluster.peers().send(&authority, outgoing, CONNECT_TIMEOUT);
    let response = match tokio::time::timeout(answer_timeout, sending).await {
        Ok(Ok(response)) => response,
        Ok(Err(PeerError::NotSent(error))) => {
            let detail = format!("node {owner:?}, which holds the stream, cannot be reached: {error}");
            return Err(unavailable("owner-unavailable", detail));
        }
        Ok(Err(PeerError::Broken(error))) => {
            let detail = format!("the connection to node {owner:?}, which holds the stream, broke after the request was sent ({error}); {UNKNOWN}");
            return Err(Problem::new(StatusCode::BAD_GATEWAY, "outcome-unknown", detail));
        }
        Err(_) => {
            let detail = format!(
                "node {owner:?}, which holds the stream, did not answer within {answer_timeout:?}; {UNKNOWN}"
            );
            return Err(Problem::new(StatusCode::GATEWAY_TIMEOUT, "outcome-unknown", detail));
        }
    };
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    // This node's writer dates the answer itself.
    parts.headers.remove(DATE);
    Ok(Response::from_parts(parts, Body::Live(Box::pin(Relayed(body)))))
}

fn outgoing(request: Request<RequestBody>, authority: &str, node_id: &str) -> Request<OutBody> {
    let (mut parts, body) = request.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    // The client's Host stays (the owner builds Location from it); an HTTP/2 client's is
    // its URI's authority.
    if !parts.headers.contains_key(HOST) {
        let host = parts.uri.authority().map_or(authority, |client| client.as_str());
        parts.headers.insert(HOST, HeaderValue::from_str(host).expect("an authority is a header value"));
    }
    let by = HeaderValue::from_str(node_id).expect("node ids are header values");
    parts.headers.insert(FORWARDED_BY, by);
    let path = parts.uri.path_and_query().map_or("/", |target| target.as_str());
    parts.uri = path.parse().expect("a request target stays valid");
    Request::from_parts(parts, body.boxed())
}

fn strip_hop_by_hop(headers: &mut hyper::HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|list| list.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(&[CONNECTION, TRANSFER_ENCODING]) {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// The owner's answer body, relayed; an error from the owner ends it (the connection to the
/// client then ends too, short of the length promised, so the client sees the failure).
struct Relayed(Pooled);

impl LiveSource for Relayed {}

impl http_body::Body for Relayed {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match Pin::new(&mut self.0).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(frame))),
            Poll::Ready(Some(Err(error))) => {
                tracing::debug!(%error, "a forwarded answer broke off");
                Poll::Ready(None)
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.0.size_hint()
    }
}
