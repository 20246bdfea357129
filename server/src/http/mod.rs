//! HTTP plumbing shared by all routes: bodies, headers, problems, queries, CORS.
//!
//! - `response`: the response body type and the headers on every response.
//! - `problem`: error responses as `application/problem+json`.
//! - `headers`: protocol header names and strict request-header parsing.
//! - `query`: the `offset`/`live`/`cursor` query parameters.
//! - `request_body`: bounded request body reading (413 past the limit).
//! - `cors`: allowed origins and the preflight answer.

pub mod cors;
pub mod headers;
pub mod problem;
pub mod query;
pub mod request_body;
pub mod response;
