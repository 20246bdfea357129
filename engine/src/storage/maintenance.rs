//! The optional side of a storage: the upkeep of a log that is checkpointed and compacted
//! (acid), as its shard drives it, and the mode-neutral types that pass between them.
//!
//! A shard asks [`Persist::maintenance`](super::Persist::maintenance) once per batch: after a
//! commit it hands over a checkpoint when one is due and takes the streams compaction wants
//! moved ([`Resident`]); it moves one per batch by asking the commit for a [`Move`] after
//! the batch's records. Storages without a log to keep (memory, the file modes) have none.

use std::sync::Arc;

use crate::ids::{ChainIndex, Location, StreamId};
use crate::meta::StreamSnapshot;

/// What a log that is checkpointed and compacted asks of its shard.
pub(crate) trait Maintenance {
    /// Whether the shard should hand over a checkpoint after this batch.
    fn checkpoint_due(&self) -> bool;

    /// Takes a checkpoint of the shard's state (the state after every committed record).
    fn checkpoint(&mut self, checkpoint: ShardCheckpoint);

    /// Streams to move out of a mostly-dead part of the log, when there are; `idle` says the
    /// shard has nothing queued (a good time to look for more).
    fn compaction_candidates(&mut self, idle: bool) -> Vec<Resident>;

    /// Asks for `upkeep` now rather than when it falls due.
    fn request(&mut self, upkeep: Upkeep);

    /// Between batches (nothing planned or in flight): seals the active part of the log
    /// when that was asked for. An error is a failed commit's.
    fn seal_when_asked(&mut self, time_ms: u64) -> Result<(), super::CommitError>;
}

/// Upkeep of a log asked for out of turn ([`Engine::request_upkeep`](crate::Engine::request_upkeep)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upkeep {
    /// A checkpoint after the shard's next batch.
    Checkpoint,
    /// A compaction of the sealed segment with the fewest live bytes, whatever its live
    /// share (its streams move to the head of the log once the shard idles).
    Compact,
    /// The active segment sealed after the shard's next batch, and the next one started
    /// (unless nothing was written in it, or no next one can be prepared).
    Seal,
}

/// A shard's state, handed to its log as a checkpoint.
pub(crate) struct ShardCheckpoint {
    pub streams: Vec<StreamSnapshot>,
    pub stream_id_next: StreamId,
    pub time_ms: u64,
    pub kind: CheckpointKind,
}

/// When a checkpoint is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CheckpointKind {
    /// While the shard runs: written in the background.
    Routine,
    /// At a clean stop: marked clean (nothing follows it in the log), and durable before
    /// the call returns.
    Clean,
}

/// A stream with a record in a part of the log compaction wants emptied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resident {
    pub stream: StreamId,
    pub name: Arc<str>,
    /// One of its records there (location), and that record's index in its chain.
    pub witness: Location,
    pub witness_n: ChainIndex,
}

/// A stream's records to copy to the head of the log, as a new chain replacing the one
/// ending at `chain_tail`; nothing about the stream changes. Skipped when record `witness_n`
/// of the chain is not at `witness` any more (the stream was moved since it was found).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Move {
    pub stream: StreamId,
    pub chain_tail: Location,
    pub witness: Location,
    pub witness_n: ChainIndex,
}
