//! The scenarios, one module each.
//!
//! - `fanout`: many SSE subscribers on one stream, delivery latency and losses.
//! - `streams`: stream creation rate and server memory per stream.

pub mod fanout;
pub mod streams;

/// A suffix that keeps one run's stream names apart from another's.
pub fn unique_suffix() -> String {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{nanos:x}")
}
