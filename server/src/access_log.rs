//! The access log: one `info` line per request, under the target `ds::access`.
//!
//! Each line has the method, path, status, body bytes (`-` for a streamed body such as
//! SSE, whose size is not known when the answer starts), latency to the answer in
//! microseconds, and the subject a proxy in front forwarded in `X-JWT-Sub` (`-` when none),
//! so operators can see who wrote what. The request's path and subject are copied only when
//! the line is enabled: `RUST_LOG=info,ds::access=off` turns the log off at the cost of one
//! level check per request. A request too malformed to parse has a line too, with `-` for
//! what it did not say.

use std::fmt::Display;

use hyper::header::HeaderName;
use hyper::{Method, Request};
use tokio::time::Instant;

/// The target of access lines (what `RUST_LOG` filters on).
pub(crate) const ACCESS_TARGET: &str = "ds::access";
/// The header an authenticating proxy sets to the verified token's subject.
pub(crate) const X_JWT_SUB: HeaderName = HeaderName::from_static("x-jwt-sub");
/// Longest subject logged, in bytes.
const SUBJECT_BYTES_MAX: usize = 256;
/// Longest path logged, in bytes: a stream name of 1024 bytes fully percent-encoded fits; a
/// longer one (refused 414) must not make every line it writes as long as itself.
const PATH_BYTES_MAX: usize = 4096;

/// What the line of one request needs from its start.
pub(crate) struct AccessRecord {
    method: Method,
    path: String,
    subject: String,
    started: Instant,
}

impl AccessRecord {
    /// A record for `request`, or `None` when the access log is off.
    pub(crate) fn begin<B>(request: &Request<B>) -> Option<AccessRecord> {
        if !tracing::enabled!(target: ACCESS_TARGET, tracing::Level::INFO) {
            return None;
        }
        let subject = match request.headers().get(X_JWT_SUB).map(|value| value.to_str()) {
            None => "-".to_string(),
            Some(Ok(text)) => truncate(text, SUBJECT_BYTES_MAX).to_string(),
            Some(Err(_)) => "(not text)".to_string(),
        };
        Some(AccessRecord {
            method: request.method().clone(),
            path: truncate(request.uri().path(), PATH_BYTES_MAX).to_string(),
            subject,
            started: Instant::now(),
        })
    }

    /// Writes the line.
    pub(crate) fn finish(self, status: u16, bytes: Option<u64>) {
        let latency_us = self.started.elapsed().as_micros() as u64;
        let bytes = bytes.map_or_else(|| "-".to_string(), |bytes| bytes.to_string());
        line(&self.method, &self.path, status, &bytes, &latency_us, &self.subject);
    }
}

/// Writes the line of a request that could not be parsed, answered `status` with a body of
/// `bytes` (`serve::gate`, the bare front): there is no method, path or subject to say (`-`), nor a start
/// to measure from.
pub(crate) fn unparsed(status: u16, bytes: usize) {
    line(&"-", &"-", status, &bytes, &"-", &"-");
}

/// One access line, its fields in the one order every line has.
fn line(
    method: &dyn Display,
    path: &dyn Display,
    status: u16,
    bytes: &dyn Display,
    latency_us: &dyn Display,
    subject: &dyn Display,
) {
    tracing::info!(
        target: ACCESS_TARGET,
        method = %method,
        path = %path,
        status,
        bytes = %bytes,
        latency_us = %latency_us,
        subject = %subject,
    );
}

/// At most `bytes_max` bytes of `text`, cut at a character boundary.
fn truncate(text: &str, bytes_max: usize) -> &str {
    if text.len() <= bytes_max {
        return text;
    }
    let mut end = bytes_max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_subjects_are_cut_at_a_character_boundary() {
        assert_eq!(truncate("alice", 256), "alice");
        assert_eq!(truncate("ééé", 3), "é");
        assert_eq!(truncate(&"x".repeat(300), 256).len(), 256);
    }
}
