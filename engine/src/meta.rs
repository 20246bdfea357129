//! What is known of a stream besides its bytes, in every layer: its configuration
//! ([`StreamConfig`]), its durable state ([`StreamSnapshot`]: what recovery rebuilds and a
//! checkpoint stores), damage found in it ([`StreamDamage`]) and, for a fork, where its
//! inherited bytes come from ([`ForkRef`]).
//!
//! Requests carry a configuration, storage rebuilds and saves snapshots, shards install
//! them: so this module depends on none of those, only on the leaf types.

use std::sync::Arc;

use crate::content_type::ContentType;
use crate::ids::{ChainIndex, Location, StreamId};
use crate::offset::Offset;
use crate::producer::ProducerState;

/// What a stream is created with; never changes afterwards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamConfig {
    pub content_type: ContentType,
    /// Sliding time-to-live: the stream expires this long after its last read or append.
    pub ttl_secs: Option<u64>,
    /// Absolute expiry, in milliseconds since the Unix epoch.
    pub expires_at_ms: Option<i64>,
}

impl StreamConfig {
    /// Whether a create with `other` is the same create (content type, TTL and expiry).
    pub fn same_as(&self, other: &StreamConfig) -> bool {
        self.content_type.matches(&other.content_type)
            && self.ttl_secs == other.ttl_secs
            && self.expires_at_ms == other.expires_at_ms
    }
}

/// Damage found in a stream's stored bytes (disk modes): where its intact data ends as far
/// as known, and why. A damaged stream is read up to the damage and refuses writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamDamage {
    pub at: Offset,
    pub reason: Box<str>,
}

/// What a fork was created from, as the client named it (for idempotent re-creation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForkOrigin {
    /// The source stream's name.
    pub source: Box<str>,
    /// The source offset asked for (the source's tail when omitted).
    pub offset: Offset,
    /// Units past `offset`: messages in JSON mode, bytes otherwise (0: none).
    pub sub_offset: u64,
}

/// A fork's durable reference to its source's immutable prefix: which incarnation of the
/// source, and where inheritance ends. Its create record carries it; recovery links the
/// fork to its source again by it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForkRef {
    pub origin: ForkOrigin,
    /// The source incarnation (its shard is the one its name hashes to).
    pub source_id: StreamId,
    /// Whole source messages before this offset are inherited.
    pub until: Offset,
    /// Bytes of the source's message at `until` inherited too (binary sub-offsets).
    pub partial_bytes: u64,
}

impl ForkRef {
    /// The offset after the inherited bytes: where the fork's own messages begin.
    pub fn start(&self) -> Offset {
        match self.partial_bytes {
            0 => self.until,
            bytes => self.until.advance(1, bytes),
        }
    }

    /// Whether a decoded reference can be one the engine made: inheritance ends at or after
    /// the offset asked for, and its start is an offset (what decoders check).
    pub fn is_consistent(&self) -> bool {
        let (asked, until) = (self.origin.offset, self.until);
        let whole = asked.messages <= until.messages && asked.bytes <= until.bytes;
        let fits = until.messages < crate::offset::MESSAGES_MAX
            && until.bytes.checked_add(self.partial_bytes).is_some();
        whole && fits
    }
}

/// A stream's durable state: what recovery rebuilds and a checkpoint stores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamSnapshot {
    pub id: StreamId,
    pub name: Arc<str>,
    pub config: StreamConfig,
    pub last_access_ms: u64,
    pub tail: Offset,
    pub closed: bool,
    pub stream_seq: Option<Box<str>>,
    pub producers: Vec<(Box<str>, ProducerState)>,
    /// Location of the stream's last record (disk modes).
    pub chain_tail: Location,
    /// Index of that record in the stream's chain.
    pub chain_n: ChainIndex,
    /// Producer tag and `Stream-Seq` bytes its appends carried (see `limits::tag_bytes`).
    pub tag_bytes: u64,
    /// Damage found in its stored bytes, if any.
    pub damage: Option<StreamDamage>,
    /// Where a fork's inherited bytes come from (`None`: all its bytes are its own).
    pub fork: Option<ForkRef>,
    /// Soft-deleted: gone for clients, kept for the forks that still read it.
    pub deleted: bool,
}

#[cfg(test)]
impl StreamSnapshot {
    /// An empty, open stream named `name` with id `id` and a 10 s TTL.
    pub fn for_tests(name: &str, id: StreamId) -> StreamSnapshot {
        StreamSnapshot {
            id,
            name: name.into(),
            config: StreamConfig {
                content_type: ContentType::default_type(),
                ttl_secs: Some(10),
                expires_at_ms: None,
            },
            last_access_ms: 0,
            tail: Offset::ZERO,
            closed: false,
            stream_seq: None,
            producers: Vec::new(),
            chain_tail: Location::from_raw(0),
            chain_n: ChainIndex::CREATE,
            tag_bytes: 0,
            damage: None,
            fork: None,
            deleted: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_compare_by_content_type_key_ttl_and_expiry() {
        let json = |ttl| StreamConfig {
            content_type: ContentType::parse("application/json").unwrap(),
            ttl_secs: ttl,
            expires_at_ms: None,
        };
        let mut upper = json(Some(5));
        upper.content_type = ContentType::parse("APPLICATION/JSON; charset=utf-8").unwrap();
        assert!(json(Some(5)).same_as(&upper));
        assert!(!json(Some(5)).same_as(&json(Some(6))));
        let plain =
            StreamConfig { content_type: ContentType::default_type(), ttl_secs: None, expires_at_ms: None };
        assert!(!json(None).same_as(&plain));
    }
}
