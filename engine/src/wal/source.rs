//! Reading records and stream data from a shard's mapped segments.
//!
//! Headers are copied out of the map (64 bytes plus the chain part of the meta) and checked
//! again on every read; stream data is checked against its crc, then handed out as `Bytes`
//! that point into the map, so a catch-up read copies nothing until the socket does. Bytes
//! that fail a check are never served: the read fails with [`ReadError::Storage`].

use std::collections::HashMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::segment::Segment;
use super::{location, split_location, SegmentTable};
use crate::chain::{find_index, Node, NodeSource};
use crate::logread::RecordSource;
use crate::read::ReadError;
use crate::record::codec::{
    chain_bytes, decode_chain, decode_record, payload_crc, Chain, Header, Kind, Meta, HEADER_BYTES,
    JUMPS_MAX, META_BYTES_MAX,
};
use crate::record::scan::RecordScan;

/// A shard's segments as a source of records.
#[derive(Clone)]
pub struct WalSource {
    pub table: Arc<SegmentTable>,
}

/// A record's header and its place in the chain.
pub struct RecordHead {
    pub header: Header,
    pub node: Node,
}

impl WalSource {
    /// Reads and checks the header of the record at `location` (and its chain, with
    /// `with_chain`), in place in the map, and that the whole record lies inside it.
    fn read_head(
        &self,
        location: u64,
        with_chain: bool,
    ) -> Result<(Header, Option<Chain>, Arc<Segment>), ReadError> {
        let (ordinal, position) = split_location(location);
        let segment = self.table.get(ordinal).ok_or(ReadError::Storage)?;
        let (position, size) = (position as usize, segment.map.size());
        if position + HEADER_BYTES > size {
            return Err(ReadError::Storage);
        }
        let end = size.min(position + HEADER_BYTES + chain_bytes(JUMPS_MAX));
        let mut decoded = Err(ReadError::Storage);
        segment
            .map
            .visit(position, end, &mut |bytes| decoded = decode_head(bytes, size - position, with_chain));
        let (header, chain) = decoded?;
        Ok((header, chain, segment))
    }

    /// Reads and checks the header of the record at `location`; returns its segment too.
    fn header(&self, location: u64) -> Result<(Header, Arc<Segment>), ReadError> {
        let (header, _, segment) = self.read_head(location, false)?;
        Ok((header, segment))
    }

    /// Reads and checks the header and chain of the record at `location`.
    pub fn head(&self, location: u64) -> Result<RecordHead, ReadError> {
        let (header, chain, _) = self.read_head(location, true)?;
        let chain = chain.expect("asked for the chain");
        let node =
            Node { location, n: chain.n, start: header.offset, end: header.end_offset(), jumps: chain.jumps };
        Ok(RecordHead { header, node })
    }
}

/// Decodes a header (and the chain at the start of its meta) from `bytes`, the start of a
/// record with `room` bytes to the end of its segment.
fn decode_head(bytes: &[u8], room: usize, with_chain: bool) -> Result<(Header, Option<Chain>), ReadError> {
    let raw: &[u8; HEADER_BYTES] = bytes[..HEADER_BYTES].try_into().expect("a header's bytes");
    let header = Header::decode(raw).map_err(|_| ReadError::Storage)?;
    if header.record_len() > room {
        return Err(ReadError::Storage);
    }
    if !with_chain {
        return Ok((header, None));
    }
    let meta = &bytes[HEADER_BYTES..];
    let meta_len = usize::from(header.meta_len);
    let jumps = usize::from(*meta.get(8).ok_or(ReadError::Storage)?);
    let chain_len = chain_bytes(jumps);
    if jumps > JUMPS_MAX || chain_len > meta_len || chain_len > meta.len() {
        return Err(ReadError::Storage);
    }
    let chain = decode_chain(&meta[..chain_len]).map_err(|_| ReadError::Storage)?;
    Ok((header, Some(chain)))
}

impl WalSource {
    /// The whole record at `location`, checked end to end: its header, its meta and its data
    /// (sharing the mapped bytes).
    pub fn record(&self, location: u64) -> Result<(Header, Meta, Bytes), ReadError> {
        let head = self.head(location)?;
        let (ordinal, position) = split_location(location);
        let segment = self.table.get(ordinal).ok_or(ReadError::Storage)?;
        let start = position as usize;
        let bytes = segment.map.slice(start, start + HEADER_BYTES + head.header.payload_len as usize);
        let decoded = decode_record(&bytes).map_err(|_| ReadError::Storage)?;
        let data_start = HEADER_BYTES + usize::from(decoded.header.meta_len);
        Ok((decoded.header, decoded.meta, bytes.slice(data_start..)))
    }

    /// The streams with records in segment `ordinal`, each with its name (read from the
    /// create record its chain leads back to) and one of its records there (location and
    /// chain index). Streams whose chain cannot be walked any more are left out.
    pub fn streams_in(&self, ordinal: u32) -> Vec<Resident> {
        let Some(segment) = self.table.get(ordinal) else {
            return Vec::new();
        };
        let mut witnesses: HashMap<u64, u64> = HashMap::new();
        let bytes = segment.map.slice(0, segment.readable_len() as usize);
        for record in RecordScan::new(bytes, Segment::records_start()) {
            if matches!(record.header.kind, Kind::Create | Kind::Append) {
                witnesses.entry(record.header.stream).or_insert(location(ordinal, record.position));
            }
        }
        let mut residents: Vec<Resident> = witnesses
            .into_iter()
            .filter_map(|(stream, witness)| self.resident(stream, witness).ok())
            .collect();
        residents.sort_by_key(|resident| resident.witness);
        residents
    }

    fn resident(&self, stream: u64, witness: u64) -> Result<Resident, ReadError> {
        let node = self.node(witness)?;
        let create = find_index(self, &node, 0)?;
        let (_, meta, _) = self.record(create.location)?;
        let name = meta.create.ok_or(ReadError::Storage)?.name;
        Ok(Resident { stream, name: Arc::from(name), witness, witness_n: node.n })
    }
}

/// A stream with a record in a segment: see [`WalSource::streams_in`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resident {
    pub stream: u64,
    pub name: Arc<str>,
    /// One of its records in the segment, and that record's index in its chain.
    pub witness: u64,
    pub witness_n: u64,
}

impl NodeSource for WalSource {
    type Error = ReadError;

    fn node(&self, location: u64) -> Result<Node, ReadError> {
        Ok(self.head(location)?.node)
    }
}

impl RecordSource for WalSource {
    fn copy_data(&self, node: &Node, skip: usize, out: &mut BytesMut) -> Result<(), ReadError> {
        let (header, segment) = self.header(node.location)?;
        let meta_len = usize::from(header.meta_len);
        let start = split_location(node.location).1 as usize + HEADER_BYTES;
        let mut checked = Err(ReadError::Storage);
        segment.map.visit(start, start + header.payload_len as usize, &mut |payload| {
            let (meta, data) = payload.split_at(meta_len.min(payload.len()));
            if header.offset == node.start
                && payload_crc(meta, &[data]) == header.payload_crc
                && skip <= data.len()
            {
                out.extend_from_slice(&data[skip..]);
                checked = Ok(());
            }
        });
        checked.inspect_err(|_| {
            tracing::error!(location = node.location, "stored data fails its checksum; the read is refused")
        })
    }

    fn data(&self, node: &Node) -> Result<Bytes, ReadError> {
        let (header, segment) = self.header(node.location)?;
        let (ordinal, position) = split_location(node.location);
        let meta_len = usize::from(header.meta_len);
        if meta_len > META_BYTES_MAX {
            return Err(ReadError::Storage);
        }
        // `header` checked that the whole record lies inside the map.
        let start = position as usize + HEADER_BYTES;
        let payload = segment.map.slice(start, start + header.payload_len as usize);
        let (meta, data) = payload.split_at(meta_len);
        if header.offset != node.start || payload_crc(meta, &[data]) != header.payload_crc {
            tracing::error!(ordinal, position, "stored data fails its checksum; the read is refused");
            return Err(ReadError::Storage);
        }
        Ok(payload.slice(meta_len..))
    }
}
