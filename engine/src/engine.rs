//! The engine handle: starts the shards, routes names to them, and hands out read handles.
//!
//! A stream name hashes with xxh3 to one of a power-of-two number of shards. Mutations are
//! sent to that shard's bounded queue and answered through a oneshot; a full queue is
//! refused at once ([`OpError::Overloaded`]) rather than blocking the caller's thread. Reads
//! look the name up in the shard's published directory and never touch the shard's queue.
//!
//! Starting opens the storage of the mode first (`crate::storage::open`: lock, manifest,
//! recovery), then builds each shard over its recovered streams. Stopping ends every shard
//! after its batch (each takes a clean checkpoint in the disk modes), then the housekeeper,
//! then lets go of the data directory's lock.

use std::any::Any;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tokio::sync::oneshot;
use xxhash_rust::xxh3::xxh3_64;

use crate::config::{EngineConfig, EngineError, Threading};
use crate::fork_point;
use crate::histogram::HistogramSnapshot;
use crate::limits::ByteBudget;
use crate::name::StreamName;
use crate::op::{AppendOutcome, AppendRequest, CreateOutcome, CreateRequest, ForkRequest, Op, OpError};
use crate::producer::PRODUCER_IDLE_MS_MAX;
use crate::shard::{self, worker_count, Doorbell, Shard, ShardSettings, ShardShared, Worker};
use crate::storage::flush::{FlushGroup, FlushStats};
use crate::storage::maintenance::Upkeep;
use crate::storage::open::{self, OpenError, OpenedStore, StoreSettings};
use crate::storage::wal::zero_waits::{ZeroWaitStats, ZeroWaits};
use crate::storage::RecoveryReport;
use crate::storage::StorageMode;
use crate::stream::fork::Unpinned;
use crate::stream::handle::{StreamHandle, StreamOwner};
use crate::time::Clock;

/// A running engine. Clones share it; the last one to go stops the shards.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<EngineInner>,
}

struct EngineInner {
    config: EngineConfig,
    shards: Vec<Arc<ShardShared>>,
    runners: Mutex<Runners>,
    budget: Arc<ByteBudget>,
    recovery: Vec<RecoveryReport>,
    /// How commits become durable (acid): one group per file system.
    flush_groups: Vec<Arc<FlushGroup>>,
    /// How long shards waited for zeros (acid).
    zero_waits: Option<Arc<ZeroWaits>>,
}

/// What runs the shards, and what must outlive them.
enum Runners {
    Threads {
        shards: Vec<JoinHandle<()>>,
        housekeeper: Option<JoinHandle<()>>,
        lock: Option<Box<dyn Any + Send + Sync>>,
    },
    /// The caller drives the shards ([`Engine::run_pending`]), all on one worker.
    Manual {
        worker: Worker,
        lock: Option<Box<dyn Any + Send + Sync>>,
    },
    Stopped,
}

/// Counters for tools, tests and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    pub streams: usize,
    /// Message bytes stored across all streams.
    pub stored_bytes: u64,
    /// What all streams cost against `DS_LIMITS__MAX_MEMORY_BYTES` (their data, and the
    /// charges of `crate::limits`).
    pub charged_bytes: u64,
    pub live_streams: usize,
    /// Batches committed since start (each is one commit: one write and sync in disk modes).
    pub batches: u64,
    /// Streams compaction moved out of mostly-dead segments (acid).
    pub moves: u64,
    /// Ops answered by those batches.
    pub ops: u64,
    /// Streams known to be damaged (served up to the damage, refusing writes).
    pub damaged_streams: u64,
    /// Bytes catch-up reads' copies of small records hold now, across the process (disk
    /// modes; capped: `storage::chain::read::copies`).
    pub read_copies_held_bytes: u64,
    /// Catch-up reads that found that cap reached and sent their small records as slices of
    /// the log instead of one copy, since the start.
    pub read_copies_refused: u64,
    /// Bytes of recent catch-up answers kept for the next readers from the same start (part
    /// of the copies above; capped: `stream::kept_answers`).
    pub kept_answer_bytes: u64,
    /// Catch-up reads answered with a kept answer instead of a read of the log, since the
    /// start.
    pub kept_answer_hits: u64,
    /// Pages of mapped files that could not be read (cut short under the process, a device
    /// error) and read as zeros instead, across the process (`storage::vfs::fault_guard`).
    pub map_faults: u64,
    /// Maps read without that guard because its table was full.
    pub maps_unguarded: u64,
    /// Shards whose log could not be written: their streams take no more writes until a
    /// restart (disk modes; reads go on).
    pub shards_failed: usize,
}

/// One shard's activity, for metrics.
#[derive(Clone, Debug)]
pub struct ShardStats {
    /// Ops waiting in the shard's queue right now.
    pub queue_depth: usize,
    /// Ops answered per batch.
    pub batch_ops: HistogramSnapshot,
    /// Microseconds per commit (write and sync of a batch in the disk modes).
    pub commit_us: HistogramSnapshot,
}

impl Engine {
    /// Validates the configuration, opens (and recovers) the storage of its mode, and starts
    /// the shards.
    pub fn start(config: EngineConfig) -> Result<Engine, EngineError> {
        config.validate()?;
        let OpenedStore { shards: opened, lock, housekeeper, flush_groups, zero_waits } =
            open::open(&store_settings(&config)).map_err(|error| match error {
                OpenError::Storage(detail) => EngineError::Storage(detail),
                OpenError::Spawn(error) => EngineError::Spawn(error),
            })?;
        let budget = Arc::new(ByteBudget::new(config.limits.total_bytes_max, config.limits.streams_max));
        let settings = ShardSettings {
            index: 0,
            limits: config.limits,
            producer_idle_ms_max: (config.mode == StorageMode::Memory).then_some(PRODUCER_IDLE_MS_MAX),
            batch_ops_max: config.batch_ops_max,
            batch_bytes_max: config.batch_bytes_max,
            clock: config.clock.clone(),
            io_error_policy: config.io_error_policy,
        };
        let recovery = opened.iter().filter_map(|shard| shard.report.clone()).collect();
        let workers = match config.threading {
            Threading::Manual => 1,
            Threading::Threads => worker_count(opened.len()),
        };
        let doorbells: Vec<Arc<Doorbell>> = (0..workers).map(|_| Arc::default()).collect();
        let mut shareds = Vec::with_capacity(opened.len());
        let mut shards = Vec::with_capacity(opened.len());
        let mut recovered = Vec::with_capacity(opened.len());
        for (index, mut opened) in opened.into_iter().enumerate() {
            recovered.push(std::mem::take(&mut opened.streams));
            let doorbell = Arc::clone(&doorbells[index % workers]);
            let settings = ShardSettings { index, ..settings.clone() };
            let (shard, shared) =
                Shard::new(config.queue_capacity, Arc::clone(&budget), settings, opened, doorbell);
            shareds.push(shared);
            shards.push(shard);
        }
        shard::install_recovered(&mut shards, recovered, &config.clock);
        let mut workers = group_into_workers(shards, doorbells, &config.clock);
        let runners = match config.threading {
            Threading::Manual => Runners::Manual { worker: workers.remove(0), lock },
            Threading::Threads => Runners::Threads { shards: spawn_workers(workers)?, housekeeper, lock },
        };
        let runners = Mutex::new(runners);
        let inner =
            EngineInner { config, shards: shareds, runners, budget, recovery, flush_groups, zero_waits };
        release_freed_memory();
        Ok(Engine { inner: Arc::new(inner) })
    }

    /// What recovery found, per shard (empty in memory mode).
    pub fn recovery_reports(&self) -> &[RecoveryReport] {
        &self.inner.recovery
    }

    /// Under manual threading, runs one batch on every shard with queued ops (and any due
    /// expiries); returns whether any op was taken. Does nothing under threads.
    pub fn run_pending(&self) -> bool {
        let mut runners = self.inner.runners.lock().expect("engine runners lock");
        match &mut *runners {
            // Every shard writes before any waits: one flush covers them all.
            Runners::Manual { worker, .. } => worker.step_all(),
            _ => false,
        }
    }

    /// Under manual threading, stops without the clean shutdown (no final checkpoint): what
    /// a crash leaves behind, for crash tests. Under threads, the same as [`Engine::shutdown`].
    pub fn stop_abruptly(&self) {
        let mut runners = self.inner.runners.lock().expect("engine runners lock");
        if matches!(*runners, Runners::Manual { .. }) {
            *runners = Runners::Stopped;
            return;
        }
        drop(runners);
        self.shutdown();
    }

    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// The shard that owns `name`.
    pub fn shard_index(&self, name: &str) -> usize {
        let mask = self.inner.shards.len() as u64 - 1;
        (xxh3_64(name.as_bytes()) & mask) as usize
    }

    fn shard(&self, name: &str) -> &Arc<ShardShared> {
        &self.inner.shards[self.shard_index(name)]
    }

    /// Creates a stream (or confirms an identical one exists).
    pub async fn create(&self, request: CreateRequest) -> Result<CreateOutcome, OpError> {
        let (reply, answer) = oneshot::channel();
        let shard = self.shard(request.name.as_str());
        shard.submit(Op::Create(request, None, reply))?;
        answer.await.unwrap_or_else(|_| Err(shard.gone()))
    }

    /// Creates a fork of `request.source` (or confirms an identical one exists). The source
    /// counts the fork before it is created (under its stream's lock, without a trip to its
    /// shard), so the source cannot go while the fork may still come to be; a fork that is
    /// not created gives its count back.
    pub async fn fork(&self, request: ForkRequest) -> Result<CreateOutcome, OpError> {
        let ForkRequest { mut create, inherit_expiry, source, offset, sub_offset } = request;
        let source = self.open(&source).ok_or(OpError::NotFound)?;
        let base = fork_point::resolve(&source, offset, sub_offset)?;
        if !create.config.content_type.matches(&source.config().content_type) {
            return Err(OpError::ContentTypeMismatch);
        }
        if inherit_expiry {
            create.config.ttl_secs = source.config().ttl_secs;
            create.config.expires_at_ms = source.config().expires_at_ms;
        }
        source.pin_fork().map_err(|unpinned| match unpinned {
            Unpinned::Gone => OpError::NotFound,
            Unpinned::Deleted => OpError::SourceDeleted,
        })?;
        let (reply, answer) = oneshot::channel();
        let shard = self.shard(create.name.as_str());
        let created = match shard.submit(Op::Create(create, Some(base), reply)) {
            Ok(()) => answer.await.unwrap_or_else(|_| Err(shard.gone())),
            Err(error) => Err(error),
        };
        if !matches!(created, Ok(CreateOutcome { created: true, .. })) {
            source.release_fork(None);
        }
        created
    }

    /// Appends to and/or closes a stream.
    pub async fn append(&self, request: AppendRequest) -> Result<AppendOutcome, OpError> {
        let (reply, answer) = oneshot::channel();
        let shard = self.shard(request.name.as_str());
        shard.submit(Op::Append(request, reply))?;
        answer.await.unwrap_or_else(|_| Err(shard.gone()))
    }

    /// Deletes a stream and all its data.
    pub async fn delete(&self, name: StreamName) -> Result<(), OpError> {
        let (reply, answer) = oneshot::channel();
        let shard = self.shard(name.as_str());
        shard.submit(Op::Delete(name, reply))?;
        answer.await.unwrap_or_else(|_| Err(shard.gone()))
    }

    /// A read handle on the published stream called `name`, if there is one (a
    /// soft-deleted one too: its status says so).
    pub fn open(&self, name: &StreamName) -> Option<StreamHandle> {
        let shard = self.shard(name.as_str());
        let stream = shard.directory.get(name.as_str())?;
        let owner: Arc<dyn StreamOwner> = Arc::clone(shard) as Arc<dyn StreamOwner>;
        let handle = StreamHandle::new(stream, owner, self.inner.config.clock.clone());
        handle.status().is_some().then_some(handle)
    }

    /// The names of every published stream (soft-deleted ones too; expired ones not).
    pub fn stream_names(&self) -> Vec<StreamName> {
        let mut names = Vec::new();
        for shard in &self.inner.shards {
            shard.directory.for_each(|stream| names.extend(StreamName::new(stream.name()).ok()));
        }
        names.retain(|name| self.open(name).is_some());
        names
    }

    pub fn stats(&self) -> EngineStats {
        EngineStats {
            streams: self.inner.shards.iter().map(|s| s.directory.len()).sum(),
            stored_bytes: self.inner.budget.stored(),
            charged_bytes: self.inner.budget.used(),
            live_streams: self.inner.shards.iter().map(|s| s.live.len()).sum(),
            batches: self.inner.shards.iter().map(|s| s.counters.batches.load(Ordering::Relaxed)).sum(),
            ops: self.inner.shards.iter().map(|s| s.counters.ops.load(Ordering::Relaxed)).sum(),
            moves: self.inner.shards.iter().map(|s| s.counters.moves.load(Ordering::Relaxed)).sum(),
            damaged_streams: self
                .inner
                .shards
                .iter()
                .map(|s| s.counters.damage.damaged_streams.load(Ordering::Relaxed))
                .sum(),
            read_copies_held_bytes: crate::storage::chain::read::copies_held_bytes(),
            read_copies_refused: crate::storage::chain::read::copies_refused(),
            kept_answer_bytes: crate::stream::kept_answers::kept_bytes() as u64,
            kept_answer_hits: crate::stream::kept_answers::hits(),
            map_faults: crate::storage::vfs::fault_guard::faults(),
            maps_unguarded: crate::storage::vfs::fault_guard::unguarded(),
            shards_failed: self.inner.shards.iter().filter(|s| s.commit_failed()).count(),
        }
    }

    /// Each shard's queue depth and batch histograms (cheap: relaxed loads).
    pub fn shard_stats(&self) -> Vec<ShardStats> {
        self.inner
            .shards
            .iter()
            .map(|shard| ShardStats {
                queue_depth: shard.queue_depth(),
                batch_ops: shard.counters.batch_ops.snapshot(),
                commit_us: shard.counters.commit_us.snapshot(),
            })
            .collect()
    }

    /// The device flushes that made commits durable (acid; empty in the other modes).
    pub fn flush_stats(&self) -> FlushStats {
        let mut total = FlushStats::default();
        for group in &self.inner.flush_groups {
            total.merge(&group.stats());
        }
        total
    }

    /// How long shards waited for zeros before writing (acid; `None` in other modes).
    pub fn zero_wait_stats(&self) -> Option<ZeroWaitStats> {
        self.inner.zero_waits.as_ref().map(|waits| waits.stats())
    }

    /// Wakes every live reader of every stream, whether or not its stream moved (the
    /// front's shutdown: woken readers look at the front's signal and end).
    pub fn wake_live_readers(&self) {
        for shard in &self.inner.shards {
            shard.live.wake_all();
        }
    }

    /// Asks every shard for `upkeep` of its log now (acid; the other modes have no log to
    /// keep): a checkpoint, or a compaction whatever the live share. Best effort: a shard
    /// whose queue is full drops the request. Crash tests use it to put compaction and
    /// checkpoints at every point of a workload.
    pub fn request_upkeep(&self, upkeep: Upkeep) {
        for shard in &self.inner.shards {
            shard.request(Op::Upkeep(upkeep));
        }
    }

    /// Stops every shard after its current batch and waits for the threads. Idempotent.
    pub fn shutdown(&self) {
        self.inner.stop_and_join();
    }
}

impl EngineInner {
    /// Shards first (their final checkpoints), then the housekeeper, then the lock.
    fn stop_and_join(&self) {
        let runners =
            std::mem::replace(&mut *self.runners.lock().expect("engine runners lock"), Runners::Stopped);
        match runners {
            Runners::Threads { shards, housekeeper, lock } => {
                for shard in &self.shards {
                    shard.stop();
                }
                for thread in shards {
                    let _ = thread.join();
                }
                if let Some(thread) = housekeeper {
                    let _ = thread.join();
                }
                drop(lock);
            }
            Runners::Manual { worker, lock } => {
                worker.finish();
                drop(lock);
            }
            Runners::Stopped => {}
        }
    }
}

/// Gives the memory recovery used and freed (checkpoint bytes, decoded snapshots) back to
/// the system, so a restarted server's footprint is its streams', not recovery's peak.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free heap memory; it has no other effect.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// What opening the storage needs of `config`.
fn store_settings(config: &EngineConfig) -> StoreSettings {
    StoreSettings {
        mode: config.mode,
        data_dir: config.data_dir.clone(),
        shard_count: config.shard_count,
        segment_bytes: config.segment_bytes,
        record_bytes_max: config.limits.record_bytes_max(),
        file_handles_max: config.file_handles_max,
        inline: config.threading == Threading::Manual,
        vfs: Arc::clone(&config.vfs.0),
        now_ms: config.clock.now_ms(),
        shared_flush: config.shared_flush,
    }
}

/// Shard `i` goes to worker `i % workers`, the one whose doorbell it was given.
fn group_into_workers(shards: Vec<Shard>, doorbells: Vec<Arc<Doorbell>>, clock: &Clock) -> Vec<Worker> {
    let count = doorbells.len();
    let mut groups: Vec<Vec<Shard>> = (0..count).map(|_| Vec::new()).collect();
    for (index, shard) in shards.into_iter().enumerate() {
        groups[index % count].push(shard);
    }
    groups
        .into_iter()
        .zip(doorbells)
        .map(|(shards, doorbell)| Worker::new(shards, doorbell, clock.clone()))
        .collect()
}

/// One thread per worker.
fn spawn_workers(workers: Vec<Worker>) -> Result<Vec<JoinHandle<()>>, EngineError> {
    let mut threads = Vec::with_capacity(workers.len());
    for (index, worker) in workers.into_iter().enumerate() {
        let thread = std::thread::Builder::new()
            .name(format!("ds-shards-{index}"))
            .spawn(move || run_or_abort(worker))
            .map_err(EngineError::Spawn)?;
        threads.push(thread);
    }
    Ok(threads)
}

impl Drop for EngineInner {
    fn drop(&mut self) {
        self.stop_and_join();
        // Forks' streams hold their sources' shards: cut those links so the shards go.
        for shard in &self.shards {
            shard.directory.clear();
        }
    }
}

/// A shard that panics has left its streams in an unknown state: stop the process.
fn run_or_abort(worker: Worker) {
    crate::scheduling::batch_scheduling();
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| worker.run())).is_err() {
        tracing::error!("a shard thread panicked; aborting");
        std::process::abort();
    }
}
