//! Checkpoints: a shard's state at an LSN, so recovery replays only what came after.
//!
//! ```text
//! magic "DSK1", version, shard, clean flag (written at a clean shutdown),
//! lsn (every record up to it is reflected), resume ordinal and position (where the next
//! record after it starts), next LSN, next stream id, time written,
//! ledger: live bytes of each segment, and deleted chains not yet subtracted,
//! streams: id, name, config, last access, tail, closed, Stream-Seq, chain tail, producers,
//!   damage found in the stream (version 2 on: where its intact data ends, and why),
//!   producer tag and Stream-Seq bytes its appends carried (version 3 on, for its charge),
//!   soft-deleted flag and a fork's reference to its source (version 4 on),
//! crc32 of everything before it
//! ```
//!
//! A checkpoint replaces the previous one atomically (written aside, synced, renamed, the
//! directory synced), so there is always one complete checkpoint or none. It is written by the
//! housekeeper thread from bytes the shard encoded, so the shard never waits for it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::binary::{DecodeFailure, Decoder, Encoder};
use crate::content_type::ContentType;
use crate::ids::{ChainIndex, Location, Lsn, StreamId};
use crate::meta::{ForkOrigin, ForkRef, StreamConfig, StreamDamage, StreamSnapshot};
use crate::offset::Offset;
use crate::producer::ProducerState;
use crate::storage::wal::ledger::LedgerState;

const MAGIC: u32 = u32::from_le_bytes(*b"DSK1");
/// The version written; versions 1 (without stream damage), 2 (without tag bytes) and 3
/// (without forks and soft deletes) are still read.
const VERSION: u32 = 4;
/// File name of a shard's checkpoint.
pub(crate) const CHECKPOINT_NAME: &str = "checkpoint";
/// The previous checkpoint, kept as a fallback.
pub(crate) const PREVIOUS_CHECKPOINT_NAME: &str = "checkpoint.previous";

/// A shard's state at `lsn`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Checkpoint {
    pub shard: u32,
    /// Written by a clean shutdown (nothing follows in the log).
    pub clean: bool,
    pub lsn: Lsn,
    pub resume_ordinal: u32,
    pub resume_position: u64,
    pub next_lsn: Lsn,
    pub stream_id_next: StreamId,
    pub written_ms: u64,
    /// Live bytes per segment ordinal, and deleted chains not yet subtracted.
    pub ledger: LedgerState,
    pub streams: Vec<StreamSnapshot>,
}

pub(crate) fn checkpoint_path(shard_dir: &Path) -> PathBuf {
    shard_dir.join(CHECKPOINT_NAME)
}

impl Checkpoint {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Encoder::default();
        out.u32(MAGIC).u32(VERSION).u32(self.shard).u8(u8::from(self.clean));
        out.u64(self.lsn.raw()).u32(self.resume_ordinal).u64(self.resume_position);
        out.u64(self.next_lsn.raw()).u64(self.stream_id_next.raw()).u64(self.written_ms);
        out.u32(self.ledger.live.len() as u32);
        for (ordinal, live) in &self.ledger.live {
            out.u32(*ordinal).u64(*live);
        }
        out.u64(self.ledger.pending.len() as u64);
        for tail in &self.ledger.pending {
            out.u64(tail.raw());
        }
        out.u64(self.streams.len() as u64);
        for stream in &self.streams {
            encode_stream(&mut out, stream);
        }
        let crc = crc32fast::hash(&out.bytes);
        out.u32(crc);
        out.bytes
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Checkpoint, DecodeFailure> {
        let (body, crc) = bytes.split_at(bytes.len().checked_sub(4).ok_or(DecodeFailure)?);
        if crc32fast::hash(body).to_le_bytes() != crc {
            return Err(DecodeFailure);
        }
        let mut input = Decoder::new(body);
        if input.u32()? != MAGIC {
            return Err(DecodeFailure);
        }
        let version = input.u32()?;
        if !(1..=VERSION).contains(&version) {
            return Err(DecodeFailure);
        }
        let shard = input.u32()?;
        let clean = input.u8()? == 1;
        let (lsn, resume_ordinal, resume_position) =
            (Lsn::from_raw(input.u64()?), input.u32()?, input.u64()?);
        let (next_lsn, stream_id_next, written_ms) =
            (Lsn::from_raw(input.u64()?), StreamId::from_raw(input.u64()?), input.u64()?);
        let mut ledger = LedgerState::default();
        for _ in 0..input.u32()? {
            ledger.live.insert(input.u32()?, input.u64()?);
        }
        for _ in 0..input.u64()? {
            ledger.pending.insert(Location::from_raw(input.u64()?));
        }
        let count = input.u64()?;
        let mut streams = Vec::with_capacity(count.min(1 << 20) as usize);
        for _ in 0..count {
            streams.push(decode_stream(&mut input, version)?);
        }
        if !input.is_empty() {
            return Err(DecodeFailure);
        }
        Ok(Checkpoint {
            shard,
            clean,
            lsn,
            resume_ordinal,
            resume_position,
            next_lsn,
            stream_id_next,
            written_ms,
            ledger,
            streams,
        })
    }
}

fn encode_stream(out: &mut Encoder, stream: &StreamSnapshot) {
    out.u64(stream.id.raw()).text(&stream.name).text(stream.config.content_type.as_str());
    out.option_u64(stream.config.ttl_secs).option_u64(stream.config.expires_at_ms.map(|at| at as u64));
    out.u64(stream.last_access_ms)
        .u64(stream.tail.messages)
        .u64(stream.tail.bytes)
        .u8(u8::from(stream.closed));
    out.option_text(stream.stream_seq.as_deref()).u64(stream.chain_tail.raw()).u64(stream.chain_n.raw());
    out.u32(stream.producers.len() as u32);
    for (id, state) in &stream.producers {
        out.text(id).u64(state.epoch).u64(state.last_seq).u64(state.last_used_ms);
    }
    match &stream.damage {
        Some(damage) => {
            out.u8(1).u64(damage.at.messages).u64(damage.at.bytes).text(&damage.reason);
        }
        None => {
            out.u8(0);
        }
    }
    out.u64(stream.tag_bytes);
    out.u8(u8::from(stream.deleted));
    match &stream.fork {
        Some(fork) => {
            out.u8(1).text(&fork.origin.source).u64(fork.source_id.raw());
            out.u64(fork.origin.offset.messages).u64(fork.origin.offset.bytes).u64(fork.origin.sub_offset);
            out.u64(fork.until.messages).u64(fork.until.bytes).u64(fork.partial_bytes);
        }
        None => {
            out.u8(0);
        }
    }
}

/// A fork's reference as version 4 on writes it.
fn decode_fork(input: &mut Decoder<'_>) -> Result<Option<ForkRef>, DecodeFailure> {
    if input.u8()? == 0 {
        return Ok(None);
    }
    let source = input.text()?.into_boxed_str();
    let source_id = StreamId::from_raw(input.u64()?);
    let offset = Offset { messages: input.u64()?, bytes: input.u64()? };
    let origin = ForkOrigin { source, offset, sub_offset: input.u64()? };
    let until = Offset { messages: input.u64()?, bytes: input.u64()? };
    let fork = ForkRef { origin, source_id, until, partial_bytes: input.u64()? };
    fork.is_consistent().then_some(Some(fork)).ok_or(DecodeFailure)
}

fn decode_stream(input: &mut Decoder<'_>, version: u32) -> Result<StreamSnapshot, DecodeFailure> {
    let id = StreamId::from_raw(input.u64()?);
    let name: Arc<str> = Arc::from(input.text()?);
    let content_type = ContentType::parse(&input.text()?).map_err(|_| DecodeFailure)?;
    let ttl_secs = input.option_u64()?;
    let expires_at_ms = input.option_u64()?.map(|at| at as i64);
    let last_access_ms = input.u64()?;
    let tail = Offset { messages: input.u64()?, bytes: input.u64()? };
    let closed = input.u8()? == 1;
    let stream_seq = input.option_text()?.map(String::into_boxed_str);
    let (chain_tail, chain_n) = (Location::from_raw(input.u64()?), ChainIndex::from_raw(input.u64()?));
    let count = input.u32()?;
    let mut producers = Vec::with_capacity(count.min(1 << 16) as usize);
    for _ in 0..count {
        let producer_id: Box<str> = input.text()?.into();
        let state = ProducerState { epoch: input.u64()?, last_seq: input.u64()?, last_used_ms: input.u64()? };
        producers.push((producer_id, state));
    }
    let damage = match version {
        1 => None,
        _ => match input.u8()? {
            0 => None,
            1 => Some(StreamDamage {
                at: Offset { messages: input.u64()?, bytes: input.u64()? },
                reason: input.text()?.into(),
            }),
            _ => return Err(DecodeFailure),
        },
    };
    let tag_bytes = if version >= 3 { input.u64()? } else { 0 };
    let (deleted, fork) = match version {
        1..=3 => (false, None),
        _ => (bool_of(input.u8()?)?, decode_fork(input)?),
    };
    Ok(StreamSnapshot {
        id,
        name,
        config: StreamConfig { content_type, ttl_secs, expires_at_ms },
        last_access_ms,
        tail,
        closed,
        stream_seq,
        producers,
        chain_tail,
        chain_n,
        tag_bytes,
        damage,
        fork,
        deleted,
    })
}

fn bool_of(byte: u8) -> Result<bool, DecodeFailure> {
    match byte {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(DecodeFailure),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Checkpoint {
        let stream = StreamSnapshot {
            id: StreamId::from_raw(9),
            name: "a/b".into(),
            config: StreamConfig {
                content_type: ContentType::parse("application/json").unwrap(),
                ttl_secs: Some(60),
                expires_at_ms: None,
            },
            last_access_ms: 1234,
            tail: Offset { messages: 3, bytes: 99 },
            closed: true,
            stream_seq: Some("0007".into()),
            producers: vec![("p".into(), ProducerState { epoch: 2, last_seq: 5, last_used_ms: 1000 })],
            chain_tail: Location::from_raw(0x0000_0002_0000_0040),
            chain_n: ChainIndex::from_raw(3),
            tag_bytes: 300,
            damage: None,
            fork: None,
            deleted: false,
        };
        let damaged = StreamSnapshot {
            id: StreamId::from_raw(10),
            name: "c".into(),
            damage: Some(StreamDamage { at: Offset { messages: 1, bytes: 3 }, reason: "lost".into() }),
            ..stream.clone()
        };
        let fork = StreamSnapshot {
            id: StreamId::from_raw(11),
            name: "d".into(),
            fork: Some(ForkRef {
                origin: ForkOrigin {
                    source: "a/b".into(),
                    offset: Offset { messages: 1, bytes: 20 },
                    sub_offset: 5,
                },
                source_id: StreamId::from_raw(9),
                until: Offset { messages: 1, bytes: 20 },
                partial_bytes: 5,
            }),
            deleted: true,
            ..stream.clone()
        };
        Checkpoint {
            shard: 4,
            clean: true,
            lsn: Lsn::from_raw(77),
            resume_ordinal: 2,
            resume_position: 4096,
            next_lsn: Lsn::from_raw(78),
            stream_id_next: StreamId::from_raw(10),
            written_ms: 5,
            ledger: LedgerState {
                live: std::collections::BTreeMap::from([(1, 0), (2, 512)]),
                pending: std::collections::BTreeSet::from([Location::from_raw(0x0000_0001_0000_0100)]),
            },
            streams: vec![stream, damaged, fork],
        }
    }

    #[test]
    fn checkpoints_round_trip() {
        let checkpoint = sample();
        assert_eq!(Checkpoint::decode(&checkpoint.encode()).unwrap(), checkpoint);
    }

    /// The encoding of a one-stream `checkpoint` as `version` wrote it: without the last
    /// `cut` bytes of its stream.
    fn as_version(checkpoint: &Checkpoint, version: u32, cut: usize) -> Vec<u8> {
        assert_eq!(checkpoint.streams.len(), 1);
        let mut bytes = checkpoint.encode();
        bytes.truncate(bytes.len() - 4 - cut);
        bytes[4..8].copy_from_slice(&version.to_le_bytes());
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes
    }

    #[test]
    fn versions_1_to_3_still_read() {
        let mut checkpoint = sample();
        checkpoint.streams.truncate(1);
        checkpoint.streams[0].tag_bytes = 0;
        // Version 3 lacks the deleted and fork bytes; version 2 the tag bytes too; version 1
        // the "no damage" byte too.
        assert_eq!(Checkpoint::decode(&as_version(&checkpoint, 3, 2)).unwrap(), checkpoint);
        assert_eq!(Checkpoint::decode(&as_version(&checkpoint, 2, 10)).unwrap(), checkpoint);
        assert_eq!(Checkpoint::decode(&as_version(&checkpoint, 1, 11)).unwrap(), checkpoint);
    }

    #[test]
    fn any_damage_is_detected() {
        let bytes = sample().encode();
        for index in (0..bytes.len()).step_by(7) {
            let mut damaged = bytes.clone();
            damaged[index] ^= 0x20;
            assert!(Checkpoint::decode(&damaged).is_err(), "byte {index}");
        }
        assert!(Checkpoint::decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(Checkpoint::decode(&[]).is_err());
    }
}
