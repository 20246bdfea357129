//! What the request-head fuzz target (`fuzz/`) runs, and the regression tests after it: the
//! bytes a client sends, through ds's own HTTP/1.1 head reader (the bare front's) and every
//! parser of ds's own the head then meets (the query, the stream name, the protocol's
//! headers).
//!
//! It must return for any input; beyond that it asserts what the reader promises: a request
//! it takes for itself is the head it parsed plus a declared body that lies inside the
//! bytes, and anything it would refuse goes to hyper instead. Built with the `testing`
//! feature only.

use crate::http::headers;
use crate::http::query::ReadQuery;
use crate::routes::create::judge_fork;
use crate::routes::STREAM_PREFIX;
use crate::serve::bare::head::{self, Head};
use crate::serve::gate::{self, Judged, State};

/// The gate in front of hyper judges the head and follows the body after it: what it says
/// belongs to the body lies inside the bytes.
fn follow_framing(bytes: &[u8]) {
    let Judged::Taken { head_bytes, framing } = gate::judge(bytes) else { return };
    assert!(head_bytes <= bytes.len(), "a head taken lies in the bytes");
    let mut state = gate::body_state(framing);
    let mut at = head_bytes;
    while at < bytes.len() && state != State::Head {
        let taken = gate::follow_body(&mut state, &bytes[at..]);
        assert!(taken > 0 && at + taken <= bytes.len(), "a body is followed forward, inside the bytes");
        at += taken;
    }
}

/// One request's bytes, from the start of a connection.
pub fn request_head(bytes: &[u8]) {
    follow_framing(bytes);
    let (request, body) = match head::parse(bytes) {
        Head::Refused(status) => {
            assert_eq!(
                gate::judge(bytes),
                Judged::Refused(status),
                "the bare front refuses what the gate does"
            );
            return;
        }
        Head::Partial | Head::ToHyper => return,
        Head::Incomplete { total } => {
            assert!(total > bytes.len(), "an incomplete request asks for more bytes than arrived");
            return;
        }
        Head::Bare { request, body, .. } => (request, body),
    };
    assert!(body.start <= body.end && body.end <= bytes.len(), "a bare request's body lies in its bytes");
    let mut buffer = bytes.to_vec();
    let taken = head::take_body(&mut buffer, body.clone());
    assert_eq!(taken.map_or(0, |body| body.len()), body.len(), "the body taken is the one declared");
    let _ = ReadQuery::parse(request.uri().query());
    if let Some(name) = request.uri().path().strip_prefix(STREAM_PREFIX) {
        let _ = ds_engine::StreamName::from_path(name);
    }
    let fields = request.headers();
    let _ = headers::content_type(fields);
    let _ = headers::stream_closed(fields);
    let _ = headers::ttl_secs(fields);
    let _ = headers::expires_at_ms(fields);
    let _ = headers::producer(fields);
    let _ = headers::stream_seq(fields);
    let _ = judge_fork(fields);
    let _ = head::says_close(fields);
}
