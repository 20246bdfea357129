//! Live reads: clients that wait for data instead of polling.
//!
//! - `long_poll`: one response, as soon as data arrives or the wait times out (204).
//! - `sse`: a server-sent-event body that pulls from the stream as the client drains it
//!   (formatted by `crate::events`; lent to `crate::direct` when caught up on plain TCP).
//!
//! Both modes subscribe to the stream's tail-advance notifications and enable the wait
//! before looking at the tail, so no append between the look and the wait is missed.

pub mod long_poll;
pub mod sse;
