//! How an engine is built: storage mode, shard count, limits, batching and the clock.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::limits::Limits;
use crate::storage::vfs::real::RealVfs;
use crate::storage::vfs::Vfs;
use crate::storage::StorageMode;
use crate::time::Clock;

/// What happens when a commit's sync fails (or making a new segment active does). A
/// commit whose own writes fail before any sync does stops only its shard, whatever the
/// policy (`storage::CommitError::Unwritten`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IoErrorPolicy {
    /// Stop the process at once: it never acknowledges what it could not make durable, and
    /// never retries an fsync (the kernel may have dropped the dirty pages).
    #[default]
    Abort,
    /// Stop the failing shard instead (tests that simulate crashes): nothing in flight is
    /// acknowledged and the shard takes no more operations.
    Fail,
}

impl IoErrorPolicy {
    /// Reports a fatal I/O error; returns only under [`IoErrorPolicy::Fail`].
    pub fn fatal(self, what: &str, error: &std::io::Error) {
        tracing::error!(%error, "{what} failed; nothing that depended on it is acknowledged");
        if self == IoErrorPolicy::Abort {
            std::process::abort();
        }
    }
}

/// Smallest and largest shard count; counts must be powers of two.
pub(crate) const SHARDS_MAX: u32 = 256;

/// The file system the disk modes use (the real one unless a test says otherwise).
#[derive(Clone)]
pub struct VfsHandle(pub Arc<dyn Vfs>);

impl Default for VfsHandle {
    fn default() -> Self {
        VfsHandle(Arc::new(RealVfs))
    }
}

impl fmt::Debug for VfsHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("VfsHandle")
    }
}

/// How shards run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Threading {
    /// One OS thread per shard (the server).
    #[default]
    Threads,
    /// No threads: the caller runs batches with `Engine::run_pending` (deterministic tests).
    Manual,
}

/// Smallest default size of a WAL segment (larger when the largest append needs it).
pub(crate) const SEGMENT_BYTES_DEFAULT: u64 = 32 << 20;
/// Room a segment needs besides the largest record's data: its header, the record's header
/// and meta, and the seal.
pub const SEGMENT_OVERHEAD_BYTES: u64 = 16 * 1024;

/// The default segment size for the most data one record holds
/// ([`crate::Limits::record_bytes_max`]): 32 MiB, or the next power of two that holds it.
pub fn segment_bytes_for(record_bytes_max: u64) -> u64 {
    SEGMENT_BYTES_DEFAULT.max((record_bytes_max + SEGMENT_OVERHEAD_BYTES).next_power_of_two())
}

/// Everything an engine needs to start.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub mode: StorageMode,
    pub data_dir: PathBuf,
    pub shard_count: u32,
    pub limits: Limits,
    /// Size of each WAL segment (acid).
    pub segment_bytes: u64,
    /// Shards on one file system share each device flush where the file system guarantees
    /// it covers them all (acid; `false`: every commit flushes its own file).
    pub shared_flush: bool,
    /// Stream files kept open across all shards (file modes).
    pub file_handles_max: usize,
    pub io_error_policy: IoErrorPolicy,
    pub threading: Threading,
    pub vfs: VfsHandle,
    /// Ops a shard's queue holds before senders are told to back off.
    pub queue_capacity: usize,
    /// Most ops one batch (one commit) takes.
    pub batch_ops_max: usize,
    /// Most payload bytes one batch takes (a single larger op still gets a batch).
    pub batch_bytes_max: usize,
    pub clock: Clock,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            mode: StorageMode::Memory,
            data_dir: PathBuf::from("./data/streams"),
            shard_count: 16,
            limits: Limits::default(),
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            shared_flush: true,
            file_handles_max: 1024,
            io_error_policy: IoErrorPolicy::Abort,
            threading: Threading::Threads,
            vfs: VfsHandle::default(),
            queue_capacity: 4096,
            batch_ops_max: 1024,
            batch_bytes_max: 16 << 20,
            clock: Clock::System,
        }
    }
}

/// Why an engine did not start.
#[derive(Debug)]
pub enum EngineError {
    /// The shard count is not a power of two from 1 to 256.
    ShardCount(u32),
    /// The storage mode is not available in this build.
    ModeUnavailable(StorageMode),
    /// A limit or batch setting is zero.
    Setting(&'static str),
    /// Starting a shard thread failed.
    Spawn(std::io::Error),
    /// The data directory cannot be opened or recovered.
    Storage(String),
    /// A storage setting does not fit the limits.
    SegmentSize { segment_bytes: u64, needed: u64 },
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::ShardCount(count) => {
                write!(f, "shard count must be a power of two from 1 to {SHARDS_MAX}, got {count}")
            }
            EngineError::ModeUnavailable(mode) => {
                write!(f, "storage mode {mode} is not available yet")
            }
            EngineError::Setting(name) => write!(f, "{name} must be greater than zero"),
            EngineError::Spawn(error) => write!(f, "cannot start a shard thread: {error}"),
            EngineError::Storage(detail) => f.write_str(detail),
            EngineError::SegmentSize { segment_bytes, needed } => write!(
                f,
                "segments of {segment_bytes} bytes cannot hold the largest record; they need at least {needed} bytes and less than 4 GiB"
            ),
        }
    }
}

impl std::error::Error for EngineError {}

impl EngineConfig {
    pub fn validate(&self) -> Result<(), EngineError> {
        if !(1..=SHARDS_MAX).contains(&self.shard_count) || !self.shard_count.is_power_of_two() {
            return Err(EngineError::ShardCount(self.shard_count));
        }
        let settings = [
            ("queue capacity", self.queue_capacity as u64),
            ("batch ops", self.batch_ops_max as u64),
            ("batch bytes", self.batch_bytes_max as u64),
            ("stream byte limit", self.limits.stream_bytes_max),
            ("append byte limit", self.limits.append_bytes_max),
            ("total byte limit", self.limits.total_bytes_max),
        ];
        for (name, value) in settings {
            if value == 0 {
                return Err(EngineError::Setting(name));
            }
        }
        let needed = self.limits.record_bytes_max().saturating_add(SEGMENT_OVERHEAD_BYTES);
        if self.mode == StorageMode::Acid && !(needed..1 << 32).contains(&self.segment_bytes) {
            return Err(EngineError::SegmentSize { segment_bytes: self.segment_bytes, needed });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_counts_are_powers_of_two_up_to_256() {
        for count in [1, 2, 16, 256] {
            let config = EngineConfig { shard_count: count, ..EngineConfig::default() };
            assert!(config.validate().is_ok(), "{count}");
        }
        for count in [0, 3, 12, 257, 512] {
            let config = EngineConfig { shard_count: count, ..EngineConfig::default() };
            assert!(matches!(config.validate(), Err(EngineError::ShardCount(c)) if c == count));
        }
    }
}
