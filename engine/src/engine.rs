//! The engine handle: starts the shards, routes names to them, and hands out read handles.
//!
//! A stream name hashes with xxh3 to one of a power-of-two number of shards. Mutations are
//! sent to that shard's bounded queue and answered through a oneshot; a full queue is
//! refused at once ([`OpError::Overloaded`]) rather than blocking the caller's thread. Reads
//! look the name up in the shard's published directory and never touch the shard's queue.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tokio::sync::oneshot;
use xxhash_rust::xxh3::xxh3_64;

use crate::config::{EngineConfig, EngineError, StorageMode};
use crate::limits::ByteBudget;
use crate::name::StreamName;
use crate::op::{AppendOutcome, AppendRequest, CreateOutcome, CreateRequest, Op, OpError};
use crate::producer::PRODUCER_IDLE_MS_MAX;
use crate::shard::{Shard, ShardSettings, ShardShared};
use crate::storage::MemoryPersist;
use crate::stream::handle::StreamHandle;

/// A running engine. Clones share it; the last one to go stops the shards.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<EngineInner>,
}

struct EngineInner {
    config: EngineConfig,
    shards: Vec<Arc<ShardShared>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    budget: Arc<ByteBudget>,
}

/// Counters for tools, tests and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineStats {
    pub streams: usize,
    pub stored_bytes: u64,
    pub live_streams: usize,
    /// Batches committed since start (each is one commit: one write and sync in disk modes).
    pub batches: u64,
    /// Ops answered by those batches.
    pub ops: u64,
}

impl Engine {
    /// Validates the configuration and starts one thread per shard.
    pub fn start(config: EngineConfig) -> Result<Engine, EngineError> {
        config.validate()?;
        if config.mode != StorageMode::Memory {
            return Err(EngineError::ModeUnavailable(config.mode));
        }
        let budget = Arc::new(ByteBudget::new(config.limits.total_bytes_max));
        let settings = ShardSettings {
            limits: config.limits,
            producer_idle_ms_max: (config.mode == StorageMode::Memory).then_some(PRODUCER_IDLE_MS_MAX),
            batch_ops_max: config.batch_ops_max,
            batch_bytes_max: config.batch_bytes_max,
            clock: config.clock.clone(),
        };
        let mut shards = Vec::with_capacity(config.shard_count as usize);
        let mut threads = Vec::with_capacity(config.shard_count as usize);
        for index in 0..config.shard_count {
            let (shard, shared) = Shard::new(
                config.queue_capacity,
                Arc::clone(&budget),
                settings.clone(),
                Box::new(MemoryPersist),
            );
            let thread = std::thread::Builder::new()
                .name(format!("ds-shard-{index}"))
                .spawn(move || run_or_abort(shard))
                .map_err(EngineError::Spawn)?;
            shards.push(shared);
            threads.push(thread);
        }
        Ok(Engine { inner: Arc::new(EngineInner { config, shards, threads: Mutex::new(threads), budget }) })
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
        self.shard(request.name.as_str()).submit(Op::Create(request, reply))?;
        answer.await.unwrap_or(Err(OpError::ShuttingDown))
    }

    /// Appends to and/or closes a stream.
    pub async fn append(&self, request: AppendRequest) -> Result<AppendOutcome, OpError> {
        let (reply, answer) = oneshot::channel();
        self.shard(request.name.as_str()).submit(Op::Append(request, reply))?;
        answer.await.unwrap_or(Err(OpError::ShuttingDown))
    }

    /// Deletes a stream and all its data.
    pub async fn delete(&self, name: StreamName) -> Result<(), OpError> {
        let (reply, answer) = oneshot::channel();
        self.shard(name.as_str()).submit(Op::Delete(name, reply))?;
        answer.await.unwrap_or(Err(OpError::ShuttingDown))
    }

    /// A read handle on the published stream called `name`, if there is one.
    pub fn open(&self, name: &StreamName) -> Option<StreamHandle> {
        let shard = self.shard(name.as_str());
        let stream = shard.directory.get(name.as_str())?;
        let handle = StreamHandle::new(stream, Arc::clone(shard), self.inner.config.clock.clone());
        handle.status().is_some().then_some(handle)
    }

    pub fn stats(&self) -> EngineStats {
        EngineStats {
            streams: self.inner.shards.iter().map(|s| s.directory.len()).sum(),
            stored_bytes: self.inner.budget.used(),
            live_streams: self.inner.shards.iter().map(|s| s.live.len()).sum(),
            batches: self.inner.shards.iter().map(|s| s.counters.batches.load(Ordering::Relaxed)).sum(),
            ops: self.inner.shards.iter().map(|s| s.counters.ops.load(Ordering::Relaxed)).sum(),
        }
    }

    /// Stops every shard after its current batch and waits for the threads. Idempotent.
    pub fn shutdown(&self) {
        self.inner.stop_and_join();
    }
}

impl EngineInner {
    fn stop_and_join(&self) {
        let threads: Vec<_> = std::mem::take(&mut *self.threads.lock().expect("engine threads lock"));
        if threads.is_empty() {
            return;
        }
        for shard in &self.shards {
            shard.stop();
        }
        for thread in threads {
            let _ = thread.join();
        }
    }
}

impl Drop for EngineInner {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

/// A shard that panics has left its streams in an unknown state: stop the process.
fn run_or_abort(shard: Shard) {
    batch_scheduling();
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| shard.run())).is_err() {
        tracing::error!("a shard thread panicked; aborting");
        std::process::abort();
    }
}

/// Asks the kernel not to let a shard thread preempt the thread that just woke it.
///
/// A shard is woken by the front for each op; with wakeup preemption on a busy core every op
/// would cost two context switches. `SCHED_BATCH` lets the waker finish its turn, so ops
/// queue up and the shard drains them as one batch; on a host with idle cores nothing
/// changes. Failure is harmless (the thread keeps the normal policy).
fn batch_scheduling() {
    #[cfg(target_os = "linux")]
    {
        let parameters = libc::sched_param { sched_priority: 0 };
        // SAFETY: plain syscall on the calling thread (pid 0) with a valid parameter block.
        let result = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &parameters) };
        if result != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "SCHED_BATCH unavailable for a shard thread");
        }
    }
}
