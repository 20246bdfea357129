//! A shard: the single writer of its streams, driven by a worker thread (`worker`: at most
//! two per CPU, each driving one or more shards).
//!
//! The loop (group commit):
//! 1. block for the first op, then drain more without blocking, up to the batch limits;
//! 2. apply each op in order against the writer state ([`apply`], [`removal`]), turning
//!    each accepted op into one [`Record`];
//! 3. make the batch's records durable (memory mode: nothing to do);
//! 4. publish: copy each touched stream's writer state to its published view, fold creates
//!    and deletes into the directory, send the replies, wake each touched stream's live
//!    readers once.
//!
//! Nothing is replied, and nothing becomes visible to readers, before step 3 returns. A
//! failure in step 3 is fatal to the process: it never acknowledges what it could not store.

mod apply;
mod commit;
pub(crate) mod directory;
mod doorbell;
mod expiry;
mod install;
mod removal;
mod renewals;
pub mod wake_batch;
mod worker;

pub(crate) use doorbell::Doorbell;
pub(crate) use install::install_recovered;
pub(crate) use worker::{worker_count, Worker};

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender, TryRecvError, TrySendError};

use crate::config::IoErrorPolicy;
use crate::content_type::ContentType;
use crate::histogram::Histogram;
use crate::ids::StreamId;
use crate::limits::{ByteBudget, Limits};
use crate::op::{AppendOutcome, CreateOutcome, Op, OpError, Reply};
use crate::storage::maintenance::{CheckpointKind, Move, Resident};
use crate::storage::open::OpenedShard;
use crate::storage::record::Record;
use crate::storage::{LogStore, Persist, Place};
use crate::stream::cascade::{HeldAnswer, Release};
use crate::stream::handle::StreamOwner;
use crate::stream::live::LiveRegistry;
use crate::stream::{DamageCounter, Published, Stream};
use crate::time::Clock;
use directory::{Directory, Overlay};
use expiry::ExpiryQueue;

/// Longest a shard sleeps without looking at its expiry queue.
const IDLE_WAKE_MS_MAX: u64 = 1000;
/// Most distinct content types a shard keeps shared copies of.
const CONTENT_TYPES_SHARED_MAX: usize = 64;

/// The parts of a shard that readers and the engine use from other threads.
pub(crate) struct ShardShared {
    pub directory: Directory,
    pub live: Arc<LiveRegistry>,
    pub counters: ShardCounters,
    /// How readers reach stored bytes in the disk modes.
    pub log: Option<Arc<dyn LogStore>>,
    ops: Sender<Op>,
    /// Forks of this shard's streams that are gone. Unbounded, but never longer than the
    /// number of forks: each fork gives its count back once.
    releases: Sender<Release>,
    doorbell: Arc<Doorbell>,
    /// A reader renewed a TTL window since the shard last saved renewals (`renewals`).
    renewed_by_read: AtomicBool,
    /// A commit failed: the shard is gone, and its streams take no more writes until a
    /// restart (they are read as they were last published).
    commit_failed: AtomicBool,
    /// It failed because the data directory was removed under the process.
    directory_removed: AtomicBool,
}

impl ShardShared {
    /// Sends an op without waiting; refuses at once when the queue is full.
    pub(crate) fn submit(&self, op: Op) -> Result<(), OpError> {
        self.ops.try_send(op).map_err(|error| match error {
            TrySendError::Full(_) => OpError::Overloaded,
            TrySendError::Disconnected(_) => self.gone(),
        })?;
        wake_batch::ring(&self.doorbell);
        Ok(())
    }

    /// Why an op the shard will never answer failed: its commit failed, or it stopped.
    pub(crate) fn gone(&self) -> OpError {
        match (self.commit_failed(), self.directory_removed.load(Ordering::Acquire)) {
            (true, true) => OpError::DirectoryRemoved,
            (true, false) => OpError::StorageFailed,
            (false, _) => OpError::ShuttingDown,
        }
    }

    /// Whether a commit of this shard failed (it takes no more writes until a restart).
    pub(crate) fn commit_failed(&self) -> bool {
        self.commit_failed.load(Ordering::Acquire)
    }

    /// Best-effort housekeeping request (dropped when the queue is busy).
    pub(crate) fn request(&self, op: Op) {
        if self.ops.try_send(op).is_ok() {
            wake_batch::ring(&self.doorbell);
        }
    }

    /// Ops waiting in the shard's queue.
    pub(crate) fn queue_depth(&self) -> usize {
        self.ops.len()
    }

    /// Asks the shard to finish its batch and stop, waiting for queue space if needed.
    pub(crate) fn stop(&self) {
        if self.ops.send(Op::Stop).is_ok() {
            self.doorbell.ring();
        }
    }
}

impl StreamOwner for ShardShared {
    fn log(&self) -> Option<&dyn LogStore> {
        self.log.as_deref()
    }

    fn damage_counter(&self) -> &DamageCounter {
        &self.counters.damage
    }

    fn live(&self) -> &Arc<LiveRegistry> {
        &self.live
    }

    fn note_read_renewal(&self) {
        ShardShared::note_read_renewal(self);
    }

    fn request_expiry(&self, name: Arc<str>, id: StreamId) {
        self.request(Op::Expire { name, id });
    }

    fn release_fork(&self, release: Release) {
        // A shard that is gone drops the release (and answers a held delete).
        if self.releases.send(release).is_ok() {
            wake_batch::ring(&self.doorbell);
        }
    }
}

/// What a shard has done, for statistics (relaxed atomics, written once per batch).
#[derive(Default)]
pub(crate) struct ShardCounters {
    pub batches: AtomicU64,
    pub ops: AtomicU64,
    /// Streams compaction moved to the head of the log.
    pub moves: AtomicU64,
    /// Ops answered per batch.
    pub batch_ops: Histogram,
    /// Microseconds each commit took (the batch's write and sync in the disk modes).
    pub commit_us: Histogram,
    /// Streams known to be damaged.
    pub damage: DamageCounter,
}

/// Which shard, its batch limits and the clock.
#[derive(Clone, Debug)]
pub(crate) struct ShardSettings {
    /// Which shard this is (its place in the engine's shards), for the log.
    pub index: usize,
    pub limits: Limits,
    /// Forget producers idle this long (memory mode); `None` keeps them for the stream's life.
    pub producer_idle_ms_max: Option<u64>,
    pub batch_ops_max: usize,
    pub batch_bytes_max: usize,
    pub clock: Clock,
    pub io_error_policy: IoErrorPolicy,
}

pub(crate) struct Shard {
    shared: Arc<ShardShared>,
    ops: Receiver<Op>,
    releases: Receiver<Release>,
    budget: Arc<ByteBudget>,
    settings: ShardSettings,
    persist: Box<dyn Persist>,
    expiry: ExpiryQueue,
    content_types: Vec<ContentType>,
    stream_id_next: StreamId,
    batch_number: u64,
    /// The last batch's buffers, emptied, to be filled again without allocating.
    recycled: Option<Batch>,
    /// Streams keep their bytes in memory (memory mode) rather than in a log.
    in_memory: bool,
    /// Streams compaction wants moved (acid), one per batch.
    moves: VecDeque<Resident>,
    /// Readers' renewals are saved no earlier than this (clock milliseconds).
    renewals_due_ms: u64,
    /// A batch written by `write_step`, waiting for `settle_step`.
    written: Option<Batch>,
    /// Asked to stop (or the queue's senders are gone): the batch it was in is the last.
    stopping: bool,
}

/// One group commit's worth of applied ops.
#[derive(Default)]
pub(crate) struct Batch {
    number: u64,
    now_ms: u64,
    records: Vec<Record>,
    /// The stream of each record.
    owners: Vec<Arc<Stream>>,
    /// Streams compaction moves in this batch (after its records), and their streams.
    moves: Vec<Move>,
    move_owners: Vec<Arc<Stream>>,
    /// Where each record, then each move, went, once committed.
    places: Vec<Place>,
    /// Forks removed in this batch: their sources are told once it is committed, with the
    /// answer to the delete that started a cascade through them, if any.
    released_forks: Vec<(Arc<Stream>, Option<HeldAnswer>)>,
    /// Answers to deletes whose cascade ends with a removal in this batch: sent once it is
    /// published.
    held_answers: Vec<HeldAnswer>,
    touched: Vec<Arc<Stream>>,
    /// The touched streams' new published states, for the live readers' wake.
    published: Vec<(StreamId, Published)>,
    overlay: Overlay,
    replies: Vec<Pending>,
    payload_bytes: usize,
    /// When its commit started; `None` when it had nothing to commit (`commit::write`).
    started: Option<std::time::Instant>,
}

impl Batch {
    /// Holds `answer` until the cascade that `removed` (just removed in this batch)
    /// continues has ended: with its release to its own source, if it is a fork; else until
    /// this batch is published.
    fn hold_for_cascade(&mut self, removed: &Arc<Stream>, answer: HeldAnswer) {
        match self.released_forks.last_mut() {
            Some((fork, held @ None)) if Arc::ptr_eq(fork, removed) => *held = Some(answer),
            _ => self.held_answers.push(answer),
        }
    }
}

/// A reply that waits for the batch's commit.
enum Pending {
    Create(Reply<CreateOutcome>, Result<CreateOutcome, OpError>),
    Append(Reply<AppendOutcome>, Result<AppendOutcome, OpError>),
    Delete(Reply<()>, Result<(), OpError>),
}

impl Pending {
    fn send(self) {
        // A requester that went away (client disconnected) no longer needs the answer.
        let _ = match self {
            Pending::Create(reply, result) => reply.send(result).is_ok(),
            Pending::Append(reply, result) => reply.send(result).is_ok(),
            Pending::Delete(reply, result) => reply.send(result).is_ok(),
        };
    }
}

impl Shard {
    /// Builds a shard over its opened storage and the handle other threads use to reach it;
    /// its recovered streams are installed next, across all shards ([`install_recovered`]).
    pub(crate) fn new(
        queue_capacity: usize,
        budget: Arc<ByteBudget>,
        settings: ShardSettings,
        opened: OpenedShard,
        doorbell: Arc<Doorbell>,
    ) -> (Shard, Arc<ShardShared>) {
        let (sender, receiver) = crossbeam_channel::bounded(queue_capacity);
        let (releases, released) = crossbeam_channel::unbounded();
        let shared = Arc::new(ShardShared {
            releases,
            directory: Directory::default(),
            live: Arc::new(LiveRegistry::default()),
            ops: sender,
            doorbell,
            counters: ShardCounters::default(),
            log: opened.log,
            renewed_by_read: AtomicBool::new(false),
            commit_failed: AtomicBool::new(false),
            directory_removed: AtomicBool::new(false),
        });
        let shard = Shard {
            in_memory: shared.log.is_none(),
            shared: Arc::clone(&shared),
            ops: receiver,
            releases: released,
            budget,
            settings,
            persist: opened.persist,
            expiry: ExpiryQueue::default(),
            content_types: Vec::new(),
            stream_id_next: opened.stream_id_next,
            batch_number: 0,
            recycled: None,
            moves: VecDeque::new(),
            renewals_due_ms: 0,
            written: None,
            stopping: false,
        };
        (shard, shared)
    }

    /// Collects and writes one batch of whatever is queued (and any due expiries, releases
    /// and moves) without waiting; [`Shard::settle_step`] makes it durable and publishes it,
    /// so a worker driving several shards lets every one write before any waits, and one
    /// flush covers them all. Returns whether an op was taken.
    pub(crate) fn write_step(&mut self) -> bool {
        if self.is_done() {
            return false;
        }
        let first = match self.ops.try_recv() {
            Ok(op) => Some(op),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => {
                self.stopping = true;
                None
            }
        };
        let took_op = first.is_some();
        let (batch, keep_running) = self.collect(first);
        self.stopping |= !keep_running;
        self.written = self.write(batch);
        took_op
    }

    /// Between the halves of a step: starts sending the batch [`Shard::write_step`] wrote
    /// to the device, without waiting.
    pub(crate) fn start_flush_step(&mut self) {
        let wrote = self.written.as_ref().is_some_and(|batch| batch.started.is_some());
        if wrote && !self.start_flush() {
            self.written = None;
        }
    }

    /// The second half of a step: settles the batch [`Shard::write_step`] wrote.
    pub(crate) fn settle_step(&mut self) {
        if let Some(batch) = self.written.take() {
            self.settle(batch);
        }
    }

    /// Whether a step would do anything now: ops or releases queued, moves planned, or an
    /// expiry due.
    pub(crate) fn has_work(&self, now_ms: u64) -> bool {
        !self.queues_empty() || !self.moves.is_empty() || self.expiry.wait_ms(now_ms) == Some(0)
    }

    /// Nothing queued for the shard.
    pub(crate) fn queues_empty(&self) -> bool {
        self.ops.is_empty() && self.releases.is_empty()
    }

    /// How long the shard may sleep from `now_ms` with nothing queued: until its next expiry,
    /// a millisecond while compaction has moves planned, [`IDLE_WAKE_MS_MAX`] at most.
    pub(crate) fn idle_ms(&self, now_ms: u64) -> u64 {
        let idle_ms = if self.moves.is_empty() { IDLE_WAKE_MS_MAX } else { 1 };
        self.expiry.wait_ms(now_ms).unwrap_or(idle_ms).min(idle_ms)
    }

    /// A commit failed (its write, or a sync under `IoErrorPolicy::Fail`): the shard takes
    /// no more ops.
    fn failed(&self) -> bool {
        self.shared.commit_failed()
    }

    /// The shard was asked to stop (or its queue is gone), or a commit failed: its worker
    /// finishes it.
    pub(crate) fn is_done(&self) -> bool {
        self.stopping || self.failed()
    }

    /// The clean end: readers' renewals and a final checkpoint (disk modes, unless a commit
    /// failed) or where each stream file ends (file modes), and every live reader woken
    /// to see the shard go.
    pub(crate) fn finish(mut self) {
        if !self.failed() {
            self.save_renewals_if_read(true);
            self.checkpoint(CheckpointKind::Clean);
            self.save_clean_ends();
        }
        self.shared.live.wake_all();
    }

    /// Steps 1 and 2: drains queued ops up to the batch limits and applies them, along with
    /// any expiries that are due. Also returns false once asked to stop.
    fn collect(&mut self, first: Option<Op>) -> (Batch, bool) {
        self.batch_number += 1;
        let mut batch = self.recycled.take().unwrap_or_default();
        batch.number = self.batch_number;
        batch.now_ms = self.settings.clock.now_ms();
        batch.payload_bytes = 0;
        let mut keep_running = true;
        let mut next = first;
        while let Some(op) = next.take() {
            if matches!(op, Op::Stop) {
                keep_running = false;
                break;
            }
            // A release sent before this op was (a fork's removal answered, then its source
            // deleted) is applied before it.
            self.apply_releases(&mut batch);
            self.apply(&mut batch, op);
            let full = batch.replies.len() >= self.settings.batch_ops_max
                || batch.payload_bytes >= self.settings.batch_bytes_max;
            if full {
                break;
            }
            next = self.ops.try_recv().ok();
        }
        self.apply_releases(&mut batch);
        self.expire_due(&mut batch);
        // A move goes last: it takes the room it finds, after everything the batch planned.
        if keep_running && batch.payload_bytes < self.settings.batch_bytes_max {
            if let Some(resident) = self.moves.pop_front() {
                self.apply_move(&mut batch, resident);
            }
        }
        (batch, keep_running)
    }

    /// Applies every fork release queued for this shard.
    fn apply_releases(&mut self, batch: &mut Batch) {
        while let Ok(release) = self.releases.try_recv() {
            self.apply_release(batch, release);
        }
    }

    fn next_stream_id(&mut self) -> StreamId {
        let id = self.stream_id_next;
        self.stream_id_next = id.next();
        id
    }

    /// Makes `content_type` share the strings of an equal one this shard already holds.
    fn share_content_type(&mut self, content_type: &mut ContentType) {
        if let Some(known) = self.content_types.iter().find(|known| *known == content_type) {
            content_type.share_with(known);
        } else if self.content_types.len() < CONTENT_TYPES_SHARED_MAX {
            self.content_types.push(content_type.clone());
        }
    }
}

#[cfg(test)]
mod tests;
