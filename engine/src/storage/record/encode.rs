//! Turning a [`Record`] into its bytes on disk, for every disk mode.
//!
//! Encoding is two steps, because a writer must know a record's length before it knows the
//! record's sequence number and place (the WAL may have to seal and rotate first):
//! [`prepare`] encodes the meta and works out the length; [`stage`] then appends the header,
//! the meta and any JSON data to the writer's staging buffer. A plain body is never copied:
//! the writer writes it from the request's own buffer ([`Staged::body`]) between the staged
//! bytes and the padding.

use std::io;
use std::ops::Range;

use bytes::Bytes;

use super::codec::{self, flags, Header, Kind, MetaRef, HEADER_BYTES, META_BYTES_MAX};
use super::Record;
use crate::ids::{Lsn, StreamId};
use crate::offset::Offset;
use crate::payload::Payload;
use crate::storage::chain::Chain;

/// A record whose meta is encoded and whose length is known.
pub(crate) struct Prepared<'r> {
    kind: Kind,
    flags: u8,
    stream: StreamId,
    offset: Offset,
    messages: u32,
    data_len: usize,
    /// The plain body, written as is after the staged bytes.
    body: Option<&'r Bytes>,
    /// JSON messages, laid out in the staging buffer.
    json: Option<&'r Payload>,
    /// Bytes the record takes, padding included.
    pub record_len: usize,
}

/// Where a staged record's bytes are: `head` in the staging buffer, then the body (if any),
/// then `padding`.
pub(crate) struct Staged<'r> {
    pub head: Range<usize>,
    pub body: Option<&'r Bytes>,
    pub padding: &'static [u8],
}

/// The most bytes a record can take whose meta, besides its chain, is `meta_bytes` and whose
/// data is `data_bytes`: what a writer sets aside for it before it exists.
pub(crate) fn record_bytes_max(meta_bytes: usize, data_bytes: u64) -> u64 {
    let head = codec::align(HEADER_BYTES + codec::chain_bytes(codec::JUMPS_MAX) + meta_bytes);
    head as u64 + data_bytes + codec::RECORD_ALIGN as u64
}

/// Encodes `record`'s meta (with `chain`, for creates and appends) into `meta`.
pub(crate) fn prepare<'r>(
    record: &'r Record,
    chain: Option<&Chain>,
    meta: &mut Vec<u8>,
) -> io::Result<Prepared<'r>> {
    let mut prepared = layout(record);
    meta.clear();
    codec::encode_meta(prepared.kind, meta_of(record, chain), meta);
    if meta.len() > META_BYTES_MAX {
        // The front checks every field's length; this is a bug, not bad input.
        return Err(io::Error::other(format!("record meta of {} bytes exceeds its limit", meta.len())));
    }
    prepared.record_len = codec::align(HEADER_BYTES + meta.len() + prepared.data_len);
    Ok(prepared)
}

/// Appends the header (with `lsn` and `time_ms`), `meta` and any JSON data to `staging`.
pub(crate) fn stage<'r>(
    prepared: &Prepared<'r>,
    meta: &[u8],
    lsn: Lsn,
    time_ms: u64,
    staging: &mut Vec<u8>,
) -> Staged<'r> {
    let from = staging.len();
    staging.extend_from_slice(&[0; HEADER_BYTES]);
    staging.extend_from_slice(meta);
    if let Some(payload) = prepared.json {
        payload.for_each_message(|text, separator| {
            staging.extend_from_slice(text);
            staging.extend_from_slice(separator);
        });
    }
    let data = match prepared.body {
        Some(body) => body.as_ref(),
        None => &staging[from + HEADER_BYTES + meta.len()..],
    };
    debug_assert_eq!(data.len(), prepared.data_len, "the layout's data length is what is written");
    let header = Header {
        kind: prepared.kind,
        flags: prepared.flags,
        meta_len: meta.len() as u16,
        payload_len: (meta.len() + prepared.data_len) as u32,
        payload_crc: codec::payload_crc(meta, &[data]),
        lsn,
        stream: prepared.stream,
        offset: prepared.offset,
        time_ms,
        messages: prepared.messages,
    };
    staging[from..from + HEADER_BYTES].copy_from_slice(&header.encode());
    let padding = codec::padding(HEADER_BYTES + header.payload_len as usize);
    debug_assert_eq!(HEADER_BYTES + header.payload_len as usize + padding.len(), prepared.record_len);
    Staged { head: from..staging.len(), body: prepared.body, padding }
}

/// What a record looks like on disk, before its meta is encoded.
fn layout(record: &Record) -> Prepared<'_> {
    let (kind, stream, offset, payload, mut record_flags) = match record {
        Record::Create { stream, initial, closed, fork, .. } => {
            let mut record_flags = if *closed { flags::CLOSE } else { 0 };
            record_flags |= if fork.is_some() { flags::FORK } else { 0 };
            let start = fork.as_ref().map_or(Offset::ZERO, |fork| fork.start());
            (Kind::Create, *stream, start, initial, record_flags)
        }
        Record::Append { stream, offset, payload, producer, stream_seq, close, .. } => {
            let mut record_flags = if *close { flags::CLOSE } else { 0 };
            record_flags |= if producer.is_some() { flags::PRODUCER } else { 0 };
            record_flags |= if stream_seq.is_some() { flags::STREAM_SEQ } else { 0 };
            (Kind::Append, *stream, *offset, payload, record_flags)
        }
        Record::Delete { stream, expired, soft, .. } => {
            let mut record_flags = if *expired { flags::EXPIRED } else { 0 };
            record_flags |= if *soft { flags::SOFT } else { 0 };
            (Kind::Delete, *stream, Offset::ZERO, &None, record_flags)
        }
    };
    let (body, json) = match payload {
        Some(payload) => match payload.as_whole() {
            Some(body) => (Some(body), None),
            None => {
                record_flags |= flags::JSON;
                (None, Some(payload))
            }
        },
        None => (None, None),
    };
    Prepared {
        kind,
        flags: record_flags,
        stream,
        offset,
        messages: payload.as_ref().map_or(0, |p| p.message_count()) as u32,
        data_len: payload.as_ref().map_or(0, |p| p.stored_len() as usize),
        body,
        json,
        record_len: 0,
    }
}

fn meta_of<'a>(record: &'a Record, chain: Option<&'a Chain>) -> MetaRef<'a> {
    match record {
        Record::Create { name, config, fork, .. } => {
            MetaRef { chain, create: Some((name, config)), fork: fork.as_ref(), ..MetaRef::default() }
        }
        Record::Append { producer, stream_seq, .. } => MetaRef {
            chain,
            producer: producer.as_ref(),
            stream_seq: stream_seq.as_deref(),
            ..MetaRef::default()
        },
        Record::Delete { .. } => MetaRef::default(),
    }
}
