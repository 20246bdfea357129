//! Live reads: clients that wait for data instead of polling.
//!
//! - `long_poll`: one response, as soon as data arrives or the wait times out (204).
//! - `sse`: the server-sent-event answer and its body, which pulls from the stream as the
//!   client drains it (formatted by `crate::events`).
//! - `sse_reader`: one SSE reader's state and step, driven by the body under hyper and by
//!   the bare front's writers and parking lots (`crate::serve::bare`) on plain TCP.
//!
//! Every live reader subscribes to the stream's tail-advance notifications (or shares a
//! subscription with others) and enables the wait before looking at the tail, so no append
//! between the look and the wait is missed.

pub(crate) mod long_poll;
pub(crate) mod sse;
pub(crate) mod sse_reader;
