//! ds-engine: the storage engine of the ds Durable Streams server. No HTTP lives here.
//!
//! # Layout
//!
//! - [`engine`]: the [`Engine`] handle — starts shards, routes a name to its shard with
//!   xxh3, submits ops, opens read handles.
//! - [`shard`]: one thread per shard, the single writer of its streams: batch → apply →
//!   commit → publish. `shard::apply` holds every rule about mutations. [`wake_batch`]
//!   lets a front that shares one CPU with the shards ring each shard once per turn.
//! - [`stream`]: a stream's config, writer state and published view; `stream::handle` is the
//!   reader's API (status, reads, live subscriptions).
//! - [`memory`]: memory mode's bytes (append-only blocks, message boundaries).
//! - [`record`]: what a batch commits — one record per accepted op — and its codec (header
//!   and payload crc32s) shared by every disk mode.
//! - `storage`: how each mode commits a batch (`Persist`) and how readers reach stored bytes
//!   (`LogStore`); opening a data directory (lock, manifest, recovery).
//! - [`wal`]: acid — a write-ahead log per shard, preallocated mmap'd segments, group
//!   commit, checkpoints, recovery. [`files`]: file-durable and file-fast — a file per
//!   stream. Both chain each stream's records with [`chain`] (skip links, O(1) memory per
//!   stream) and read them with [`logread`].
//! - [`vfs`]: every file operation of the disk modes, real or simulated (crash tests).
//! - [`inspect`]: read-only access to a data directory for offline tools (`ds-tool`).
//! - [`live`]: tail-advance notifications for long-poll and SSE readers.
//! - Leaves: [`offset`], [`name`], [`content_type`], [`payload`] (JSON framing), [`producer`],
//!   [`limits`], [`time`], [`read`], [`op`], [`config`], [`histogram`] (statistics).
//! - `properties` (tests only): property tests of every decoder of stored bytes and every
//!   parser of client input.
//!
//! # How a write flows
//!
//! The front validates a request into an [`op::AppendRequest`] (payload framed, headers
//! parsed) and calls [`Engine::append`]. The op crosses a bounded channel to its shard, which
//! drains a batch, applies each op against the writer state (dedup, fencing, limits), writes
//! the bytes, commits the batch's records, then publishes the new tails, replies, and wakes
//! each touched stream's live readers once. In the disk modes the commit step is one write
//! and one fdatasync per batch (acid: at the end of the shard's WAL; file-durable: per
//! touched file), and nothing is replied or published before it returns.
//!
//! # How a read flows
//!
//! [`Engine::open`] finds the stream in its shard's published directory; the
//! [`StreamHandle`] reads the published view under the stream's read lock and returns
//! zero-copy `Bytes` of whole messages, checked to start at a message boundary.

pub mod binary;
pub mod chain;
pub mod config;
pub mod content_type;
pub mod engine;
pub mod files;
pub mod histogram;
pub mod inspect;
pub mod limits;
pub mod live;
pub mod logread;
pub mod memory;
pub mod name;
pub mod offset;
pub mod op;
pub mod payload;
pub mod producer;
#[cfg(test)]
mod properties;
pub mod read;
pub mod record;
pub(crate) mod shard;
pub(crate) mod storage;
pub mod stream;
pub mod time;
pub mod vfs;
pub mod wal;

pub use config::{EngineConfig, EngineError, StorageMode};
pub use content_type::ContentType;
pub use engine::{Engine, EngineStats, ShardStats};
pub use name::StreamName;
pub use offset::{Offset, StartAt};
pub use op::{AppendKind, AppendOutcome, AppendRequest, CreateOutcome, CreateRequest, OpError};
pub use payload::Payload;
pub use producer::ProducerTag;
pub use shard::wake_batch;
pub use storage::renewals::SAVE_INTERVAL_MS as RENEWALS_SAVE_INTERVAL_MS;
pub use storage::{Damage, RecoveryReport};
pub use stream::handle::{MessagesResult, ReadResult, StreamHandle};
pub use stream::{StreamConfig, StreamDamage};
