//! Log records: one per accepted mutation, the unit that is made durable.
//!
//! The shard turns every accepted op into exactly one record, so each operation is atomic on
//! its own: a create carries its initial messages and closed flag, an append carries its
//! producer tag, its `Stream-Seq` and its optional close. Producer state travels inside the
//! record that stores the data it guards — a crash can never keep one and lose the other.
//! Memory mode commits records by dropping them; the disk modes encode and write them.

pub(crate) mod codec;
pub(crate) mod encode;
pub(crate) mod scan;

use std::sync::Arc;

use crate::ids::{Location, StreamId};
use crate::meta::{ForkRef, StreamConfig};
use crate::offset::Offset;
use crate::payload::Payload;
use crate::producer::ProducerTag;

/// One accepted mutation.
#[derive(Debug)]
pub(crate) enum Record {
    /// A stream came to be, with its configuration and any initial messages (a fork's after
    /// the bytes it inherits through `fork`).
    Create {
        stream: StreamId,
        name: Arc<str>,
        config: StreamConfig,
        initial: Option<Payload>,
        closed: bool,
        fork: Option<ForkRef>,
    },
    /// Messages were stored at `offset` (and maybe the stream closed), by `producer` if tagged.
    Append {
        stream: StreamId,
        /// The stream's name (the file modes find its file by it).
        name: Arc<str>,
        offset: Offset,
        payload: Option<Payload>,
        producer: Option<ProducerTag>,
        stream_seq: Option<Box<str>>,
        close: bool,
        /// Location of the stream's last committed record (disk modes chain to it).
        chain_tail: Location,
    },
    /// A stream and all its data are gone (deleted by a client or expired); or, `soft`, it
    /// is gone for clients but stays, bytes and name, while forks read it.
    Delete { stream: StreamId, name: Arc<str>, expired: bool, soft: bool, chain_tail: Location },
}
