//! Live reads: clients that wait for data instead of polling.
//!
//! - `long_poll`: one response, as soon as data arrives or the wait times out (204).
//! - `sse`: a server-sent-event body that pulls from the stream as the client drains it.
//! - `fanout`: one writer per stream that sends new events to caught-up SSE readers'
//!   sockets directly.
//! - `frame`: what an SSE reader sends next, formatted once per position and format.
//! - `event`: the SSE wire format (data and control events).
//! - `cursor`: `Stream-Cursor` values for CDN request collapsing.
//!
//! Both modes subscribe to the stream's tail-advance notifications and enable the wait
//! before looking at the tail, so no append between the look and the wait is missed.

pub mod cursor;
pub mod event;
pub mod fanout;
pub mod frame;
pub mod long_poll;
pub mod sse;
