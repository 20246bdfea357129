//! HTTP plumbing shared by all routes: bodies, headers, problems, queries, CORS.
//!
//! - `response`: the response body type and the headers on every response.
//! - `problem`: error responses as `application/problem+json`.
//! - `headers`: protocol header names and strict request-header parsing.
//! - `query`: the `offset`/`live`/`cursor` query parameters.
//! - `read_reply`: what every read answer shares (start, read, 200/304, read errors).
//! - `request_body`: bounded request body reading (413 past the limit).
//! - `cors`: allowed origins and the preflight answer.
//! - `cursor`: `Stream-Cursor` values for CDN request collapsing.

pub(crate) mod cors;
pub(crate) mod cursor;
pub(crate) mod headers;
pub(crate) mod problem;
pub(crate) mod query;
pub(crate) mod read_reply;
pub(crate) mod request_body;
pub(crate) mod response;
