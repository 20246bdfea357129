//! Forks: a stream whose first bytes are another stream's immutable prefix.
//!
//! A fork never copies its source's bytes. It holds a reader's handle on the source
//! incarnation and the point where inheritance ends: `until`, a message boundary of the
//! source, and `partial_bytes` of the source's next message (a binary sub-offset). Its own
//! messages start at `start`, the offset right after the inherited bytes, so offsets read the
//! same on the fork as on the source up to the fork point. Reads below `start` are served by
//! the source (itself maybe a fork: the chain is at most [`FORK_DEPTH_MAX`] deep), capped at
//! the fork point; the source keeps its bytes as long as a fork references it, because its
//! shard counts its live forks and turns a delete into a soft delete while any remain.

use crate::meta::ForkRef;
use crate::offset::Offset;
use crate::storage::chunk::{Chunk, Message, ReadError};
use crate::stream::cascade::HeldAnswer;
use std::sync::Arc;

/// Most forks in a chain from a root stream (a fork of a fork … of a stream). A deeper fork
/// is refused with 400: every read below a fork's start walks the chain.
pub const FORK_DEPTH_MAX: u32 = 16;

/// A cap past every tail: read up to the source's published tail.
const NO_CAP: Offset = Offset { messages: u64::MAX, bytes: u64::MAX };

/// Why a stream cannot take a new fork.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unpinned {
    /// Deleted (or being deleted) for good.
    Gone,
    /// Soft-deleted: its forks still read it, new ones may not.
    Deleted,
}

/// What a fork reads its inherited bytes from: its source's handle (`stream::handle`
/// implements it; the trait keeps this module from depending on the reader's API).
pub(crate) trait ForkSource: Send + Sync {
    /// Whole messages from `from` up to `cap` (or the source's published tail), with no
    /// liveness check: a deleted or expired source still serves its forks.
    fn read_below(&self, from: Offset, cap: Offset, bytes_max: usize) -> Result<Chunk, ReadError>;
    /// Single messages, as [`ForkSource::read_below`].
    fn messages_below(&self, from: Offset, cap: Offset, bytes_max: usize) -> Result<Vec<Message>, ReadError>;
    /// One fork fewer reads the source; `answer`: the answer to the fork's delete, held
    /// until the cascade this release may start has ended (see `stream::cascade`).
    fn release_fork(&self, answer: Option<HeldAnswer>);
}

/// A fork's live reference to its source's bytes: the durable [`ForkRef`] and the source
/// incarnation's handle it names.
#[derive(Clone)]
pub struct ForkBase {
    /// The source incarnation, read without its liveness checks.
    pub(crate) source: Arc<dyn ForkSource>,
    /// Where inheritance ends, as stored.
    pub reference: ForkRef,
    /// 1 for a fork of a plain stream, one more per fork in the chain.
    pub depth: u32,
}

impl ForkBase {
    /// The offset after the inherited bytes: where the fork's own messages begin.
    pub fn start(&self) -> Offset {
        self.reference.start()
    }

    /// Whole source messages before this offset are inherited.
    fn until(&self) -> Offset {
        self.reference.until
    }

    /// Bytes of the source's message at `until` inherited too.
    fn partial_bytes(&self) -> u64 {
        self.reference.partial_bytes
    }

    /// Inherited whole messages from `from` (below [`ForkBase::start`]), at most about
    /// `bytes_max` stored bytes (at least one message).
    /// `cap` is a boundary of the fork past `from` that the read stops at.
    pub(crate) fn read(&self, from: Offset, cap: Offset, bytes_max: usize) -> Result<Chunk, ReadError> {
        debug_assert!(from < self.start(), "the fork's own messages are read from its own data");
        let mut chunk = Chunk { next: from, messages: 0, slices: Vec::new(), copied: false };
        if from < self.until() {
            chunk = self.source.read_below(from, self.until().min(cap), bytes_max)?;
            let room = chunk.len() < bytes_max;
            if chunk.next < self.until() || self.partial_bytes() == 0 || cap < self.start() || !room {
                return Ok(chunk);
            }
        }
        let partial = self.partial(chunk.next)?;
        chunk.next = partial.next;
        chunk.messages += 1;
        chunk.slices.push(partial.stored);
        Ok(chunk)
    }

    /// Inherited single messages from `from` (for SSE), as [`ForkBase::read`].
    pub(crate) fn messages(
        &self,
        from: Offset,
        cap: Offset,
        bytes_max: usize,
    ) -> Result<Vec<Message>, ReadError> {
        let mut messages = Vec::new();
        let mut at = from;
        if from < self.until() {
            messages = self.source.messages_below(from, self.until().min(cap), bytes_max)?;
            at = messages.last().map_or(from, |message| message.next);
            let taken: usize = messages.iter().map(|message| message.stored.len()).sum();
            if at < self.until() || self.partial_bytes() == 0 || cap < self.start() || taken >= bytes_max {
                return Ok(messages);
            }
        }
        messages.push(self.partial(at)?);
        Ok(messages)
    }

    /// The cut message at `until`: the first `partial_bytes` of the source's message there.
    fn partial(&self, from: Offset) -> Result<Message, ReadError> {
        if from != self.until() || self.partial_bytes() == 0 {
            return Err(ReadError::NotBoundary);
        }
        let source_tail = self.until().advance(1, self.partial_bytes());
        let whole = self.source.messages_below(self.until(), NO_CAP, self.partial_bytes() as usize)?;
        let first = whole.into_iter().next().filter(|m| m.next.messages == source_tail.messages);
        let first = first.ok_or(ReadError::Damaged)?;
        if (first.stored.len() as u64) < self.partial_bytes() {
            return Err(ReadError::Damaged);
        }
        Ok(Message { stored: first.stored.slice(..self.partial_bytes() as usize), next: self.start() })
    }
}
