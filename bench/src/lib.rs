//! ds-bench: a load generator for any Durable Streams server.
//!
//! # Layout
//!
//! - [`target`]: the server under test (URL and stream path prefix).
//! - [`http`]: keep-alive HTTP/1.1 connections (hyper's client connection API).
//! - [`sse`]: an incremental server-sent-events parser.
//! - [`stats`]: latency histograms (HDR) and their summaries.
//! - [`process`]: the server's resident memory and CPU time from `/proc` (`--server-pid`).
//! - [`scenario`]: one module per scenario; each returns a report of named figures.
//!
//! A scenario opens its own connections, runs for a bounded time and count, and returns a
//! [`report::Report`] that `main` prints as a table and optionally writes as JSON.

pub mod http;
pub mod process;
pub mod report;
pub mod scenario;
pub mod sse;
pub mod stats;
pub mod target;
