//! The reader's side of a stream: status, catch-up reads, message reads, live subscriptions.
//!
//! A [`StreamHandle`] comes from `Engine::open` and reads the stream's published view under
//! its read lock, never through the shard. A stream that is gone (deleted, or expired by the
//! clock even before its shard noticed) reads as `None`; an expired one also asks its shard
//! to remove it. Reads renew the TTL window; status checks (HEAD) do not.

use std::sync::Arc;

use crate::ids::{Location, StreamId};
use crate::meta::{StreamConfig, StreamDamage};
use crate::offset::{Offset, StartAt};
use crate::storage::chunk::{Chunk, Message, ReadError};
use crate::storage::memory::MemLog;
use crate::storage::{LogStore, LogView};
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
}

impl ReadResult {
    /// The read reached the tail.
    pub fn up_to_date(&self) -> bool {
        self.chunk.next == self.tail
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
        let read = self.read_published(start, |data, view, from| match data {
            PublishedData::Memory(log) => log.read(from, view.until, bytes_max),
            PublishedData::Log(log) => log.chunk(view, from, bytes_max),
        })?;
        let Some((from, published, chunk)) = read else {
            return Ok(None);
        };
        self.touch();
        Ok(Some(ReadResult { start: from, chunk, tail: published.tail, closed: published.closed }))
    }

    /// Reads single messages from `from` (for SSE), at most about `bytes_max` stored bytes.
    pub fn read_messages(&self, from: Offset, bytes_max: usize) -> Result<Option<MessagesResult>, ReadError> {
        let read = self.read_published(StartAt::At(from), |data, view, from| match data {
            PublishedData::Memory(log) => log.read_messages(from, view.until, bytes_max),
            PublishedData::Log(log) => log.messages(view, from, bytes_max),
        })?;
        Ok(read.map(|(_, published, messages)| MessagesResult {
            messages,
            tail: published.tail,
            closed: published.closed,
        }))
    }

    /// Runs `read` against the published view from `start` (resolved against it). Memory
    /// reads run under the stream's read lock; log reads after it, and a log read that finds
    /// damage runs once more if compaction moved the stream's records meanwhile. Damage that
    /// stays is noted on the stream (logged once, counted, writes refused).
    fn read_published<T>(
        &self,
        start: StartAt,
        read: impl Fn(PublishedData<'_>, LogView, Offset) -> Result<T, ReadError>,
    ) -> Result<Option<(Offset, Published, T)>, ReadError> {
        let mut moved_once = false;
        loop {
            let state = self.stream.read_state();
            let published = state.published;
            if !self.alive(published) {
                return Ok(None);
            }
            let from = match start {
                StartAt::Beginning => Offset::ZERO,
                StartAt::Tail => published.tail,
                StartAt::At(offset) => offset,
            };
            let (tail_location, tail_n) = match &state.data {
                StreamData::Memory(log) => {
                    let value = read(
                        PublishedData::Memory(log),
                        self.view(Location::default(), 0, published.tail),
                        from,
                    )?;
                    return Ok(Some((from, published, value)));
                }
                StreamData::Log { tail, n, .. } => (*tail, *n),
            };
            drop(state);
            let log = self.shard.log().ok_or(ReadError::Storage)?;
            match read(PublishedData::Log(log), self.view(tail_location, tail_n, published.tail), from) {
                Ok(value) => return Ok(Some((from, published, value))),
                Err(ReadError::Damaged) => {
                    let state = self.stream.read_state();
                    if state.published.gone {
                        return Ok(None);
                    }
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
                Err(error) => return Err(error),
            }
        }
    }

    /// Registers for tail-advance wakes of this stream.
    pub fn subscribe(&self) -> Subscription {
        self.shard.live().subscribe(self.stream.id, || self.stream.read_state().published)
    }

    fn view(&self, tail_location: Location, tail_n: u64, until: Offset) -> LogView {
        LogView {
            stream: self.stream.id,
            name: Arc::clone(&self.stream.name),
            tail_location,
            tail_n,
            until,
            json: self.is_json(),
        }
    }

    fn is_json(&self) -> bool {
        self.stream.config.content_type.is_json()
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
