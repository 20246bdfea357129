//! One stream: its immutable configuration, its writer state and its published view.
//!
//! A [`Stream`] is shared between its shard (the only writer) and any number of readers. Its
//! lock guards two halves: [`WriterState`], which the shard changes while it applies ops, and
//! [`Published`], which the shard copies from the writer state only after the batch is
//! committed. Readers look at the published half only, so they never see data, a close or a
//! delete before it is durable in the mode's sense, and they never wait for a commit: the
//! shard holds the lock for microseconds, never across I/O.

pub(crate) mod cascade;
pub(crate) mod fork;
pub(crate) mod handle;
pub(crate) mod kept_answers;
pub(crate) mod live;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use crate::ids::{ChainIndex, Location, StreamId};
use crate::meta::{StreamConfig, StreamDamage, StreamSnapshot};
use crate::offset::Offset;
use crate::producer::ProducerTable;
use crate::storage::memory::MemLog;
use crate::storage::record::Record;
use crate::storage::Place;
use fork::ForkBase;
use kept_answers::KeptAnswers;

/// How many streams of a shard are known to be damaged (a gauge: deleting one lowers it).
#[derive(Default)]
pub(crate) struct DamageCounter {
    pub damaged_streams: AtomicU64,
}

/// A stream shared by its shard and its readers.
pub(crate) struct Stream {
    /// Unique per shard and per incarnation: a stream recreated under the same name differs.
    pub(crate) id: StreamId,
    /// Shared with the shard directory's key.
    pub(crate) name: Arc<str>,
    pub(crate) config: StreamConfig,
    /// When a read or append last renewed the TTL (clock milliseconds).
    last_access_ms: AtomicU64,
    pub(crate) state: RwLock<StreamState>,
    /// Damage found in the stream's stored bytes (set once, by recovery or a read; boxed,
    /// as most streams never have any).
    damage: OnceLock<Box<StreamDamage>>,
    /// The source prefix a fork inherits (`None`: the stream's bytes are all its own; boxed,
    /// so a stream that is not a fork pays a pointer, not the 96 bytes of a base).
    pub(crate) fork: Option<Box<ForkBase>>,
    /// Recent catch-up answers (disk modes, streams that are not forks).
    pub(crate) kept: Option<KeptAnswers>,
}

pub(crate) struct StreamState {
    pub published: Published,
    pub writer: WriterState,
    pub data: StreamData,
}

/// Where a stream's published bytes are.
pub(crate) enum StreamData {
    /// In memory (memory mode).
    Memory(MemLog),
    /// In a log of chained records (disk modes): the published last record (location and
    /// chain index), and the last committed one, which becomes visible with the tail.
    Log { tail: Location, n: ChainIndex, committed_tail: Location, committed_n: ChainIndex },
}

impl StreamData {
    /// Empty data for a stream of a mode that keeps bytes in memory (`true`) or a log.
    pub(crate) fn new(in_memory: bool) -> StreamData {
        if in_memory {
            StreamData::Memory(MemLog::default())
        } else {
            StreamData::Log {
                tail: Location::default(),
                n: ChainIndex::CREATE,
                committed_tail: Location::default(),
                committed_n: ChainIndex::CREATE,
            }
        }
    }

    /// A log-backed stream whose last record is `tail`, number `n` of its chain.
    pub(crate) fn log_at(tail: Location, n: ChainIndex) -> StreamData {
        StreamData::Log { tail, n, committed_tail: tail, committed_n: n }
    }

    /// Makes a committed record's data part of the stream, not yet visible: readers see it
    /// once [`StreamData::publish`] runs with the new tail, under the same lock.
    pub(crate) fn apply(&mut self, record: &Record, place: Place) {
        // A create's messages start where the stream does (a fork's after its inherited ones).
        let (offset, payload) = match record {
            Record::Create { initial, .. } => (None, initial.as_ref()),
            Record::Append { offset, payload, .. } => (Some(*offset), payload.as_ref()),
            Record::Delete { .. } => return,
        };
        match self {
            StreamData::Memory(log) => {
                if let Some(payload) = payload {
                    log.append(offset.unwrap_or(log.base()), payload);
                }
            }
            StreamData::Log { committed_tail, committed_n, .. } => {
                debug_assert!(
                    matches!(record, Record::Create { .. }) || place.n == committed_n.next(),
                    "chains grow by one"
                );
                *committed_tail = place.location;
                *committed_n = place.n;
            }
        }
    }

    /// Makes a committed move of the stream's chain (compaction) part of it, not yet
    /// visible; whether the chain moved (a move that did not happen leaves it where it was).
    pub(crate) fn apply_move(&mut self, place: Place) -> bool {
        let StreamData::Log { committed_tail, committed_n, .. } = self else {
            return false;
        };
        if place.location == *committed_tail {
            return false;
        }
        assert_eq!(place.n, *committed_n, "a move keeps the chain's length");
        *committed_tail = place.location;
        true
    }

    /// Makes the committed records visible (with the published tail that ends at them).
    pub(crate) fn publish(&mut self) {
        if let StreamData::Log { tail, n, committed_tail, committed_n } = self {
            (*tail, *n) = (*committed_tail, *committed_n);
        }
    }

    /// The last committed record (location, chain index) of a log-backed stream.
    pub(crate) fn chain(&self) -> (Location, ChainIndex) {
        match self {
            StreamData::Memory(_) => (Location::default(), ChainIndex::CREATE),
            StreamData::Log { committed_tail, committed_n, .. } => (*committed_tail, *committed_n),
        }
    }
}

/// What readers may see.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Published {
    pub tail: Offset,
    pub closed: bool,
    /// Deleted or expired: the name may already belong to a new stream.
    pub gone: bool,
    /// Deleted while forks still read its bytes (soft-deleted): clients get 410 Gone and
    /// the name stays taken until the last fork goes.
    pub deleted: bool,
}

/// What the shard knows, including ops applied but not yet committed.
#[derive(Default)]
pub(crate) struct WriterState {
    pub tail: Offset,
    pub closed: bool,
    pub gone: bool,
    pub producers: ProducerTable,
    /// The last accepted `Stream-Seq`.
    pub stream_seq: Option<Box<str>>,
    /// The batch that last touched this stream (to publish each stream once per batch).
    pub batch: u64,
    /// What the stream has charged to the byte budget (given back when it goes).
    pub charged: u64,
    /// Producer tag and `Stream-Seq` bytes its appends carried.
    pub tag_bytes: u64,
    /// Live forks whose inherited prefix is read from this stream. The one field not only
    /// the shard writes: a new fork is counted by its creator under this lock
    /// (`StreamHandle::pin_fork`); the shard gives counts back and decides soft or hard
    /// deletes under the same lock.
    pub forks: u64,
    /// Soft-deleted: see [`Published::deleted`].
    pub deleted: bool,
}

impl Stream {
    pub(crate) fn new(
        id: StreamId,
        name: Arc<str>,
        config: StreamConfig,
        now_ms: u64,
        data: StreamData,
    ) -> Stream {
        let in_memory = matches!(data, StreamData::Memory(_));
        Stream {
            id,
            name,
            config,
            last_access_ms: AtomicU64::new(now_ms),
            state: RwLock::new(StreamState {
                published: Published::default(),
                writer: WriterState::default(),
                data,
            }),
            damage: OnceLock::new(),
            fork: None,
            kept: (!in_memory).then(KeptAnswers::default),
        }
    }

    /// The same stream as a fork of `base`: its own messages start at the fork's start.
    pub(crate) fn with_fork(mut self, base: ForkBase) -> Stream {
        let start = base.start();
        let state = self.state.get_mut().expect("stream lock is never poisoned: holders do not panic");
        if let StreamData::Memory(log) = &mut state.data {
            *log = MemLog::starting_at(start);
        }
        state.writer.tail = start;
        state.published.tail = start;
        self.fork = Some(Box::new(base));
        self.kept = None;
        self
    }

    /// A recovered stream, published as its snapshot says; a fork reads its inherited
    /// bytes through `fork` (linked to its recovered source).
    pub(crate) fn from_snapshot(snapshot: StreamSnapshot, fork: Option<ForkBase>) -> Stream {
        debug_assert_eq!(
            snapshot.fork.as_ref(),
            fork.as_ref().map(|base| &base.reference),
            "a recovered fork is linked by its own reference"
        );
        let mut producers = ProducerTable::default();
        for (id, state) in &snapshot.producers {
            producers.insert(id, *state);
        }
        let deleted = snapshot.deleted;
        let published = Published { tail: snapshot.tail, closed: snapshot.closed, gone: false, deleted };
        let writer = WriterState {
            tail: snapshot.tail,
            closed: snapshot.closed,
            gone: false,
            producers,
            stream_seq: snapshot.stream_seq,
            batch: 0,
            charged: 0,
            tag_bytes: snapshot.tag_bytes,
            forks: 0,
            deleted,
        };
        let data = StreamData::log_at(snapshot.chain_tail, snapshot.chain_n);
        let damage = OnceLock::new();
        if let Some(found) = snapshot.damage {
            let _ = damage.set(Box::new(found));
        }
        Stream {
            id: snapshot.id,
            name: snapshot.name,
            config: snapshot.config,
            last_access_ms: AtomicU64::new(snapshot.last_access_ms),
            state: RwLock::new(StreamState { published, writer, data }),
            kept: fork.is_none().then(KeptAnswers::default),
            damage,
            fork: fork.map(Box::new),
        }
    }

    /// The stream's durable state (call between batches, when writer and published agree).
    pub(crate) fn snapshot(&self) -> StreamSnapshot {
        let state = self.read_state();
        let (chain_tail, chain_n) = state.data.chain();
        StreamSnapshot {
            id: self.id,
            name: Arc::clone(&self.name),
            config: self.config.clone(),
            last_access_ms: self.last_access_ms.load(Ordering::Acquire),
            tail: state.published.tail,
            closed: state.published.closed,
            stream_seq: state.writer.stream_seq.clone(),
            producers: state.writer.producers.iter().map(|(id, producer)| (id.into(), *producer)).collect(),
            chain_tail,
            chain_n,
            tag_bytes: state.writer.tag_bytes,
            damage: self.damage().cloned(),
            fork: self.fork.as_ref().map(|base| base.reference.clone()),
            deleted: state.writer.deleted,
        }
    }

    /// The bytes before `tail` that are the stream's own (a fork's inherited ones are its
    /// source's, charged there).
    pub(crate) fn own_bytes(&self, tail: Offset) -> u64 {
        let start = self.fork.as_ref().map_or(0, |base| base.start().bytes);
        tail.bytes - start
    }

    /// Damage found in the stream's stored bytes, if any.
    pub(crate) fn damage(&self) -> Option<&StreamDamage> {
        self.damage.get().map(|damage| &**damage)
    }

    /// Notes damage found at `at` (the first note stays): logged once and counted.
    pub(crate) fn note_damage(&self, at: Offset, reason: &str, counters: &DamageCounter) {
        let damage = StreamDamage { at, reason: reason.into() };
        if self.damage.set(Box::new(damage)).is_ok() {
            tracing::error!(
                stream = %self.name,
                offset = %at,
                reason,
                "stream damaged: it is served up to the damage and refuses writes"
            );
            counters.damaged_streams.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// When the stream expires, if it can (clock milliseconds; TTL counted from last access).
    pub(crate) fn deadline_ms(&self) -> Option<u64> {
        let ttl_deadline = self
            .config
            .ttl_secs
            .map(|ttl| self.last_access_ms.load(Ordering::Acquire).saturating_add(ttl.saturating_mul(1000)));
        let absolute = self.config.expires_at_ms.map(|at| at.max(0) as u64);
        match (ttl_deadline, absolute) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub(crate) fn is_expired(&self, now_ms: u64) -> bool {
        self.deadline_ms().is_some_and(|deadline| now_ms >= deadline)
    }

    /// Whole seconds left of the TTL window, rounded up.
    pub(crate) fn ttl_remaining_secs(&self, now_ms: u64) -> Option<u64> {
        let ttl = self.config.ttl_secs?;
        let deadline = self.last_access_ms.load(Ordering::Acquire).saturating_add(ttl.saturating_mul(1000));
        Some(deadline.saturating_sub(now_ms).div_ceil(1000))
    }

    /// When a read or append last renewed the TTL window (clock milliseconds).
    pub(crate) fn last_access_ms(&self) -> u64 {
        // SeqCst, with `touch` and the shard's renewal flag: see `shard::renewals`.
        self.last_access_ms.load(Ordering::SeqCst)
    }

    /// Renews the TTL window (reads and appends do; HEAD does not).
    pub(crate) fn touch(&self, now_ms: u64) {
        self.last_access_ms.fetch_max(now_ms, Ordering::SeqCst);
    }

    pub(crate) fn read_state(&self) -> std::sync::RwLockReadGuard<'_, StreamState> {
        self.state.read().expect("stream lock is never poisoned: holders do not panic")
    }

    pub(crate) fn write_state(&self) -> std::sync::RwLockWriteGuard<'_, StreamState> {
        self.state.write().expect("stream lock is never poisoned: holders do not panic")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::content_type::ContentType;

    fn config(ttl_secs: Option<u64>, expires_at_ms: Option<i64>) -> StreamConfig {
        StreamConfig { content_type: ContentType::default_type(), ttl_secs, expires_at_ms }
    }

    #[test]
    fn ttl_slides_with_access_and_expiry_does_not() {
        let stream = Stream::new(
            StreamId::from_raw(1),
            "s".into(),
            config(Some(2), None),
            10_000,
            StreamData::new(true),
        );
        assert_eq!(stream.ttl_remaining_secs(10_000), Some(2));
        assert_eq!(stream.ttl_remaining_secs(10_001), Some(2), "rounded up");
        assert!(!stream.is_expired(11_999));
        stream.touch(11_500);
        assert!(!stream.is_expired(13_000));
        assert!(stream.is_expired(13_500));
        stream.touch(100);
        assert_eq!(stream.deadline_ms(), Some(13_500), "touch never moves the window back");

        let fixed = Stream::new(
            StreamId::from_raw(2),
            "s".into(),
            config(None, Some(20_000)),
            0,
            StreamData::new(true),
        );
        fixed.touch(19_000);
        assert!(fixed.is_expired(20_000));
        assert_eq!(fixed.ttl_remaining_secs(0), None);

        let both = Stream::new(
            StreamId::from_raw(3),
            "s".into(),
            config(Some(100), Some(5_000)),
            0,
            StreamData::new(true),
        );
        assert_eq!(both.deadline_ms(), Some(5_000));
        let never =
            Stream::new(StreamId::from_raw(4), "s".into(), config(None, None), 0, StreamData::new(true));
        assert!(!never.is_expired(u64::MAX));
    }

    #[test]
    fn committed_log_records_stay_invisible_until_published() {
        let mut data = StreamData::log_at(Location::from_raw(100), ChainIndex::CREATE.next());
        let record = Record::Append {
            stream: StreamId::from_raw(1),
            name: Arc::from("s"),
            offset: Offset::ZERO,
            payload: None,
            producer: None,
            stream_seq: None,
            close: true,
            chain_tail: Location::from_raw(100),
        };
        let (one, two) = (ChainIndex::from_raw(1), ChainIndex::from_raw(2));
        data.apply(&record, Place { location: Location::from_raw(200), n: two });
        assert_eq!(data.chain(), (Location::from_raw(200), two), "the writer chains to the committed record");
        assert!(
            matches!(data, StreamData::Log { tail, n, .. } if tail == Location::from_raw(100) && n == one),
            "readers still see the published one"
        );
        data.publish();
        assert!(
            matches!(data, StreamData::Log { tail, n, .. } if tail == Location::from_raw(200) && n == two)
        );
    }
}
