//! The on-disk form of a record, shared by acid and the file modes.
//!
//! ```text
//! header (64 bytes, little-endian)
//!   0  magic "DSR1" (format version 1)     32  stream offset before: messages u64
//!   4  kind u8                             40  stream offset before: bytes u64
//!   5  flags u8                            48  time (ms since the Unix epoch) u64
//!   6  meta length u16                     56  messages in the data u32
//!   8  payload length u32 (meta + data)    60  header crc32 of bytes 0..60
//!  12  payload crc32 (meta + data)
//!  16  sequence number u64 (LSN in acid, record index in a stream file)
//!  24  stream id u64
//! payload: meta (per kind, below), then the stored message bytes
//! padding: zeros up to a multiple of 8
//! ```
//!
//! Meta of `Create` and `Append` starts with the record's place in its stream's chain
//! (`n` u64, jump count u8, jump locations u64 each); `Create` then carries the name, content
//! type, TTL and expiry, and a fork's reference to its source when flagged `FORK` (source
//! name and id, the offset and sub-offset asked for, where inheritance ends, the bytes of a
//! cut message); a fork's create record is at the fork's start offset, after the inherited
//! bytes. `Append` carries the producer tag and `Stream-Seq` when its flags say so. A
//! `Delete` flagged `SOFT` keeps the stream for the forks that read it.
//! Every field is checked on decode: a zeroed, torn or foreign header never decodes, and the
//! payload crc is always present, so a valid header over a zeroed payload fails too.
//! `meta` encodes and decodes the metas; `crc` computes the crcs.

use crate::ids::{Location, Lsn, StreamId};
use crate::offset::Offset;
use crate::storage::chain::{Chain, Node, Stored};

mod crc;
mod meta;

use crc::crc32;
pub(crate) use crc::{payload_crc, whole_payload_crc};
/// Named only where tests build metas by hand (elsewhere it is reached through `Meta`).
#[cfg(test)]
pub(crate) use meta::CreateMeta;
pub(crate) use meta::{chain_bytes, decode_chain, decode_meta, encode_meta, peek_chain, Meta, MetaRef};

pub(crate) const HEADER_BYTES: usize = 64;
/// Magic and format version: "DSR1".
pub(crate) const MAGIC: u32 = u32::from_le_bytes(*b"DSR1");
const _: () = assert!(MAGIC != 0, "a zeroed header never carries the magic");
/// Records start at multiples of this.
pub(crate) const RECORD_ALIGN: usize = 8;
/// Most meta bytes a record carries: a full chain, a name of 1024 bytes, a content type, a
/// producer id and a `Stream-Seq` of 256 bytes each, with their lengths, fit well inside.
pub(crate) const META_BYTES_MAX: usize = 4096;
/// Most jump pointers one record holds (records up to 2^62 per chain).
pub(crate) const JUMPS_MAX: usize = 63;

// The format's constants agree with one another (checked when the crate builds).
const _: () = {
    assert!(HEADER_BYTES == 64, "the header layout above fills 64 bytes: 60 of fields, 4 of crc");
    assert!(RECORD_ALIGN.is_power_of_two() && HEADER_BYTES.is_multiple_of(RECORD_ALIGN));
    assert!(META_BYTES_MAX <= u16::MAX as usize, "meta lengths are stored as u16");
    let chain = 9 + 8 * JUMPS_MAX;
    let name = 2 + crate::name::NAME_BYTES_MAX;
    let fork = name + 8 * 7;
    let create = name + 2 + crate::content_type::CONTENT_TYPE_BYTES_MAX + 16 + fork;
    let append = 2 + crate::producer::PRODUCER_ID_BYTES_MAX + 16 + 2 + crate::limits::STREAM_SEQ_BYTES_MAX;
    assert!(chain + create <= META_BYTES_MAX && chain + append <= META_BYTES_MAX, "every meta fits");
    assert!((1u64 << (JUMPS_MAX - 1)) < u64::MAX >> 1, "chain indexes up to 2^62 fit");
};

/// What a record does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    Create = 1,
    Append = 2,
    Delete = 3,
    /// The end of a segment: nothing follows in this file.
    Seal = 4,
}

impl Kind {
    fn from_u8(value: u8) -> Option<Kind> {
        match value {
            1 => Some(Kind::Create),
            2 => Some(Kind::Append),
            3 => Some(Kind::Delete),
            4 => Some(Kind::Seal),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Create => "create",
            Kind::Append => "append",
            Kind::Delete => "delete",
            Kind::Seal => "seal",
        }
    }
}

/// Record flags.
pub(crate) mod flags {
    /// The stream is closed by (after) this record.
    pub(crate) const CLOSE: u8 = 1;
    /// The meta carries a producer tag.
    pub(crate) const PRODUCER: u8 = 2;
    /// The meta carries a `Stream-Seq`.
    pub(crate) const STREAM_SEQ: u8 = 4;
    /// A delete caused by expiry.
    pub(crate) const EXPIRED: u8 = 8;
    /// The data is stored JSON messages (each followed by `,`).
    pub(crate) const JSON: u8 = 16;
    /// A copy of one of the stream's records, written by compaction (acid).
    pub(crate) const MOVED: u8 = 32;
    /// The last copy of a move: from here on the copies are the stream's chain.
    pub(crate) const MOVE_END: u8 = 64;
    /// Of a create: the meta carries a fork reference (the same bit as [`SOFT`]).
    pub(crate) const FORK: u8 = 128;
    /// Of a delete: a soft delete; the stream stays while forks read it (the same bit as
    /// [`FORK`]).
    pub(crate) const SOFT: u8 = 128;
    /// Every bit has a meaning (which depends on the kind: see each kind's check).
    pub(crate) const ALL: u8 = CLOSE | PRODUCER | STREAM_SEQ | EXPIRED | JSON | MOVED | MOVE_END | FORK;
    const _: () = assert!(ALL == u8::MAX);
}

/// The names of the flags set in `bits` of a record of `kind`, in bit order (for listings).
pub fn flag_names(kind: Kind, bits: u8) -> Vec<&'static str> {
    let last = match kind {
        Kind::Delete => "soft",
        _ => "fork",
    };
    let names: [(u8, &str); 8] = [
        (flags::CLOSE, "close"),
        (flags::PRODUCER, "producer"),
        (flags::STREAM_SEQ, "seq"),
        (flags::EXPIRED, "expired"),
        (flags::JSON, "json"),
        (flags::MOVED, "moved"),
        (flags::MOVE_END, "move-end"),
        (flags::FORK, last),
    ];
    names.iter().filter(|(bit, _)| bits & bit != 0).map(|(_, name)| *name).collect()
}

/// A decoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub flags: u8,
    pub meta_len: u16,
    pub payload_len: u32,
    pub payload_crc: u32,
    pub lsn: Lsn,
    pub stream: StreamId,
    /// The stream's offset before this record.
    pub offset: Offset,
    pub time_ms: u64,
    /// Messages in the data.
    pub messages: u32,
}

/// Why bytes are not a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// All zeros: unwritten space (the normal end of a log).
    Zeroed,
    BadMagic,
    BadHeaderCrc,
    BadKind,
    /// Lengths or flags that cannot belong to a record of this kind.
    Inconsistent,
    /// The record runs past the end of the space it is in.
    Truncated,
    BadPayloadCrc,
    BadMeta,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DecodeError::Zeroed => "unwritten (zeroed) space",
            DecodeError::BadMagic => "bad magic",
            DecodeError::BadHeaderCrc => "header checksum mismatch",
            DecodeError::BadKind => "unknown record kind",
            DecodeError::Inconsistent => "inconsistent header fields",
            DecodeError::Truncated => "record runs past the end",
            DecodeError::BadPayloadCrc => "payload checksum mismatch",
            DecodeError::BadMeta => "malformed record metadata",
        })
    }
}

impl std::error::Error for DecodeError {}

impl Header {
    /// The record that ends a segment.
    pub fn seal(lsn: Lsn, time_ms: u64) -> Header {
        Header {
            kind: Kind::Seal,
            flags: 0,
            meta_len: 0,
            payload_len: 0,
            payload_crc: payload_crc(&[], &[]),
            lsn,
            stream: StreamId::from_raw(0),
            offset: Offset::ZERO,
            time_ms,
            messages: 0,
        }
    }

    pub fn data_len(&self) -> u32 {
        self.payload_len - u32::from(self.meta_len)
    }

    /// Bytes the record takes, padding included.
    pub fn record_len(&self) -> usize {
        align(HEADER_BYTES + self.payload_len as usize)
    }

    /// The stream's offset after this record.
    pub fn end_offset(&self) -> Offset {
        self.offset.advance(u64::from(self.messages), u64::from(self.data_len()))
    }

    /// The chain node of this record, found at `location` with chain part `chain`.
    pub fn chain_node(&self, location: Location, chain: Chain) -> Node {
        Node {
            location,
            n: chain.n,
            stream: self.stream,
            start: self.offset,
            end: self.end_offset(),
            jumps: chain.jumps,
            len: self.record_len() as u64,
            stored: Stored {
                meta_len: self.meta_len,
                payload_len: self.payload_len,
                payload_crc: self.payload_crc,
            },
        }
    }

    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// Encodes the header, computing its crc.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut raw = [0u8; HEADER_BYTES];
        raw[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        raw[4] = self.kind as u8;
        raw[5] = self.flags;
        raw[6..8].copy_from_slice(&self.meta_len.to_le_bytes());
        raw[8..12].copy_from_slice(&self.payload_len.to_le_bytes());
        raw[12..16].copy_from_slice(&self.payload_crc.to_le_bytes());
        raw[16..24].copy_from_slice(&self.lsn.raw().to_le_bytes());
        raw[24..32].copy_from_slice(&self.stream.raw().to_le_bytes());
        raw[32..40].copy_from_slice(&self.offset.messages.to_le_bytes());
        raw[40..48].copy_from_slice(&self.offset.bytes.to_le_bytes());
        raw[48..56].copy_from_slice(&self.time_ms.to_le_bytes());
        raw[56..60].copy_from_slice(&self.messages.to_le_bytes());
        let crc = crc32(&raw[..60]);
        raw[60..64].copy_from_slice(&crc.to_le_bytes());
        raw
    }

    /// Decodes and checks a header (not its payload).
    pub fn decode(raw: &[u8; HEADER_BYTES]) -> Result<Header, DecodeError> {
        if u32_at(raw, 0) != MAGIC {
            // The magic is not zero: only a header that is not there at all is all zeros.
            let zeroed = raw.iter().all(|b| *b == 0);
            return Err(if zeroed { DecodeError::Zeroed } else { DecodeError::BadMagic });
        }
        if crc32(&raw[..60]) != u32_at(raw, 60) {
            return Err(DecodeError::BadHeaderCrc);
        }
        let kind = Kind::from_u8(raw[4]).ok_or(DecodeError::BadKind)?;
        let header = Header {
            kind,
            flags: raw[5],
            meta_len: u16::from_le_bytes([raw[6], raw[7]]),
            payload_len: u32_at(raw, 8),
            payload_crc: u32_at(raw, 12),
            lsn: Lsn::from_raw(u64_at(raw, 16)),
            stream: StreamId::from_raw(u64_at(raw, 24)),
            offset: Offset { messages: u64_at(raw, 32), bytes: u64_at(raw, 40) },
            time_ms: u64_at(raw, 48),
            messages: u32_at(raw, 56),
        };
        header.check()?;
        Ok(header)
    }

    fn check(&self) -> Result<(), DecodeError> {
        let consistent = u32::from(self.meta_len) <= self.payload_len
            && (self.messages == 0) == (self.data_len() == 0)
            && (self.flags & flags::MOVE_END == 0 || self.flags & flags::MOVED != 0)
            && match self.kind {
                Kind::Create => true,
                Kind::Append => self.flags & flags::FORK == 0,
                Kind::Delete => self.payload_len == 0 && self.flags & flags::MOVED == 0,
                Kind::Seal => self.payload_len == 0 && self.flags == 0,
            };
        if consistent {
            Ok(())
        } else {
            Err(DecodeError::Inconsistent)
        }
    }
}

/// A whole append record of `stream` (chained by `chain`, starting at `offset`, one message
/// of `data`), padded: for tests that lay out logs by hand.
#[cfg(test)]
pub(crate) fn append_for_tests(
    stream: StreamId,
    chain: &Chain,
    offset: Offset,
    lsn: Lsn,
    data: &[u8],
) -> Vec<u8> {
    let mut meta = Vec::new();
    encode_meta(Kind::Append, MetaRef { chain: Some(chain), ..MetaRef::default() }, &mut meta);
    let header = Header {
        kind: Kind::Append,
        flags: 0,
        meta_len: meta.len() as u16,
        payload_len: (meta.len() + data.len()) as u32,
        payload_crc: payload_crc(&meta, &[data]),
        lsn,
        stream,
        offset,
        time_ms: 0,
        messages: 1,
    };
    let mut bytes = header.encode().to_vec();
    bytes.extend_from_slice(&meta);
    bytes.extend_from_slice(data);
    bytes.extend_from_slice(padding(bytes.len()));
    bytes
}

/// Zeros that pad a record of `unpadded` bytes to the record alignment.
pub(crate) fn padding(unpadded: usize) -> &'static [u8] {
    const ZEROS: [u8; RECORD_ALIGN] = [0; RECORD_ALIGN];
    &ZEROS[..align(unpadded) - unpadded]
}

pub(crate) fn align(len: usize) -> usize {
    len.div_ceil(RECORD_ALIGN) * RECORD_ALIGN
}

/// A whole record read from `bytes` (which starts at the record), checked end to end.
pub(crate) struct Decoded<'a> {
    pub header: Header,
    pub meta: Meta,
    pub data: &'a [u8],
}

pub(crate) fn decode_record(bytes: &[u8]) -> Result<Decoded<'_>, DecodeError> {
    let raw: &[u8; HEADER_BYTES] =
        bytes.get(..HEADER_BYTES).and_then(|b| b.try_into().ok()).ok_or_else(|| {
            if bytes.iter().all(|b| *b == 0) {
                DecodeError::Zeroed
            } else {
                DecodeError::Truncated
            }
        })?;
    let header = Header::decode(raw)?;
    let payload =
        bytes.get(HEADER_BYTES..HEADER_BYTES + header.payload_len as usize).ok_or(DecodeError::Truncated)?;
    let (meta_bytes, data) = payload.split_at(header.meta_len as usize);
    if payload_crc(meta_bytes, &[data]) != header.payload_crc {
        return Err(DecodeError::BadPayloadCrc);
    }
    let meta = decode_meta(&header, meta_bytes)?;
    Ok(Decoded { header, meta, data })
}

fn u32_at(raw: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(raw[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(raw: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(raw[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::ChainIndex;
    use crate::producer::ProducerTag;

    fn append_record(data: &[u8], producer: bool) -> Vec<u8> {
        let mut record_flags = flags::JSON;
        let chain =
            Chain { n: ChainIndex::from_raw(4), jumps: [100, 200, 400].map(Location::from_raw).to_vec() };
        let tag = ProducerTag { id: "p-1".into(), epoch: 3, seq: 9 };
        let mut meta = MetaRef { chain: Some(&chain), ..MetaRef::default() };
        if producer {
            record_flags |= flags::PRODUCER | flags::STREAM_SEQ | flags::CLOSE;
            meta.producer = Some(&tag);
            meta.stream_seq = Some("0042");
        }
        let mut meta_bytes = Vec::new();
        encode_meta(Kind::Append, meta, &mut meta_bytes);
        let header = Header {
            kind: Kind::Append,
            flags: record_flags,
            meta_len: meta_bytes.len() as u16,
            payload_len: (meta_bytes.len() + data.len()) as u32,
            payload_crc: payload_crc(&meta_bytes, &[data]),
            lsn: Lsn::from_raw(77),
            stream: StreamId::from_raw(5),
            offset: Offset { messages: 10, bytes: 300 },
            time_ms: 1_700_000_000_000,
            messages: if data.is_empty() { 0 } else { 2 },
        };
        let mut out = header.encode().to_vec();
        out.extend_from_slice(&meta_bytes);
        out.extend_from_slice(data);
        out.extend_from_slice(padding(out.len()));
        out
    }

    #[test]
    fn records_round_trip() {
        for producer in [false, true] {
            let bytes = append_record(b"1,{\"a\":2},", producer);
            assert_eq!(bytes.len() % RECORD_ALIGN, 0);
            let decoded = decode_record(&bytes).unwrap();
            assert_eq!(decoded.data, b"1,{\"a\":2},");
            assert_eq!(decoded.header.lsn, Lsn::from_raw(77));
            assert_eq!(decoded.header.end_offset(), Offset { messages: 12, bytes: 310 });
            assert_eq!(decoded.header.record_len(), bytes.len());
            assert_eq!(decoded.meta.chain.as_ref().unwrap().jumps, [100, 200, 400].map(Location::from_raw));
            assert_eq!(decoded.meta.producer.is_some(), producer);
            assert_eq!(decoded.meta.stream_seq.as_deref(), producer.then_some("0042"));
        }
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let bytes = append_record(b"some payload bytes", true);
        let end = HEADER_BYTES + decode_record(&bytes).unwrap().header.payload_len as usize;
        for index in 0..end {
            for bit in 0..8 {
                let mut damaged = bytes.clone();
                damaged[index] ^= 1 << bit;
                assert!(decode_record(&damaged).is_err(), "flip at byte {index} bit {bit} went unnoticed");
            }
        }
    }

    #[test]
    fn zeros_truncation_and_zeroed_payloads_never_decode() {
        assert_eq!(decode_record(&[0; 200]).err(), Some(DecodeError::Zeroed));
        let bytes = append_record(b"payload", false);
        assert_eq!(decode_record(&bytes[..bytes.len() - 12]).err(), Some(DecodeError::Truncated));
        assert_eq!(decode_record(&bytes[..30]).err(), Some(DecodeError::Truncated));
        let mut zeroed_payload = bytes.clone();
        zeroed_payload[HEADER_BYTES..].fill(0);
        assert_eq!(decode_record(&zeroed_payload).err(), Some(DecodeError::BadPayloadCrc));
    }

    #[test]
    fn inconsistent_headers_are_refused() {
        let mut header =
            Header::decode(append_record(b"x", false)[..HEADER_BYTES].try_into().unwrap()).unwrap();
        header.messages = 0;
        assert_eq!(
            Header::decode(&header.encode()).err(),
            Some(DecodeError::Inconsistent),
            "data without messages"
        );
        header.messages = 1;
        header.flags = flags::FORK;
        assert_eq!(Header::decode(&header.encode()).err(), Some(DecodeError::Inconsistent), "fork append");
        header.flags = 0;
        header.kind = Kind::Delete;
        assert_eq!(
            Header::decode(&header.encode()).err(),
            Some(DecodeError::Inconsistent),
            "delete with payload"
        );
    }
}
