//! Reading a request body, never past a limit.
//!
//! A declared `Content-Length` over the limit is refused before a byte is read; a chunked
//! body is read until it passes the limit and refused then. Either way the answer is 413 and
//! nothing is stored.

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, CONTENT_LENGTH};
use hyper::StatusCode;

use super::problem::Problem;

/// The whole body, if it is at most `bytes_max` long.
pub async fn read(body: Incoming, headers: &HeaderMap, bytes_max: u64) -> Result<Bytes, Problem> {
    let too_large = || {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            format!("request body is larger than {bytes_max} bytes"),
        )
    };
    let declared =
        headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > bytes_max) {
        return Err(too_large());
    }
    match Limited::new(body, bytes_max as usize).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(_) => Err(Problem::bad_request("body-unreadable", "request body could not be read")),
    }
}
