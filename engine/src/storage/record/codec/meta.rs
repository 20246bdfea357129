//! The meta of a record: its place in its stream's chain, then what its kind carries (a
//! create's name, configuration and fork reference; an append's producer tag and
//! `Stream-Seq`), as laid out in the codec's format description (`super`).

use super::{flags, DecodeError, Header, Kind, JUMPS_MAX};
use crate::content_type::ContentType;
use crate::ids::{ChainIndex, Location, StreamId};
use crate::meta::{ForkOrigin, ForkRef, StreamConfig};
use crate::offset::Offset;
use crate::producer::ProducerTag;
use crate::storage::chain::{jump_count, Chain};

/// A stream's name and configuration as a create record carries them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateMeta {
    pub name: Box<str>,
    pub config: StreamConfig,
    /// A fork's reference to its source (flag `FORK`).
    pub fork: Option<ForkRef>,
}

/// Everything a record's meta may hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    pub chain: Option<Chain>,
    pub create: Option<CreateMeta>,
    pub producer: Option<ProducerTag>,
    pub stream_seq: Option<Box<str>>,
}

/// The parts of a meta to encode, borrowed from the record being written.
#[derive(Clone, Copy, Default)]
pub(crate) struct MetaRef<'a> {
    pub chain: Option<&'a Chain>,
    /// Name and configuration (create records).
    pub create: Option<(&'a str, &'a StreamConfig)>,
    /// A fork's reference to its source (create records of forks).
    pub fork: Option<&'a ForkRef>,
    pub producer: Option<&'a ProducerTag>,
    pub stream_seq: Option<&'a str>,
}

/// Encodes the meta of a record of `kind`; the flags follow from which parts are present.
pub(crate) fn encode_meta(kind: Kind, meta: MetaRef<'_>, out: &mut Vec<u8>) {
    if matches!(kind, Kind::Create | Kind::Append) {
        let chain = meta.chain.expect("create and append records are chained");
        debug_assert!(chain.jumps.len() <= JUMPS_MAX);
        out.extend_from_slice(&chain.n.raw().to_le_bytes());
        out.push(chain.jumps.len() as u8);
        for jump in &chain.jumps {
            out.extend_from_slice(&jump.raw().to_le_bytes());
        }
    }
    if let (Kind::Create, Some((name, config))) = (kind, meta.create) {
        put_text(out, name);
        put_text(out, config.content_type.as_str());
        out.extend_from_slice(&config.ttl_secs.unwrap_or(u64::MAX).to_le_bytes());
        out.extend_from_slice(&config.expires_at_ms.unwrap_or(i64::MIN).to_le_bytes());
        if let Some(fork) = meta.fork {
            put_text(out, &fork.origin.source);
            let fields = [
                fork.source_id.raw(),
                fork.origin.offset.messages,
                fork.origin.offset.bytes,
                fork.origin.sub_offset,
                fork.until.messages,
                fork.until.bytes,
                fork.partial_bytes,
            ];
            for field in fields {
                out.extend_from_slice(&field.to_le_bytes());
            }
        }
    }
    if let (Kind::Append, Some(producer)) = (kind, meta.producer) {
        put_text(out, &producer.id);
        out.extend_from_slice(&producer.epoch.to_le_bytes());
        out.extend_from_slice(&producer.seq.to_le_bytes());
    }
    if let (Kind::Append, Some(stream_seq)) = (kind, meta.stream_seq) {
        put_text(out, stream_seq);
    }
}

/// Decodes the meta of a record with header `header`.
pub(crate) fn decode_meta(header: &Header, bytes: &[u8]) -> Result<Meta, DecodeError> {
    let mut reader = Reader { bytes, at: 0 };
    let mut meta = Meta::default();
    if matches!(header.kind, Kind::Create | Kind::Append) {
        meta.chain = Some(reader.chain()?);
    }
    if header.kind == Kind::Create {
        let name = reader.text()?.into();
        let content_type = ContentType::parse(&reader.text()?).map_err(|_| DecodeError::BadMeta)?;
        let ttl = reader.u64()?;
        let expires = reader.u64()? as i64;
        let config = StreamConfig {
            content_type,
            ttl_secs: (ttl != u64::MAX).then_some(ttl),
            expires_at_ms: (expires != i64::MIN).then_some(expires),
        };
        let fork = if header.has(flags::FORK) { Some(reader.fork_ref()?) } else { None };
        meta.create = Some(CreateMeta { name, config, fork });
    }
    if header.kind == Kind::Append && header.has(flags::PRODUCER) {
        let id = reader.text()?.into();
        meta.producer = Some(ProducerTag { id, epoch: reader.u64()?, seq: reader.u64()? });
    }
    if header.kind == Kind::Append && header.has(flags::STREAM_SEQ) {
        meta.stream_seq = Some(reader.text()?.into());
    }
    if reader.at != bytes.len() {
        return Err(DecodeError::BadMeta);
    }
    Ok(meta)
}

/// Decodes only the chain part of a meta (what readers need).
pub(crate) fn decode_chain(meta: &[u8]) -> Result<Chain, DecodeError> {
    Reader { bytes: meta, at: 0 }.chain()
}

/// The index and nearest jump of the chain at the start of `meta`, checked as
/// [`decode_chain`] checks it (the index and jump count agree, every jump is there), without
/// collecting the jumps: for reads that only follow records forward.
pub(crate) fn peek_chain(meta: &[u8]) -> Result<(ChainIndex, Option<Location>), DecodeError> {
    let mut reader = Reader { bytes: meta, at: 0 };
    let (n, count) = reader.chain_head()?;
    if meta.len() < chain_bytes(count) {
        return Err(DecodeError::BadMeta);
    }
    let nearest = if count == 0 { None } else { Some(Location::from_raw(reader.u64()?)) };
    Ok((n, nearest))
}

/// Bytes of the chain part of a meta with `jumps` jumps.
pub(crate) fn chain_bytes(jumps: usize) -> usize {
    9 + 8 * jumps
}

fn put_text(out: &mut Vec<u8>, text: &str) {
    debug_assert!(text.len() <= usize::from(u16::MAX));
    out.extend_from_slice(&(text.len() as u16).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, count: usize) -> Result<&[u8], DecodeError> {
        let taken = self.bytes.get(self.at..self.at + count).ok_or(DecodeError::BadMeta)?;
        self.at += count;
        Ok(taken)
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    fn text(&mut self) -> Result<String, DecodeError> {
        let len = u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes"));
        String::from_utf8(self.take(usize::from(len))?.to_vec()).map_err(|_| DecodeError::BadMeta)
    }

    fn offset(&mut self) -> Result<Offset, DecodeError> {
        Ok(Offset { messages: self.u64()?, bytes: self.u64()? })
    }

    fn fork_ref(&mut self) -> Result<ForkRef, DecodeError> {
        let source = self.text()?.into();
        let source_id = StreamId::from_raw(self.u64()?);
        let origin = ForkOrigin { source, offset: self.offset()?, sub_offset: self.u64()? };
        let (until, partial_bytes) = (self.offset()?, self.u64()?);
        let fork = ForkRef { origin, source_id, until, partial_bytes };
        fork.is_consistent().then_some(fork).ok_or(DecodeError::BadMeta)
    }

    fn chain(&mut self) -> Result<Chain, DecodeError> {
        let (n, count) = self.chain_head()?;
        let jumps = (0..count).map(|_| self.u64().map(Location::from_raw)).collect::<Result<Vec<_>, _>>()?;
        Ok(Chain { n, jumps })
    }

    /// A chain's index and jump count, checked to agree.
    fn chain_head(&mut self) -> Result<(ChainIndex, usize), DecodeError> {
        let n = ChainIndex::from_raw(self.u64()?);
        let count = usize::from(self.take(1)?[0]);
        if count > JUMPS_MAX || count != jump_count(n) {
            return Err(DecodeError::BadMeta);
        }
        Ok((n, count))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::Lsn;

    #[test]
    fn create_meta_round_trips() {
        let config = StreamConfig {
            content_type: ContentType::parse("application/json; charset=utf-8").unwrap(),
            ttl_secs: Some(60),
            expires_at_ms: None,
        };
        let chain = Chain { n: ChainIndex::CREATE, jumps: vec![] };
        let fork = ForkRef {
            origin: ForkOrigin {
                source: "tenant/all".into(),
                offset: Offset { messages: 3, bytes: 40 },
                sub_offset: 2,
            },
            source_id: StreamId::from_raw(9),
            until: Offset { messages: 5, bytes: 61 },
            partial_bytes: 0,
        };
        for fork in [None, Some(fork)] {
            let meta_ref = MetaRef {
                chain: Some(&chain),
                create: Some(("tenant/orders", &config)),
                fork: fork.as_ref(),
                ..MetaRef::default()
            };
            let mut bytes = Vec::new();
            encode_meta(Kind::Create, meta_ref, &mut bytes);
            let create =
                CreateMeta { name: "tenant/orders".into(), config: config.clone(), fork: fork.clone() };
            let meta = Meta { chain: Some(chain.clone()), create: Some(create), ..Meta::default() };
            let header = Header {
                kind: Kind::Create,
                flags: if fork.is_some() { flags::FORK } else { 0 },
                meta_len: bytes.len() as u16,
                payload_len: bytes.len() as u32,
                payload_crc: 0,
                lsn: Lsn::FIRST,
                stream: StreamId::from_raw(1),
                offset: fork.as_ref().map_or(Offset::ZERO, ForkRef::start),
                time_ms: 0,
                messages: 0,
            };
            assert_eq!(decode_meta(&header, &bytes).unwrap(), meta);
            let unflagged = Header { flags: header.flags ^ flags::FORK, ..header };
            assert_eq!(
                decode_meta(&unflagged, &bytes).err(),
                Some(DecodeError::BadMeta),
                "flag and meta agree"
            );
        }
    }
}
