//! ds-bench: a load generator for any Durable Streams server.
//!
//! # Layout
//!
//! - [`target`]: the server under test (URL and stream path prefix).
//! - [`http`]: keep-alive HTTP/1.1 connections (hyper's client connection API).
//! - [`sse`]: an incremental server-sent-events parser.
//! - [`sse_stream`]: a lean SSE response reader on its own connection (the fan-out's
//!   subscribers, so the generator's cost per delivery stays below the server's), with the
//!   kernel's receive time of what it reads.
//! - [`stats`]: latency histograms (HDR) and their summaries.
//! - [`process`]: the server's resident memory and CPU time from `/proc` (`--server-pid`).
//! - [`server_metrics`]: a ds server's device flushes over the measured phase, from its
//!   `/metrics`.
//! - [`run`]: what scenarios share — settings, the warm-up/measured clock, per-worker tallies,
//!   the progress line, the server's CPU and memory over the measured phase.
//! - [`scenario`]: one module per scenario; each returns a report of named figures.
//! - [`compare`]: one scenario against two servers in turns, figures side by side.
//!
//! A scenario opens its own connections, warms up, runs a measured phase bounded in time
//! and count, and returns a [`report::Report`] that `main` prints as a table and optionally
//! writes as JSON.

pub mod compare;
pub mod http;
pub mod process;
pub mod report;
pub mod run;
pub mod scenario;
pub mod server_metrics;
pub mod sse;
pub mod sse_stream;
pub mod stats;
pub mod target;
