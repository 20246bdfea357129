//! The SSE direct path: caught-up SSE readers on plain TCP connections, written to by one
//! task per stream instead of each through hyper. An SSE body talks to it through
//! [`DirectPath`] alone; with `DS_SERVER__SSE_DIRECT_WRITES=false` no connection gets one
//! and every event goes through hyper.
//!
//! - `socket_link`: a plain TCP connection that hyper drives and the fan-out may write to.
//! - `fanout`: the lent readers of one stream and the task that writes to them.
//!
//! # What it relies on in hyper
//!
//! One behaviour of hyper's HTTP/1.1 server, and nothing else: **it calls its I/O object's
//! `poll_flush` only when everything it was given to write has been passed to `poll_write`**
//! (its own buffer is empty; true with `pipeline_flush` off, the default, which `serve`
//! keeps). So once a flush comes through after the body handed hyper a frame, every byte
//! of that frame is on the socket, and the fan-out may write the next chunk straight to the
//! descriptor without interleaving with hyper's bytes. The test below fails if a hyper
//! upgrade changes that.

pub mod fanout;
pub mod socket_link;

use std::sync::Arc;
use std::task::{Context, Poll};

use ds_engine::{Offset, StreamHandle};

use crate::events::frame::FrameCache;
use crate::metrics::Metrics;
use crate::per_stream::{Member, PerStream};
use crate::shutdown::Shutdown;
use fanout::{FanOut, Lending, Parked, Returned};
use socket_link::SocketLink;

/// What the fan-outs share with the rest of the server.
pub struct DirectWrites {
    enabled: bool,
    /// Frames formatted by each stream's SSE readers (the fan-outs format with them).
    frames: Arc<PerStream<FrameCache>>,
    fanouts: Arc<PerStream<FanOut>>,
    metrics: Arc<Metrics>,
    shutdown: Arc<Shutdown>,
}

impl DirectWrites {
    pub fn new(
        enabled: bool,
        frames: Arc<PerStream<FrameCache>>,
        metrics: Arc<Metrics>,
        shutdown: Arc<Shutdown>,
    ) -> DirectWrites {
        DirectWrites { enabled, frames, fanouts: Arc::default(), metrics, shutdown }
    }

    /// Whether plain TCP connections get a direct path.
    pub fn enabled(&self) -> bool {
        self.enabled
    }
}

/// The way from one SSE body to its stream's fan-out.
pub struct DirectPath {
    writes: Arc<DirectWrites>,
    link: Arc<SocketLink>,
    fanout: Member<FanOut>,
    /// Set while the body is lent.
    parked: Option<Arc<Parked>>,
}

/// Where a body stands when it lends itself.
pub struct Standing {
    pub offset: Offset,
    pub format: crate::events::event::EventFormat,
    pub client_cursor: Option<Arc<str>>,
}

impl DirectPath {
    /// The path of a body of `handle`'s stream on the connection `link`.
    pub fn new(writes: &Arc<DirectWrites>, handle: &StreamHandle, link: Arc<SocketLink>) -> DirectPath {
        let fanout = writes.fanouts.join(handle);
        DirectPath { writes: Arc::clone(writes), link, fanout, parked: None }
    }

    /// Whether the body is lent to the fan-out now.
    pub fn is_lent(&self) -> bool {
        self.parked.is_some()
    }

    /// The body handed hyper a frame: its bytes may sit in hyper's buffer until a flush.
    pub fn frame_handed(&self) {
        self.link.mark_unflushed();
    }

    /// Whether the body may lend itself now (everything it handed hyper is on the wire); if
    /// not, the connection's next flush wakes it to ask again.
    pub fn can_lend(&self) -> bool {
        self.link.flushed_or_wake_later()
    }

    /// Lends the body, standing at `standing`, to the fan-out (`cx` wakes it when handed back).
    pub fn lend(&mut self, handle: &StreamHandle, standing: Standing, cx: &Context<'_>) {
        debug_assert!(self.parked.is_none(), "a body is lent once at a time");
        let lending = Lending {
            link: Arc::clone(&self.link),
            offset: standing.offset,
            format: standing.format,
            client_cursor: standing.client_cursor,
            waker: cx.waker().clone(),
        };
        let parked = self.fanout.shared().park(&self.writes, handle, lending);
        self.link.set_lent(Some(Arc::clone(&parked) as Arc<dyn socket_link::Lent>));
        self.parked = Some(parked);
    }

    /// The body, if the fan-out handed it back (pending otherwise: `cx` is woken when it
    /// does); also whether data went out for it since the last call.
    pub fn poll_back(&mut self, cx: &Context<'_>) -> (Poll<Returned>, bool) {
        let Some(parked) = &self.parked else {
            return (Poll::Pending, false);
        };
        match parked.poll_back(cx.waker()) {
            (Some(returned), wrote_data) => (Poll::Ready(self.returned(returned)), wrote_data),
            (None, wrote_data) => (Poll::Pending, wrote_data),
        }
    }

    /// Takes the body back now (it ends), if it is lent.
    pub fn take_back(&mut self) -> Option<Returned> {
        let returned = self.parked.as_ref()?.take_back_now();
        Some(self.returned(returned))
    }

    /// The body owns its connection again: the unfinished end of a chunk goes out first.
    fn returned(&mut self, returned: Returned) -> Returned {
        self.parked = None;
        self.link.set_lent(None);
        self.link.prepend(returned.remainder.clone());
        returned
    }
}

impl Drop for DirectPath {
    fn drop(&mut self) {
        self.take_back();
    }
}
