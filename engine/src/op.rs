//! Mutations: what the front asks a shard to do and what the shard answers.
//!
//! Every create, append, close and delete travels to the owning shard as one [`Op`] over a
//! bounded channel and is answered through a oneshot once the batch holding it is committed.
//! The request types are validated before they are sent (names, content types, JSON framing,
//! producer header syntax); the shard decides everything that depends on the stream's state.

use tokio::sync::oneshot;

use crate::content_type::ContentType;
use crate::ids::StreamId;
use crate::meta::StreamConfig;
use crate::name::StreamName;
use crate::offset::Offset;
use crate::payload::Payload;
use crate::producer::ProducerTag;
use crate::stream::fork::ForkBase;

/// Create a stream (PUT).
#[derive(Debug)]
pub struct CreateRequest {
    pub name: StreamName,
    pub config: StreamConfig,
    /// Initial messages (`None` or empty: none).
    pub initial: Option<Payload>,
    /// Create the stream already closed.
    pub closed: bool,
}

/// Create a fork (PUT with `Stream-Forked-From`): a stream that starts with the source's
/// messages up to the fork point, then its own.
#[derive(Debug)]
pub struct ForkRequest {
    /// The fork itself. Its content type must match the source's; its TTL and expiry are
    /// the source's when `inherit_expiry` (the request named neither).
    pub create: CreateRequest,
    pub inherit_expiry: bool,
    pub source: StreamName,
    /// The source offset to fork at (`None`: the source's tail).
    pub offset: Option<Offset>,
    /// Units past `offset` to inherit too: messages in JSON mode, bytes otherwise.
    pub sub_offset: u64,
}

/// Why a fork point is refused (400).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForkPointError {
    /// The fork offset is past the source's tail.
    PastTail,
    /// The fork offset is not a message boundary of the source.
    NotBoundary,
    /// The sub-offset names a position past the source's next message (bytes) or past its
    /// tail (JSON messages).
    SubOffsetPastData,
    /// The source is already a fork this many levels deep.
    TooDeep,
}

/// How a create went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateOutcome {
    /// False when the stream already existed with the same configuration.
    pub created: bool,
    pub tail: Offset,
    pub closed: bool,
    /// The stream's content type, as spelled when it was created.
    pub content_type: ContentType,
}

/// Append to and/or close a stream (POST).
#[derive(Debug)]
pub struct AppendRequest {
    pub name: StreamName,
    /// The request's content type; required when the payload is not empty.
    pub content_type: Option<ContentType>,
    /// The messages to store (`None` or empty: a close-only request).
    pub payload: Option<Payload>,
    /// Close the stream (after storing the payload, atomically).
    pub close: bool,
    pub producer: Option<ProducerTag>,
    /// Application-level writer sequence (`Stream-Seq`), compared bytewise.
    pub stream_seq: Option<Box<str>>,
}

/// What an accepted append did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendKind {
    /// New messages were stored (and the stream closed if asked).
    Stored,
    /// Nothing to store; the stream is closed (now or already).
    Closed,
    /// A producer retry of something already stored; nothing changed.
    Duplicate,
}

/// How an accepted append went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendOutcome {
    pub kind: AppendKind,
    pub tail: Offset,
    pub closed: bool,
    /// The producer's epoch and highest accepted seq (producer requests only).
    pub producer: Option<(u64, u64)>,
}

/// Why a mutation was refused. Nothing was stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpError {
    /// No such stream (or it expired).
    NotFound,
    /// Nothing to store and no close asked for.
    EmptyAppend,
    /// PUT of an existing stream with another configuration or closed state.
    ConfigMismatch,
    /// The request's content type differs from the stream's.
    ContentTypeMismatch,
    /// The stream is closed; appends are refused.
    StreamClosed { tail: Offset },
    /// The producer's epoch is older than the current one.
    StaleEpoch { current: u64 },
    /// A new producer epoch must start at seq 0.
    EpochSeqNotZero,
    /// A producer request is missing before this one.
    SeqGap { expected: u64, received: u64 },
    /// `Stream-Seq` did not increase.
    StreamSeqRegression,
    /// The stream would pass its byte limit.
    StreamFull,
    /// One append (or a create's initial data) carries more than the largest append.
    AppendTooLarge { bytes_max: u64 },
    /// All streams together would pass the byte limit.
    MemoryFull,
    /// The stream already tracks the most producers it may.
    TooManyProducers,
    /// The shard's queue is full; try again shortly.
    Overloaded,
    /// The engine is stopping.
    ShuttingDown,
    /// The stream's stored data is damaged from `at` on: it is read up to there, and takes
    /// no more writes (delete it to reuse the name).
    StreamDamaged { at: Offset },
    /// The storage cannot take this now (out of file descriptors, say); try again shortly.
    Unavailable,
    /// The disk is full: writes are refused until space comes back (reads go on).
    InsufficientStorage,
    /// The data directory was removed under the server: writes are refused until it
    /// restarts (reads of what it holds go on).
    DirectoryRemoved,
    /// The stream's shard could not write its log (a file system gone read-only, an I/O
    /// error): the request was not acknowledged (as after a crash, a restart may or may not
    /// find it), and the shard's streams take no more writes until a restart (reads of what
    /// they hold go on).
    StorageFailed,
    /// As many streams exist as may (`DS_LIMITS__MAX_STREAMS`).
    TooManyStreams,
    /// The stream was deleted while forks still read its data (410 Gone).
    Gone,
    /// The name belongs to a deleted stream whose forks still read its data (PUT: 409).
    NameHeld,
    /// A fork's source was deleted (its forks still read it; no new ones).
    SourceDeleted,
    /// A fork point the source cannot give.
    ForkPoint(ForkPointError),
}

impl std::fmt::Display for OpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpError::NotFound => f.write_str("stream not found"),
            OpError::EmptyAppend => f.write_str("an append needs a body unless it closes the stream"),
            OpError::ConfigMismatch => f.write_str("stream exists with a different configuration"),
            OpError::ContentTypeMismatch => f.write_str("content type does not match the stream's"),
            OpError::StreamClosed { .. } => f.write_str("stream is closed"),
            OpError::StaleEpoch { current } => {
                write!(f, "producer epoch is stale (current epoch {current})")
            }
            OpError::EpochSeqNotZero => f.write_str("a new producer epoch must start at seq 0"),
            OpError::SeqGap { expected, received } => {
                write!(f, "producer sequence gap: expected {expected}, received {received}")
            }
            OpError::StreamSeqRegression => f.write_str("Stream-Seq must increase"),
            OpError::StreamFull => f.write_str("stream would exceed its byte limit"),
            OpError::AppendTooLarge { bytes_max } => {
                write!(f, "one append may carry at most {bytes_max} bytes")
            }
            OpError::MemoryFull => f.write_str("server would exceed its stored byte limit"),
            OpError::TooManyProducers => f.write_str("stream tracks too many producers"),
            OpError::Overloaded => f.write_str("shard queue is full"),
            OpError::ShuttingDown => f.write_str("server is shutting down"),
            OpError::StreamDamaged { at } => write!(
                f,
                "the stream's stored data is damaged at offset {at}; it can be read up to there and \
                 takes no more writes (delete it to reuse the name)"
            ),
            OpError::Unavailable => f.write_str("storage is temporarily unavailable; try again shortly"),
            OpError::InsufficientStorage => {
                f.write_str("the disk is full: writes are refused until space comes back (reads go on)")
            }
            OpError::DirectoryRemoved => f.write_str(
                "the server's data directory was removed (or moved) under it: writes are refused \
                 until it restarts (reads go on)",
            ),
            OpError::StorageFailed => f.write_str(
                "the server could not write this stream's log (see its log): the request was \
                 not acknowledged (as after a crash, a restart may or may not find it), and the \
                 stream takes no more writes until the server restarts (reads go on)",
            ),
            OpError::TooManyStreams => f.write_str("the server holds as many streams as it may"),
            OpError::Gone => f.write_str("the stream was deleted; its forks still read its data"),
            OpError::NameHeld => {
                f.write_str("the name belongs to a deleted stream whose forks still read its data")
            }
            OpError::SourceDeleted => f.write_str("the fork's source was deleted"),
            OpError::ForkPoint(ForkPointError::PastTail) => {
                f.write_str("the fork offset is past the source's tail")
            }
            OpError::ForkPoint(ForkPointError::NotBoundary) => {
                f.write_str("the fork offset is not a message boundary of the source")
            }
            OpError::ForkPoint(ForkPointError::SubOffsetPastData) => {
                f.write_str("the fork sub-offset is past the source's data")
            }
            OpError::ForkPoint(ForkPointError::TooDeep) => write!(
                f,
                "the source is a fork {} levels deep, the most a fork chain may be",
                crate::stream::fork::FORK_DEPTH_MAX
            ),
        }
    }
}

impl std::error::Error for OpError {}

pub(crate) type Reply<T> = oneshot::Sender<Result<T, OpError>>;

/// One message to a shard.
pub(crate) enum Op {
    /// Create a stream, a fork when it carries a base.
    Create(CreateRequest, Option<ForkBase>, Reply<CreateOutcome>),
    Append(AppendRequest, Reply<AppendOutcome>),
    Delete(StreamName, Reply<()>),
    /// A reader found stream `id` expired: remove it if it still is.
    Expire {
        name: std::sync::Arc<str>,
        id: StreamId,
    },
    /// Upkeep of the shard's log asked for out of turn.
    Upkeep(crate::storage::maintenance::Upkeep),
    /// Finish the current batch and stop the shard.
    Stop,
}
