//! Reading records and stream data from a shard's mapped segments.
//!
//! Headers are copied out of the map (64 bytes plus the chain part of the meta) and checked
//! again on every read; stream data is checked against its crc, then handed out as `Bytes`
//! that point into the map, so a catch-up read copies nothing until the socket does. Bytes
//! that fail a check are never served: the read fails with [`ReadError::Storage`].

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use super::segment::Segment;
use super::{location, split_location, SegmentTable};
use crate::chain::{find_index, Node, NodeSource};
use crate::logread::RecordSource;
use crate::read::ReadError;
use crate::record::codec::{
    chain_bytes, decode_chain, decode_record, payload_crc, Header, Kind, Meta, HEADER_BYTES, JUMPS_MAX,
    META_BYTES_MAX,
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
    /// Reads and checks the header and chain of the record at `location`.
    pub fn head(&self, location: u64) -> Result<RecordHead, ReadError> {
        let (ordinal, position) = split_location(location);
        let segment = self.table.get(ordinal).ok_or(ReadError::Storage)?;
        let position = position as usize;
        let mut raw = [0u8; HEADER_BYTES];
        if position + HEADER_BYTES > segment.map.size() {
            return Err(ReadError::Storage);
        }
        segment.map.read(position, &mut raw);
        let header = Header::decode(&raw).map_err(|_| ReadError::Storage)?;
        if position + header.record_len() > segment.map.size() {
            return Err(ReadError::Storage);
        }
        let mut chain_raw = [0u8; 9 + 8 * JUMPS_MAX];
        let chain_len = chain_bytes_at(
            &segment.map,
            position + HEADER_BYTES,
            usize::from(header.meta_len),
            &mut chain_raw,
        )?;
        let chain = decode_chain(&chain_raw[..chain_len]).map_err(|_| ReadError::Storage)?;
        let node =
            Node { location, n: chain.n, start: header.offset, end: header.end_offset(), jumps: chain.jumps };
        Ok(RecordHead { header, node })
    }
}

/// Copies the chain part of a meta starting at `at` into `buffer`; returns its length.
fn chain_bytes_at(
    map: &Arc<dyn crate::vfs::FileMap>,
    at: usize,
    meta_len: usize,
    buffer: &mut [u8; 9 + 8 * JUMPS_MAX],
) -> Result<usize, ReadError> {
    if meta_len < 9 {
        return Err(ReadError::Storage);
    }
    map.read(at, &mut buffer[..9]);
    let len = chain_bytes(usize::from(buffer[8]));
    if len > meta_len || usize::from(buffer[8]) > JUMPS_MAX {
        return Err(ReadError::Storage);
    }
    map.read(at + 9, &mut buffer[9..len]);
    Ok(len)
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
    fn data(&self, node: &Node) -> Result<Bytes, ReadError> {
        let head = self.head(node.location)?;
        let (ordinal, position) = split_location(node.location);
        let segment = self.table.get(ordinal).ok_or(ReadError::Storage)?;
        let start = position as usize + HEADER_BYTES + usize::from(head.header.meta_len);
        let meta_len = usize::from(head.header.meta_len);
        if meta_len > META_BYTES_MAX {
            return Err(ReadError::Storage);
        }
        let mut meta = [0u8; META_BYTES_MAX];
        segment.map.read(position as usize + HEADER_BYTES, &mut meta[..meta_len]);
        let data = segment.map.slice(start, start + head.header.data_len() as usize);
        if payload_crc(&meta[..meta_len], &[&data]) != head.header.payload_crc {
            tracing::error!(ordinal, position, "stored data fails its checksum; the read is refused");
            return Err(ReadError::Storage);
        }
        Ok(data)
    }
}
