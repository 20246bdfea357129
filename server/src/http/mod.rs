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

pub mod cors;
pub mod cursor;
pub mod headers;
pub mod problem;
pub mod query;
pub mod read_reply;
pub mod request_body;
pub mod response;
