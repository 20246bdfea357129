//! ds-engine: the storage engine of the ds Durable Streams server. No HTTP lives here.
//!
//! The front door is this file: everything a server needs is re-exported here, everything
//! an offline tool needs is in [`inspect`], and what tests need besides (the simulated disk,
//! the charges) is in `testing`, built only with the `testing` feature. Every module is
//! private.
//!
//! # Layout
//!
//! Bottom up; a module uses only those above it in this list.
//!
//! - Leaves: `offset`, `name`, `content_type`, `payload` (JSON framing), `producer`, `time`,
//!   `scheduling` (shard threads wait for ops under `SCHED_BATCH`, for flushes under the normal
//!   policy; reads offer the core now and then),
//!   `histogram`, `binary` (the little-endian encoding of state files), `limits` (the byte
//!   budget and what each thing is charged).
//! - `meta`: what is known of a stream besides its bytes, in every layer: its configuration,
//!   its durable state (`StreamSnapshot`), damage found in it.
//! - `storage`: everything about where bytes live, one folder per mode under one roof:
//!   `memory/`, `wal/` (acid: a write-ahead log per shard in preallocated mmap'd segments,
//!   checkpoints, compaction, recovery), `files/` (file-durable and file-fast: a file per
//!   stream). The disk modes share `record/` (the codec: header and payload crc32s),
//!   `chain/` (each stream's records linked by skip links, and reading along them), `replay`
//!   (how records rebuild a stream's state), `vfs/` (every file operation, real or
//!   simulated). `storage/mod.rs` holds the two interfaces the shards use: `Persist` (commit
//!   a batch) and `LogStore` (read stored bytes).
//! - `stream`: one stream shared by its shard and its readers (writer state, published
//!   view), its reader's API (`stream::handle`), tail-advance wakes (`stream::live`),
//!   recent catch-up answers kept for the next reader (`stream::kept_answers`) and forks
//!   (`stream::fork`: a stream that reads its first bytes from another's prefix;
//!   `stream::cascade`: what goes up a chain of forks when one goes).
//! - `op`: the requests, outcomes and errors of mutations, and the messages shards take.
//! - `fork_point`: where a new fork starts, checked against its source.
//! - `shard`: the single writer of its streams: batch → apply → commit → publish; shards
//!   run on worker threads (`shard::worker`, two per CPU at most), each turn letting all of
//!   a worker's shards write before any waits for the flush. `shard::apply` holds every
//!   rule about creates and appends, `shard::removal` those about deletes, expiry and
//!   compaction's moves; `shard::install` puts recovered streams in every shard at start,
//!   forks linked to their sources.
//! - `config`, `engine`: the [`Engine`] handle — validates the configuration, opens the
//!   storage, starts the shards, routes a name to its shard with xxh3.
//! - [`inspect`]: read-only access to a data directory for offline tools (`ds-tool`).
//! - `fuzz` (the `testing` feature only): what the fuzz targets run on arbitrary bytes, one
//!   decoder each, and what each may promise of what it accepts.
//! - `properties` (tests only): property tests of every decoder of stored bytes and every
//!   parser of client input.
//!
//! # How a write flows
//!
//! The front validates a request into an [`AppendRequest`] (payload framed, headers parsed)
//! and calls [`Engine::append`]. The op crosses a bounded channel to its shard, which drains
//! a batch, applies each op against the writer state (dedup, fencing, limits), writes the
//! bytes, commits the batch's records, then publishes the new tails, replies, and wakes each
//! touched stream's live readers once. In acid the commit step is one write at the end of
//! the shard's WAL and a device flush that covers it, shared by the shards of one ext4 or
//! XFS file system (`storage::flush`); in file-durable an fdatasync per touched file.
//! Nothing is replied or published before the covering flush returns.
//!
//! # How a read flows
//!
//! [`Engine::open`] finds the stream in its shard's published directory; the
//! [`StreamHandle`] reads the published view under the stream's read lock and returns
//! zero-copy `Bytes` of whole messages, checked to start at a message boundary and to have
//! passed their checks (in the disk modes, a recent answer to the same read is handed
//! again while it is still what a read gives: `stream::kept_answers`).

mod binary;
mod config;
mod content_type;
mod engine;
mod fork_point;
#[cfg(feature = "testing")]
mod fuzz;
mod histogram;
mod ids;
pub mod inspect;
mod limits;
mod meta;
mod name;
mod offset;
mod op;
mod payload;
mod producer;
#[cfg(test)]
mod properties;
mod scheduling;
mod shard;
mod storage;
mod stream;
#[cfg(feature = "testing")]
pub mod testing;
mod time;

pub use config::{
    segment_bytes_for, EngineConfig, EngineError, IoErrorPolicy, Threading, SEGMENT_OVERHEAD_BYTES,
};
pub use content_type::ContentType;
pub use engine::{Engine, EngineStats, ShardStats};
pub use histogram::HistogramSnapshot;
pub use ids::{ChainIndex, Location, Lsn, StreamId};
pub use limits::{Limits, APPEND_BYTES_MAX_DEFAULT, STREAM_BYTES_MAX_DEFAULT, STREAM_SEQ_BYTES_MAX};
pub use meta::{ForkOrigin, ForkRef, StreamConfig, StreamDamage};
pub use name::StreamName;
pub use offset::{Offset, StartAt};
pub use op::{
    AppendKind, AppendOutcome, AppendRequest, CreateOutcome, CreateRequest, ForkPointError, ForkRequest,
    OpError,
};
pub use payload::Payload;
pub use producer::{ProducerTag, PRODUCER_ID_BYTES_MAX, PRODUCER_NUMBER_MAX};
pub use shard::wake_batch;
pub use storage::chunk::{json_array, Chunk, Message, ReadError};
pub use storage::flush::FlushStats;
pub use storage::maintenance::Upkeep;
pub use storage::renewals::SAVE_INTERVAL_MS as RENEWALS_SAVE_INTERVAL_MS;
pub use storage::wal::zero_waits::ZeroWaitStats;
pub use storage::{Damage, RecoveryReport, StorageMode};
pub use stream::fork::{ForkBase, FORK_DEPTH_MAX};
pub use stream::handle::{MessagesResult, ReadResult, StreamHandle};
pub use stream::live::{LiveTail, Subscription};
pub use time::{format_rfc3339_ms, parse_rfc3339_ms, Clock};
