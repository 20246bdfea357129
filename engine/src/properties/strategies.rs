//! Generators of what the decoders decode: records, stream snapshots, checkpoints.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use proptest::prelude::*;
use proptest::sample::Index;

use crate::content_type::ContentType;
use crate::ids::{ChainIndex, Location, Lsn, StreamId};
use crate::meta::{ForkOrigin, ForkRef, StreamConfig, StreamDamage, StreamSnapshot};
use crate::offset::Offset;
use crate::producer::{ProducerState, ProducerTag};
use crate::storage::chain::jump_count;
use crate::storage::chain::Chain;
use crate::storage::record::codec::{
    encode_meta, flags, padding, payload_crc, CreateMeta, Header, Kind, Meta, MetaRef, JUMPS_MAX,
};
use crate::storage::wal::checkpoint::Checkpoint;
use crate::storage::wal::ledger::LedgerState;

/// Text of 1 to `max` arbitrary characters.
pub(super) fn text(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 1..=max).prop_map(String::from_iter)
}

pub(super) fn content_type() -> impl Strategy<Value = ContentType> {
    let spelled = ["text/plain", "application/json", "application/octet-stream", "text/plain; charset=utf-8"];
    prop::sample::select(spelled.to_vec()).prop_map(|t| ContentType::parse(t).expect("a valid type"))
}

pub(super) fn config() -> impl Strategy<Value = StreamConfig> {
    // u64::MAX and i64::MIN stand for "none" in a create record.
    let ttl = prop::option::of(0..u64::MAX);
    let expires = prop::option::of(i64::MIN + 1..=i64::MAX);
    (content_type(), ttl, expires).prop_map(|(content_type, ttl_secs, expires_at_ms)| StreamConfig {
        content_type,
        ttl_secs,
        expires_at_ms,
    })
}

pub(super) fn producer_tag() -> impl Strategy<Value = ProducerTag> {
    (text(64), any::<u64>(), any::<u64>()).prop_map(|(id, epoch, seq)| ProducerTag {
        id: id.into(),
        epoch,
        seq,
    })
}

/// Everything one record holds, of any kind, consistent as a writer makes it.
#[derive(Clone, Debug)]
pub(super) struct RecordParts {
    pub header: Header,
    pub meta: Meta,
    pub data: Vec<u8>,
}

pub(super) fn record_parts() -> impl Strategy<Value = RecordParts> {
    let numbers = (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>(), 1u32..1000);
    let chain = (1..u64::MAX, prop::collection::vec(any::<u64>(), JUMPS_MAX));
    let create = (text(40), config(), prop::option::of(fork_ref()));
    let tags = (prop::option::of(producer_tag()), prop::option::of(text(64)));
    let data = prop::collection::vec(any::<u8>(), 0..200);
    (0usize..4, numbers, chain, create, tags, data, any::<u8>()).prop_map(
        |(kind, numbers, (n, jumps), (name, config, fork), (producer, stream_seq), data, bits)| {
            let (lsn, stream, messages_before, bytes_before, time_ms, messages) = numbers;
            let kind = [Kind::Create, Kind::Append, Kind::Delete, Kind::Seal][kind];
            let mut meta = Meta::default();
            let mut record_flags = 0;
            match kind {
                Kind::Create => {
                    meta.chain = Some(Chain { n: ChainIndex::CREATE, jumps: Vec::new() });
                    record_flags = bits & (flags::CLOSE | flags::JSON);
                    record_flags |= if fork.is_some() { flags::FORK } else { 0 };
                    meta.create = Some(CreateMeta { name: name.into(), config, fork });
                }
                Kind::Append => {
                    let n = ChainIndex::from_raw(n);
                    let jumps = jumps[..jump_count(n)].to_vec();
                    meta.chain =
                        Some(Chain { n, jumps: jumps.into_iter().map(Location::from_raw).collect() });
                    record_flags = bits & (flags::CLOSE | flags::JSON | flags::MOVED);
                    if record_flags & flags::MOVED != 0 {
                        record_flags |= bits & flags::MOVE_END;
                    }
                    record_flags |= if producer.is_some() { flags::PRODUCER } else { 0 };
                    record_flags |= if stream_seq.is_some() { flags::STREAM_SEQ } else { 0 };
                    meta.producer = producer;
                    meta.stream_seq = stream_seq.map(String::into_boxed_str);
                }
                Kind::Delete => record_flags = bits & (flags::EXPIRED | flags::SOFT),
                Kind::Seal => {}
            }
            let data = if matches!(kind, Kind::Create | Kind::Append) { data } else { Vec::new() };
            let header = Header {
                kind,
                flags: record_flags,
                meta_len: 0,
                payload_len: 0,
                payload_crc: 0,
                lsn: Lsn::from_raw(lsn),
                stream: StreamId::from_raw(stream),
                offset: Offset { messages: messages_before, bytes: bytes_before },
                time_ms,
                messages: if data.is_empty() { 0 } else { messages },
            };
            RecordParts { header, meta, data }
        },
    )
}

/// The bytes of a record, and how many of them its checks cover (the rest is padding).
pub(super) fn encode_record(parts: &RecordParts) -> (Vec<u8>, usize) {
    let mut meta = Vec::new();
    if matches!(parts.header.kind, Kind::Create | Kind::Append) {
        let create = parts.meta.create.as_ref().map(|c| (&*c.name, &c.config));
        let meta_ref = MetaRef {
            chain: parts.meta.chain.as_ref(),
            create,
            fork: parts.meta.create.as_ref().and_then(|c| c.fork.as_ref()),
            producer: parts.meta.producer.as_ref(),
            stream_seq: parts.meta.stream_seq.as_deref(),
        };
        encode_meta(parts.header.kind, meta_ref, &mut meta);
    }
    let header = Header {
        meta_len: meta.len() as u16,
        payload_len: (meta.len() + parts.data.len()) as u32,
        payload_crc: payload_crc(&meta, &[&parts.data]),
        ..parts.header
    };
    let mut bytes = header.encode().to_vec();
    bytes.extend_from_slice(&meta);
    bytes.extend_from_slice(&parts.data);
    let covered = bytes.len();
    bytes.extend_from_slice(padding(covered));
    (bytes, covered)
}

pub(super) fn snapshot() -> impl Strategy<Value = StreamSnapshot> {
    let producer = (text(32), any::<u64>(), any::<u64>(), any::<u64>());
    let producers = prop::collection::vec(producer, 0..3);
    let damage = prop::option::of((any::<u64>(), any::<u64>(), text(40)));
    let numbers = (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>());
    let rest = (any::<u64>(), any::<bool>(), prop::option::of(text(32)), any::<bool>());
    let fork = prop::option::of(fork_ref());
    (text(40), config(), numbers, rest, producers, (damage, fork)).prop_map(
        |(name, config, numbers, (id, closed, stream_seq, deleted), producers, (damage, fork))| {
            let (last_access_ms, messages, bytes, chain_tail, chain_n, tag_bytes) = numbers;
            StreamSnapshot {
                id: StreamId::from_raw(id),
                name: Arc::from(name),
                config,
                last_access_ms,
                tail: Offset { messages, bytes },
                closed,
                stream_seq: stream_seq.map(String::into_boxed_str),
                producers: producers
                    .into_iter()
                    .map(|(id, epoch, last_seq, last_used_ms)| {
                        (id.into_boxed_str(), ProducerState { epoch, last_seq, last_used_ms })
                    })
                    .collect(),
                chain_tail: Location::from_raw(chain_tail),
                chain_n: ChainIndex::from_raw(chain_n),
                tag_bytes,
                damage: damage.map(|(messages, bytes, reason)| StreamDamage {
                    at: Offset { messages, bytes },
                    reason: reason.into(),
                }),
                fork,
                deleted,
            }
        },
    )
}

pub(super) fn checkpoint() -> impl Strategy<Value = Checkpoint> {
    let numbers = (any::<u32>(), any::<bool>(), any::<u64>(), any::<u32>(), any::<u64>(), any::<u64>());
    let more = (any::<u64>(), any::<u64>());
    let ledger = (
        prop::collection::btree_map(any::<u32>(), any::<u64>(), 0..4),
        prop::collection::btree_set(any::<u64>(), 0..4),
    );
    let streams = prop::collection::vec(snapshot(), 0..3);
    (numbers, more, ledger, streams).prop_map(|(numbers, more, (live, pending), streams)| {
        let (shard, clean, lsn, resume_ordinal, resume_position, next_lsn) = numbers;
        let (stream_id_next, written_ms) = more;
        let ledger = LedgerState {
            live: BTreeMap::from_iter(live),
            pending: pending.into_iter().map(Location::from_raw).collect::<BTreeSet<_>>(),
        };
        Checkpoint {
            shard,
            clean,
            lsn: Lsn::from_raw(lsn),
            resume_ordinal,
            resume_position,
            next_lsn: Lsn::from_raw(next_lsn),
            stream_id_next: StreamId::from_raw(stream_id_next),
            written_ms,
            ledger,
            streams,
        }
    })
}

/// The index of a flipped byte among `len`, and a mask that changes it.
pub(super) fn flip() -> impl Strategy<Value = (Index, u8)> {
    (any::<Index>(), 1u8..=255)
}

/// A fork reference as the engine makes them: inheritance ends at or after the offset asked
/// for.
pub(super) fn fork_ref() -> impl Strategy<Value = ForkRef> {
    let numbers = (0..1u64 << 50, 0..u64::MAX >> 2, 0..1u64 << 20, 0..1u64 << 20, any::<u64>(), any::<u64>());
    (text(40), numbers, 0..1u64 << 20).prop_map(
        |(source, (messages, bytes, more_messages, more_bytes, sub_offset, id), partial_bytes)| {
            let offset = Offset { messages, bytes };
            ForkRef {
                origin: ForkOrigin { source: source.into(), offset, sub_offset },
                source_id: StreamId::from_raw(id),
                until: offset.advance(more_messages, more_bytes),
                partial_bytes,
            }
        },
    )
}
