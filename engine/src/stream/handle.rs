//! The reader's side of a stream: status, catch-up reads, message reads, live subscriptions.
//!
//! A [`StreamHandle`] comes from `Engine::open` and reads the stream's published view under
//! its read lock, never through the shard. A stream that is gone (deleted, or expired by the
//! clock even before its shard noticed) reads as `None`; an expired one also asks its shard
//! to remove it. Reads renew the TTL window; status checks (HEAD) do not.

use std::sync::Arc;

use crate::ids::{ChainIndex, Location, StreamId};
use crate::meta::{StreamConfig, StreamDamage};
use crate::offset::{Offset, StartAt};
use crate::scheduling;
use crate::storage::chunk::{Chunk, Message, ReadError};
use crate::storage::memory::MemLog;
use crate::storage::{LogStore, LogView};
use crate::stream::cascade::{HeldAnswer, Release};
use crate::stream::fork::{ForkBase, ForkSource, Unpinned};
use crate::stream::kept_answers;
use crate::stream::live::{LiveRegistry, Subscription};
use crate::stream::{DamageCounter, Published, Stream, StreamData};
use crate::time::Clock;

/// What a reader needs of the shard that owns its stream (the shard implements it; a
/// reader never goes through the shard's queue for data).
pub(crate) trait StreamOwner: Send + Sync {
    /// Where the stored bytes of a disk mode are read (none in memory mode).
    fn log(&self) -> Option<&dyn LogStore>;
    /// The count of damaged streams a read that finds damage raises.
    fn damage_counter(&self) -> &DamageCounter;
    /// Tail-advance wakes of the shard's streams.
    fn live(&self) -> &Arc<LiveRegistry>;
    /// A read renewed the TTL window of a stream with a TTL (so the shard saves renewals).
    fn note_read_renewal(&self);
    /// The stream `name` (incarnation `id`) has expired: remove it when convenient.
    fn request_expiry(&self, name: Arc<str>, id: StreamId);
    /// A fork of a stream is gone (or was never created): one fork fewer reads it.
    fn release_fork(&self, release: Release);
}

/// A reader's handle on one stream incarnation.
#[derive(Clone)]
pub struct StreamHandle {
    stream: Arc<Stream>,
    shard: Arc<dyn StreamOwner>,
    clock: Clock,
}

/// Whole messages read from a stream, with the published state they were read against.
#[derive(Clone, Debug)]
pub struct ReadResult {
    /// Where the read started (the resolved `-1`, `now` or offset).
    pub start: Offset,
    pub chunk: Chunk,
    /// The published tail and closed flag at the time of the read.
    pub tail: Offset,
    pub closed: bool,
    /// The stream is damaged at its tail (what followed was lost): no read is up to date.
    pub damaged_at_tail: bool,
}

impl ReadResult {
    /// The read reached the tail.
    pub fn up_to_date(&self) -> bool {
        self.chunk.next == self.tail && !self.damaged_at_tail
    }

    /// The read reached the tail of a closed stream: nothing will ever follow.
    pub fn closed_at_tail(&self) -> bool {
        self.closed && self.up_to_date()
    }
}

/// Where a read finds a stream's published bytes.
enum PublishedData<'a> {
    Memory(&'a MemLog),
    Log(&'a dyn LogStore),
}

/// Single messages read for SSE.
#[derive(Clone, Debug)]
pub struct MessagesResult {
    pub messages: Vec<Message>,
    pub tail: Offset,
    pub closed: bool,
    /// As [`ReadResult::damaged_at_tail`].
    pub damaged_at_tail: bool,
}

impl MessagesResult {
    /// Whether a reader that got to `next` is up to date.
    pub fn up_to_date_at(&self, next: Offset) -> bool {
        next == self.tail && !self.damaged_at_tail
    }
}

impl StreamHandle {
    pub(crate) fn new(stream: Arc<Stream>, shard: Arc<dyn StreamOwner>, clock: Clock) -> StreamHandle {
        StreamHandle { stream, shard, clock }
    }

    /// Identifies this incarnation of the stream.
    pub fn id(&self) -> StreamId {
        self.stream.id
    }

    pub fn name(&self) -> &str {
        self.stream.name()
    }

    pub fn config(&self) -> &StreamConfig {
        &self.stream.config
    }

    /// The published tail and closed flag, or `None` once the stream is gone.
    pub fn status(&self) -> Option<Published> {
        let published = self.stream.read_state().published;
        self.alive(published).then_some(published)
    }

    /// Damage found in the stream's stored bytes, if any (it is read up to the damage and
    /// refuses writes).
    pub fn damage(&self) -> Option<&StreamDamage> {
        self.stream.damage()
    }

    /// Whole seconds left of the TTL window (rounded up), if the stream has a TTL.
    pub fn ttl_remaining_secs(&self) -> Option<u64> {
        self.stream.ttl_remaining_secs(self.clock.now_ms())
    }

    /// Renews the TTL window (and tells the shard to save it, if the stream has a TTL).
    pub fn touch(&self) {
        self.stream.touch(self.clock.now_ms());
        if self.stream.config.ttl_secs.is_some() {
            self.shard.note_read_renewal();
        }
    }

    /// Reads whole messages from `start`, at most about `bytes_max` stored bytes (always at
    /// least one message when one exists). Renews the TTL. `None` once the stream is gone.
    pub fn read(&self, start: StartAt, bytes_max: usize) -> Result<Option<ReadResult>, ReadError> {
        let Some(published) = self.status() else {
            return Ok(None);
        };
        let from = resolve(start, published.tail);
        let chunk = self.read_or_kept(from, published.tail, bytes_max)?;
        self.refuse_lost_end(from, chunk.messages == 0)?;
        self.touch();
        scheduling::offer_core();
        let damaged_at_tail = self.damaged_at(published.tail);
        Ok(Some(ReadResult {
            start: from,
            chunk,
            tail: published.tail,
            closed: published.closed,
            damaged_at_tail,
        }))
    }

    /// The answer kept from an earlier read of the same start and size while it is still
    /// what a read gives (`kept_answers`), else a read (kept for the next reader).
    fn read_or_kept(&self, from: Offset, tail: Offset, bytes_max: usize) -> Result<Chunk, ReadError> {
        let Some(kept) = &self.stream.kept else {
            return self.read_below(from, tail, bytes_max);
        };
        if let Some(chunk) = kept.get(from, bytes_max, tail) {
            return Ok(chunk);
        }
        kept_answers::make_room(bytes_max);
        let chunk = self.read_below(from, tail, bytes_max)?;
        kept.keep(from, bytes_max, tail, &chunk);
        Ok(chunk)
    }

    /// Reads single messages from `from` (for SSE), at most about `bytes_max` stored bytes.
    pub fn read_messages(&self, from: Offset, bytes_max: usize) -> Result<Option<MessagesResult>, ReadError> {
        let Some(published) = self.status() else {
            return Ok(None);
        };
        let messages = self.messages_below(from, published.tail, bytes_max)?;
        self.refuse_lost_end(from, messages.is_empty())?;
        scheduling::offer_core();
        let (tail, closed, damaged_at_tail) =
            (published.tail, published.closed, self.damaged_at(published.tail));
        Ok(Some(MessagesResult { messages, tail, closed, damaged_at_tail }))
    }

    /// Whether the stream is marked damaged exactly at `at`.
    fn damaged_at(&self, at: Offset) -> bool {
        self.stream.damage().is_some_and(|damage| damage.at == at)
    }

    /// A read from where the stream is marked damaged that found nothing there: the bytes
    /// that followed were lost (no damaged record is left for the read to find, as when a
    /// stream came back shorter than its forks know it was), so the read has reached the
    /// damage rather than the tail.
    fn refuse_lost_end(&self, from: Offset, found_nothing: bool) -> Result<(), ReadError> {
        match found_nothing && self.damaged_at(from) {
            true => Err(ReadError::Damaged),
            false => Ok(()),
        }
    }

    /// Whole messages from `from` up to `cap` (a boundary, or past the published tail: then
    /// up to the tail), inherited ones first for a fork. No liveness check and no renewal:
    /// forks read their source's prefix through this, whatever became of the source.
    pub(crate) fn read_below(&self, from: Offset, cap: Offset, bytes_max: usize) -> Result<Chunk, ReadError> {
        let Some(fork) = self.fork_below(from) else {
            return self.read_own(from, cap, |data, view, from| match data {
                PublishedData::Memory(log) => log.read(from, view.until, bytes_max),
                PublishedData::Log(log) => log.chunk(view, from, bytes_max),
            });
        };
        let mut chunk = fork.read(from, cap, bytes_max)?;
        let start = fork.start();
        if chunk.next == start && cap > start && chunk.len() < bytes_max {
            let own = self.read_below(start, cap, bytes_max - chunk.len())?;
            chunk.messages += own.messages;
            chunk.next = own.next;
            chunk.slices.extend(own.slices);
        }
        Ok(chunk)
    }

    /// Single messages from `from` up to `cap`, as [`StreamHandle::read_below`].
    pub(crate) fn messages_below(
        &self,
        from: Offset,
        cap: Offset,
        bytes_max: usize,
    ) -> Result<Vec<Message>, ReadError> {
        let Some(fork) = self.fork_below(from) else {
            return self.read_own(from, cap, |data, view, from| match data {
                PublishedData::Memory(log) => log.read_messages(from, view.until, bytes_max),
                PublishedData::Log(log) => log.messages(view, from, bytes_max),
            });
        };
        let mut messages = fork.messages(from, cap, bytes_max)?;
        let start = fork.start();
        let taken: usize = messages.iter().map(|m| m.stored.len()).sum();
        let reached = messages.last().is_some_and(|m| m.next == start);
        if reached && cap > start && taken < bytes_max {
            messages.extend(self.messages_below(start, cap, bytes_max - taken)?);
        }
        Ok(messages)
    }

    /// The fork base that serves `from`, if the stream is a fork and `from` is inherited.
    fn fork_below(&self, from: Offset) -> Option<&ForkBase> {
        self.stream.fork.as_deref().filter(|fork| from < fork.start())
    }

    /// Runs `read` against the stream's own published data from `from`, up to `cap` or the
    /// published tail. Memory reads run under the stream's read lock; log reads after it,
    /// and a log read that finds damage runs once more if compaction moved the stream's
    /// records meanwhile. Damage that stays is noted on the stream (logged once, counted,
    /// writes refused).
    fn read_own<T>(
        &self,
        from: Offset,
        cap: Offset,
        read: impl Fn(PublishedData<'_>, LogView, Offset) -> Result<T, ReadError>,
    ) -> Result<T, ReadError> {
        let mut moved_once = false;
        loop {
            let state = self.stream.read_state();
            let tail_end = state.published.tail;
            let until = tail_end.min(cap);
            let (tail_location, tail_n) = match &state.data {
                StreamData::Memory(log) => {
                    let view = self.view((Location::default(), ChainIndex::CREATE, tail_end), until);
                    return read(PublishedData::Memory(log), view, from);
                }
                StreamData::Log { tail, n, .. } => (*tail, *n),
            };
            drop(state);
            let log = self.shard.log().ok_or(ReadError::Storage)?;
            match read(PublishedData::Log(log), self.view((tail_location, tail_n, tail_end), until), from) {
                Err(ReadError::Damaged) => {
                    let state = self.stream.read_state();
                    let moved = matches!(state.data, StreamData::Log { tail, .. } if tail != tail_location);
                    drop(state);
                    if moved && !moved_once {
                        moved_once = true;
                        continue;
                    }
                    self.stream.note_damage(
                        from,
                        "a read found stored data that fails its checks",
                        self.shard.damage_counter(),
                    );
                    return Err(ReadError::Damaged);
                }
                result => return result,
            }
        }
    }

    /// Registers for tail-advance wakes of this stream.
    pub fn subscribe(&self) -> Subscription {
        self.shard.live().subscribe(self.stream.id, || self.stream.read_state().published)
    }

    /// A view of the published tail record (location, chain index, end) read up to `until`.
    fn view(
        &self,
        (tail_location, tail_n, tail_end): (Location, ChainIndex, Offset),
        until: Offset,
    ) -> LogView {
        LogView {
            stream: self.stream.id,
            name: Arc::clone(&self.stream.name),
            start: self.stream.fork.as_deref().map_or(Offset::ZERO, ForkBase::start),
            tail_location,
            tail_n,
            tail_end,
            until,
            json: self.is_json(),
        }
    }

    fn is_json(&self) -> bool {
        self.stream.config.content_type.is_json()
    }

    /// Counts a new fork of this stream, unless its writer state says it is gone or
    /// soft-deleted (a delete applied in a batch not yet committed counts). The shard decides
    /// between a soft and a hard delete under the same lock, so a counted fork always finds
    /// its source kept; the count is given back through the shard ([`Self::release_fork`]).
    pub(crate) fn pin_fork(&self) -> Result<(), Unpinned> {
        let mut state = self.stream.write_state();
        if state.writer.gone {
            return Err(Unpinned::Gone);
        }
        if state.writer.deleted {
            return Err(Unpinned::Deleted);
        }
        state.writer.forks += 1;
        Ok(())
    }

    /// Gives back the fork count this stream's shard took for a fork of it; `answer`: see
    /// [`Release`].
    pub(crate) fn release_fork(&self, answer: Option<HeldAnswer>) {
        self.shard.release_fork(Release { name: Arc::clone(&self.stream.name), id: self.stream.id, answer });
    }

    /// The stream's fork base, if it is a fork.
    pub fn fork(&self) -> Option<&ForkBase> {
        self.stream.fork.as_deref()
    }

    fn alive(&self, published: Published) -> bool {
        if published.gone {
            return false;
        }
        if self.stream.is_expired(self.clock.now_ms()) {
            self.shard.request_expiry(Arc::clone(&self.stream.name), self.stream.id);
            return false;
        }
        true
    }
}

impl ForkSource for StreamHandle {
    fn read_below(&self, from: Offset, cap: Offset, bytes_max: usize) -> Result<Chunk, ReadError> {
        StreamHandle::read_below(self, from, cap, bytes_max)
    }

    fn messages_below(&self, from: Offset, cap: Offset, bytes_max: usize) -> Result<Vec<Message>, ReadError> {
        StreamHandle::messages_below(self, from, cap, bytes_max)
    }

    fn release_fork(&self, answer: Option<HeldAnswer>) {
        StreamHandle::release_fork(self, answer);
    }
}

/// Where `start` is on a stream whose published tail is `tail`.
fn resolve(start: StartAt, tail: Offset) -> Offset {
    match start {
        StartAt::Beginning => Offset::ZERO,
        StartAt::Tail => tail,
        StartAt::At(offset) => offset,
    }
}
