//! SSE events: what every SSE reader sends, however its bytes reach the socket.
//!
//! - `event`: the wire format (data and control events, one `data:` line per payload line).
//! - `frame`: the events a reader at a position sends next, formatted once and shared by
//!   the stream's readers at the same position.

pub(crate) mod event;
pub(crate) mod frame;
