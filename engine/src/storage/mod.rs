//! Where stream bytes live, every mode under one roof, and the two interfaces the shards
//! use: [`Persist`] (step 3 of the shard loop: make a batch's records durable) and
//! [`LogStore`] (how readers of a disk mode read a stream's chain of records).
//!
//! # Layout
//!
//! - `memory/`: memory mode's bytes (append-only blocks, message boundaries); nothing to
//!   persist.
//! - `wal/`: acid — a write-ahead log per shard in preallocated segments, group commit,
//!   checkpoints, compaction, recovery.
//! - `files/`: file-durable and file-fast — one file of records per stream.
//! - Shared by the disk modes: `record/` (one record per accepted op: its codec, with a
//!   header and a payload crc32, its encoding, scans of many), `chain/` (each stream's
//!   records linked backwards by skip links, and reading a stream along them), `replay`
//!   (how records rebuild a stream's durable state), `chunk` (what a read returns),
//!   `vfs/` (every file operation, real, read-only or simulated), `flush` (the device
//!   flush that makes a commit durable, shared by the logs of one file system),
//!   `flush_file` (the file that flush syncs, kept in an inode-table block of its own).
//! - `maintenance`: the optional interface of a log that is checkpointed and compacted.
//! - The data directory: `mode` (the storage modes), `manifest` (its identity), `open`
//!   (lock, manifest, recovery, one opened shard per shard thread), `renewals` (TTL windows
//!   renewed by reads, saved so a crash keeps them), `root_watch` (whether the directory
//!   is still there: one removed under the process takes no more writes).

pub(crate) mod chain;
pub(crate) mod chunk;
pub(crate) mod files;
pub(crate) mod flush;
mod flush_file;
pub(crate) mod maintenance;
pub(crate) mod manifest;
pub(crate) mod memory;
mod mode;
pub(crate) mod open;
pub(crate) mod record;
pub(crate) mod renewals;
pub(crate) mod replay;
pub(crate) mod root_watch;
pub(crate) mod vfs;
pub(crate) mod wal;

use std::path::PathBuf;
use std::sync::Arc;

use crate::ids::{ChainIndex, Location, Lsn, StreamId};
use crate::offset::Offset;
use crate::storage::chain::read::{LogRead, RecordSource};
use crate::storage::chunk::{Chunk, Message, ReadError};
use crate::storage::record::Record;
use maintenance::{Maintenance, Move};
use renewals::RenewalStore;

pub use mode::StorageMode;

/// What recovery found and did (per shard in acid, for the whole store in the file modes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The checkpoint replay started from (acid).
    pub checkpoint_lsn: Option<Lsn>,
    /// The checkpoint was written by a clean shutdown and nothing followed it (acid).
    pub clean_shutdown: bool,
    /// Stream files read (file modes).
    pub files: u64,
    pub records_replayed: u64,
    pub bytes_replayed: u64,
    /// Each place recovery found damaged or gone (and stepped over), and the torn end of a
    /// log it cut.
    pub damage: Vec<Damage>,
    /// Streams recovery found damaged (served up to the damage, refusing writes).
    pub damaged_streams: u64,
    /// Bytes found after the last good record: behind a seal in acid, cut off in the file
    /// modes.
    pub stale_bytes: u64,
}

/// A place recovery found damaged or gone, or the torn end of a log it cut.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// The segment (acid) or stream file (file modes).
    pub file: PathBuf,
    pub position: u64,
    pub reason: String,
    /// Where what was set aside went: files that are not segments of the shard (acid), the
    /// bytes cut off a stream file's torn end (file modes); kept in `dropped/`.
    pub quarantined: Vec<PathBuf>,
    /// The unfinished end of a log a crash left, which recovery cut (nothing in it was
    /// acknowledged), not damage to what was written.
    pub torn: bool,
}

impl Damage {
    /// Damage (or a loss) recovery found at `position` of `file`, and why.
    pub fn new(file: PathBuf, position: u64, reason: String) -> Damage {
        Damage { file, position, reason, quarantined: Vec::new(), torn: false }
    }

    /// The torn end of a log at `position` of `file`, which recovery cuts.
    pub fn torn_end(file: PathBuf, position: u64, reason: String) -> Damage {
        Damage { torn: true, ..Damage::new(file, position, reason) }
    }
}

/// Where a committed record went: its location and its index in its stream's chain.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Place {
    pub location: Location,
    pub n: ChainIndex,
}

/// What a record needs room for: deletes may use room kept back from writes (they free
/// space).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    Write,
    Delete,
}

/// Why there is no room for a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NoRoom {
    /// The disk (or the quota) is full.
    OutOfSpace,
    /// The storage cannot grow now for another reason (an I/O error).
    Unavailable,
    /// The data directory was removed under the process (`root_watch`): no write is made
    /// durable where a restart would find it, until the process restarts.
    DirectoryRemoved,
}

/// Why an append cannot be prepared.
#[derive(Debug)]
pub(crate) enum Unprepared {
    /// The stream's stored chain is damaged or gone.
    Damaged(String),
    /// The storage cannot take it now (an I/O error such as running out of descriptors).
    Unavailable(std::io::Error),
}

impl From<ReadError> for Unprepared {
    fn from(error: ReadError) -> Unprepared {
        match error {
            ReadError::Storage => Unprepared::Unavailable(std::io::Error::other(error.to_string())),
            ReadError::Damaged | ReadError::NotBoundary => {
                Unprepared::Damaged(format!("its last records cannot be read: {error}"))
            }
        }
    }
}

/// What one commit writes: a batch's records in order, then the moves its shard asked for
/// (compaction; only of a storage with [`Maintenance`]).
#[derive(Clone, Copy)]
pub(crate) struct Committing<'a> {
    pub records: &'a [Record],
    pub moves: &'a [Move],
    pub time_ms: u64,
}

/// Why a commit failed. Nothing of the batch is acknowledged either way; what differs is
/// whether what earlier commits made durable can still be trusted.
#[derive(Debug)]
pub(crate) enum CommitError {
    /// Writing the batch failed before any sync of it failed (a file system gone read-only,
    /// an I/O error on a write, a file that cannot be created): earlier commits' syncs
    /// succeeded, so what they made durable is untouched. The shard takes no more writes;
    /// the process goes on serving reads.
    Unwritten(std::io::Error),
    /// A sync (or anything that includes one) failed: the kernel may have dropped dirty
    /// pages, so nothing is known to be durable any more. Fatal under the engine's policy.
    Unsynced(std::io::Error),
}

/// A failed write of a batch's records, made before any sync of it failed, on its way to
/// the commit inside an `io::Error` (through the writers' helpers that return those).
#[derive(Debug)]
struct WriteFailed(std::io::Error);

impl std::fmt::Display for WriteFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for WriteFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// Marks `error`, from a write of a batch's records (acid: a run, a seal; the file modes:
/// every file made, written or removed before the batch's syncs), as
/// [`CommitError::Unwritten`] once it reaches the commit (its kind is kept).
pub(crate) fn write_failed(error: std::io::Error) -> std::io::Error {
    std::io::Error::new(error.kind(), WriteFailed(error))
}

/// An error marked by [`write_failed`] is `Unwritten`; anything else is a sync, or includes
/// one.
impl From<std::io::Error> for CommitError {
    fn from(error: std::io::Error) -> CommitError {
        if !error.get_ref().is_some_and(|inner| inner.is::<WriteFailed>()) {
            return CommitError::Unsynced(error);
        }
        let inner = error.into_inner().and_then(|inner| inner.downcast::<WriteFailed>().ok());
        CommitError::Unwritten(inner.expect("checked to be a failed write").0)
    }
}

/// Step 3 of the shard loop, in every mode.
pub(crate) trait Persist: Send {
    /// Writes `batch` and says where each record and each move went (one place each,
    /// records first, in order). On an error nothing of the batch is acknowledged, and the
    /// shard takes no more writes ([`CommitError`] says whether the process may go on).
    fn commit(&mut self, batch: Committing<'_>, places: &mut Vec<Place>) -> Result<(), CommitError>;

    /// Starts sending the last commit's bytes to the device without waiting (acid: its
    /// write-back, and its place in a flush round). A worker calls it for each of its shards
    /// once all have written, so their requests reach the device together; `finish_commit`
    /// does it when it was not called. An error is fatal.
    fn start_flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    /// Returns once the last commit is durable in the mode's sense (a device flush the
    /// commit may share with other shards: `flush`). Called after every commit, before
    /// anything of it is acknowledged; an error is fatal.
    fn finish_commit(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    /// Makes ready what chaining an append to `stream` (called `name`, its last committed
    /// record at `chain_tail`) needs, before the shard accepts it: a refusal here refuses
    /// that append alone.
    fn prepare_append(
        &mut self,
        _stream: StreamId,
        _name: &str,
        _chain_tail: Location,
    ) -> Result<(), Unprepared> {
        Ok(())
    }

    /// Room for one more record of at most `bytes` in this batch, before the shard accepts
    /// the op that makes it; a refusal refuses that op alone.
    fn reserve(&mut self, _bytes: u64, _purpose: Purpose, _now_ms: u64) -> Result<(), NoRoom> {
        Ok(())
    }

    /// Checkpoints and compaction, for a log that has them (acid).
    fn maintenance(&mut self) -> Option<&mut dyn Maintenance> {
        None
    }

    /// Where readers' TTL renewals are saved, for a storage that outlives the process.
    fn renewals(&mut self) -> Option<&mut dyn RenewalStore> {
        None
    }

    /// Whether the data directory was removed under the process, looking now (a commit
    /// that failed then failed for that reason).
    fn directory_removed(&self) -> bool {
        false
    }

    /// Whether a clean stop should hand this storage its streams ([`Persist::stopped_cleanly`]).
    fn saves_clean_ends(&self) -> bool {
        false
    }

    /// At a clean stop, after the last commit: saves where each of `streams`' stored data
    /// ends, so that the next start tells damage from a crash (the file modes:
    /// `files::clean_ends`). Nothing acknowledged depends on it: a failure is logged.
    fn stopped_cleanly(&mut self, _streams: &[crate::meta::StreamSnapshot]) {}
}

/// Memory mode: nothing survives a restart, so there is nothing to write.
pub(crate) struct MemoryPersist;

impl Persist for MemoryPersist {
    fn commit(&mut self, batch: Committing<'_>, places: &mut Vec<Place>) -> Result<(), CommitError> {
        debug_assert!(batch.moves.is_empty(), "memory is never compacted");
        places.extend(batch.records.iter().map(|_| Place::default()));
        Ok(())
    }
}

/// Which stream a log read is for: its id and name (the file modes find its file by them),
/// where its own records start (a fork's after its inherited bytes), its published tail
/// record (location and chain index) and offset, where the read stops, and its framing.
#[derive(Clone, Debug)]
pub(crate) struct LogView {
    pub stream: StreamId,
    pub name: Arc<str>,
    pub start: Offset,
    pub tail_location: Location,
    pub tail_n: ChainIndex,
    /// The published tail (where the tail record ends).
    pub tail_end: Offset,
    /// Where the read stops: the published tail, or a boundary before it.
    pub until: Offset,
    pub json: bool,
}

impl LogView {
    /// A read of this view from `source`.
    pub(crate) fn read<'a, S: RecordSource>(&self, source: &'a S) -> LogRead<'a, S> {
        LogRead {
            source,
            stream: self.stream,
            start: self.start,
            tail_location: self.tail_location,
            tail_n: self.tail_n,
            tail_end: self.tail_end,
            until: self.until,
            json: self.json,
        }
    }
}

/// Reading streams whose bytes live in a log of chained records.
pub(crate) trait LogStore: Send + Sync {
    fn chunk(&self, view: LogView, from: Offset, bytes_max: usize) -> Result<Chunk, ReadError>;
    fn messages(&self, view: LogView, from: Offset, bytes_max: usize) -> Result<Vec<Message>, ReadError>;
}
