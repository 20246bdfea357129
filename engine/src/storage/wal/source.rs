//! Reading records and stream data from a shard's mapped segments.
//!
//! Headers are copied out of the map (64 bytes plus the chain part of the meta) and checked
//! once per read, when a reader steps onto the record; the checked header's lengths and
//! payload crc travel with the chain node, so the data is found and checked against that crc
//! without decoding the header again, then handed out as `Bytes` that point into the map, so a catch-up read copies nothing until the socket does. Bytes
//! that fail a check, or a segment that is gone, are never served: the read fails with
//! [`ReadError::Damaged`]. Where a stream's chain is damaged, [`RecordSource::successor`]
//! finds the stream's next record by reading the log forward from a record.
//!
//! Records are read through a [`WalReader`], made for one read (or one walk) and dropped with
//! it: it keeps the segment it looked up last, so a read whose records lie in one segment
//! takes the segment table's lock and the segment's reference count once, not twice per
//! record. Those atomic steps, each right behind a record's copy, wait for the copy's
//! stores to drain. Taking them once per read makes catch-up reads of small records faster
//! (docs/performance/code-choices.md). A segment the reader holds stays mapped until the read ends, even if
//! compaction removes it from the table meanwhile; its bytes never change.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::run::{copy_plain_records, RunLimits, RunStart};
use super::segment::Segment;
use super::{location, split_location, SegmentTable};
use crate::ids::{ChainIndex, Location, StreamId};
use crate::offset::Offset;
use crate::storage::chain::read::RecordSource;
use crate::storage::chain::{find_index, Chain, Node, NodeSource};
use crate::storage::chunk::{Chunk, Message, ReadError};
use crate::storage::maintenance::Resident;
use crate::storage::record::codec::{
    chain_bytes, decode_chain, decode_record, whole_payload_crc, DecodeError, Header, Kind, Meta,
    HEADER_BYTES, JUMPS_MAX, META_BYTES_MAX,
};
use crate::storage::record::scan::{next_header, RecordScan};
use crate::storage::{LogStore, LogView};

/// A shard's segments as a source of records: a handle readers make [`WalReader`]s from.
#[derive(Clone)]
pub struct WalSource {
    pub table: Arc<SegmentTable>,
}

/// One read's way into a shard's segments (see the module doc): not shared between threads.
pub struct WalReader<'a> {
    table: &'a SegmentTable,
    /// The segment looked up last.
    recent: RefCell<Option<Arc<Segment>>>,
}

impl WalSource {
    /// A reader for one read or walk.
    pub fn reader(&self) -> WalReader<'_> {
        WalReader { table: &self.table, recent: RefCell::new(None) }
    }

    /// The whole record at `location`, checked end to end (see [`WalReader::record`]).
    pub fn record(&self, location: Location) -> Result<(Header, Meta, Bytes), ReadError> {
        self.reader().record(location)
    }

    /// The streams with records in segment `ordinal` (see [`WalReader::streams_in`]).
    pub fn streams_in(&self, ordinal: u32) -> Vec<Resident> {
        self.reader().streams_in(ordinal)
    }
}

impl LogStore for WalSource {
    fn chunk(&self, view: LogView, from: Offset, bytes_max: usize) -> Result<Chunk, ReadError> {
        view.read(&self.reader()).chunk(from, bytes_max)
    }

    fn messages(&self, view: LogView, from: Offset, bytes_max: usize) -> Result<Vec<Message>, ReadError> {
        view.read(&self.reader()).messages(from, bytes_max)
    }
}

/// A record's header and its place in the chain.
pub struct RecordHead {
    pub header: Header,
    pub node: Node,
}

/// What is at a position of a segment.
enum Slot {
    Record(Header, Option<Chain>),
    /// Zeros: nothing was ever written here.
    Unwritten,
    /// Bytes that are not a record (or a record that runs past the segment).
    Damaged,
}

impl WalReader<'_> {
    /// Lends segment `ordinal` to `use_segment` (looked up only when it is not the one
    /// looked up last); `Damaged` when the segment is gone.
    fn with_segment<R>(
        &self,
        ordinal: u32,
        use_segment: impl FnOnce(&Arc<Segment>) -> R,
    ) -> Result<R, ReadError> {
        let mut recent = self.recent.borrow_mut();
        if recent.as_ref().is_none_or(|segment| segment.ordinal() != ordinal) {
            *recent = Some(self.table.get(ordinal).ok_or(ReadError::Damaged)?);
        }
        let segment = recent.as_ref().expect("the segment was just looked up");
        debug_assert_eq!(segment.ordinal(), ordinal, "the reader lends the segment asked for");
        Ok(use_segment(segment))
    }

    /// Reads and checks the header of the record at `location` (and its chain, with
    /// `with_chain`), in place in the map, and that the whole record lies inside it.
    fn read_head(&self, location: Location, with_chain: bool) -> Result<(Header, Option<Chain>), ReadError> {
        let (ordinal, position) = split_location(location);
        match self.with_segment(ordinal, |segment| slot(segment, position, with_chain))? {
            Slot::Record(header, chain) => Ok((header, chain)),
            Slot::Unwritten | Slot::Damaged => Err(ReadError::Damaged),
        }
    }

    /// Reads and checks the header and chain of the record at `location`.
    pub fn head(&self, location: Location) -> Result<RecordHead, ReadError> {
        let (header, chain) = self.read_head(location, true)?;
        let chain = chain.ok_or(ReadError::Damaged)?;
        Ok(RecordHead { node: header.chain_node(location, chain), header })
    }
}

impl WalReader<'_> {
    /// Checks the data of the record `node` describes against the crc its header gave, in
    /// place in the map; hands the checked data to `checked` (only when it passes) and
    /// returns what `checked` made of it.
    fn checked_data<R>(
        &self,
        node: &Node,
        checked: impl FnOnce(&Segment, Range<usize>) -> R,
    ) -> Result<R, ReadError> {
        let (ordinal, position) = split_location(node.location);
        self.with_segment(ordinal, |segment| {
            check_data(segment, node, position).map(|data| checked(segment, data))
        })?
    }
}

/// Checks the data of the record `node` describes (at `position` of `segment`) against the
/// crc its header gave, in place in the map; returns where the checked data lies in the map.
fn check_data(segment: &Segment, node: &Node, position: u64) -> Result<Range<usize>, ReadError> {
    let stored = node.stored;
    let meta_len = usize::from(stored.meta_len);
    let start = position as usize + HEADER_BYTES;
    let end = start + stored.payload_len as usize;
    if meta_len > META_BYTES_MAX || meta_len > stored.payload_len as usize || end > segment.map.size() {
        return Err(ReadError::Damaged);
    }
    let mut intact = false;
    segment.map.visit(start, end, &mut |payload| intact = whole_payload_crc(payload) == stored.payload_crc);
    if !intact {
        let ordinal = segment.ordinal();
        tracing::error!(ordinal, position, "stored data fails its checksum; the read is refused");
        return Err(ReadError::Damaged);
    }
    Ok(start + meta_len..end)
}

/// What is at `position` of `segment` (with the chain at the start of the meta when asked).
fn slot(segment: &Segment, position: u64, with_chain: bool) -> Slot {
    let (position, size) = (position as usize, segment.map.size());
    if position + HEADER_BYTES > size {
        return Slot::Damaged;
    }
    let end = size.min(position + HEADER_BYTES + chain_bytes(JUMPS_MAX));
    let mut found = Slot::Damaged;
    segment.map.visit(position, end, &mut |bytes| found = decode_head(bytes, size - position, with_chain));
    found
}

/// Decodes a header (and the chain at the start of its meta) from `bytes`, the start of a
/// record with `room` bytes to the end of its segment.
fn decode_head(bytes: &[u8], room: usize, with_chain: bool) -> Slot {
    let raw: &[u8; HEADER_BYTES] = bytes[..HEADER_BYTES].try_into().expect("a header's bytes");
    let header = match Header::decode(raw) {
        Ok(header) => header,
        Err(DecodeError::Zeroed) => return Slot::Unwritten,
        Err(_) => return Slot::Damaged,
    };
    if header.record_len() > room {
        return Slot::Damaged;
    }
    if !with_chain || !matches!(header.kind, Kind::Create | Kind::Append) {
        return Slot::Record(header, None);
    }
    let meta = &bytes[HEADER_BYTES..];
    let meta_len = usize::from(header.meta_len);
    let Some(jumps) = meta.get(8).map(|count| usize::from(*count)) else {
        return Slot::Damaged;
    };
    let chain_len = chain_bytes(jumps);
    if jumps > JUMPS_MAX || chain_len > meta_len || chain_len > meta.len() {
        return Slot::Damaged;
    }
    match decode_chain(&meta[..chain_len]) {
        Ok(chain) => Slot::Record(header, Some(chain)),
        Err(_) => Slot::Damaged,
    }
}

impl WalReader<'_> {
    /// Segment `ordinal`, shared; `Damaged` when it is gone.
    fn segment(&self, ordinal: u32) -> Result<Arc<Segment>, ReadError> {
        self.with_segment(ordinal, Arc::clone)
    }

    /// The whole record at `location`, checked end to end: its header, its meta and its data
    /// (sharing the mapped bytes).
    pub fn record(&self, location: Location) -> Result<(Header, Meta, Bytes), ReadError> {
        let (header, _) = self.read_head(location, false)?;
        let (ordinal, start) = split_location(location);
        let end = start as usize + HEADER_BYTES + header.payload_len as usize;
        let bytes = self.with_segment(ordinal, |segment| segment.map.slice(start as usize, end))?;
        let decoded = decode_record(&bytes).map_err(|_| ReadError::Damaged)?;
        let data_start = HEADER_BYTES + usize::from(decoded.header.meta_len);
        Ok((decoded.header, decoded.meta, bytes.slice(data_start..)))
    }

    /// The streams with records in segment `ordinal`, each with its name (read from the
    /// create record its chain leads back to) and one of its records there (location and
    /// chain index). Streams whose chain cannot be walked any more are left out.
    pub fn streams_in(&self, ordinal: u32) -> Vec<Resident> {
        let Ok(segment) = self.segment(ordinal) else {
            return Vec::new();
        };
        let mut witnesses: HashMap<StreamId, Location> = HashMap::new();
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

    fn resident(&self, stream: StreamId, witness: Location) -> Result<Resident, ReadError> {
        let node = self.node(witness)?;
        let create = find_index(self, &node, ChainIndex::CREATE)?;
        let (_, meta, _) = self.record(create.location)?;
        let name = meta.create.ok_or(ReadError::Damaged)?.name;
        Ok(Resident { stream, name: Arc::from(name), witness, witness_n: node.n })
    }

    /// Where records resume after the bytes at `position` of `segment`, which are not one.
    fn resume_after(&self, segment: &Segment, position: u64) -> Option<u64> {
        let size = segment.readable_len() as usize;
        let bytes = segment.map.slice(position as usize, size);
        next_header(&bytes, 1).map(|(offset, _)| position + offset as u64)
    }
}

impl NodeSource for WalReader<'_> {
    type Error = ReadError;

    fn node(&self, location: Location) -> Result<Node, ReadError> {
        Ok(self.head(location)?.node)
    }

    /// The record at `node`'s end, in the same segment.
    fn next_in_log(&self, node: &Node, limit: Location) -> Option<Node> {
        let (ordinal, position) = split_location(node.location);
        let next = location(ordinal, position + node.len);
        (next <= limit).then(|| self.head(next).ok()).flatten().map(|head| head.node)
    }
}

impl RecordSource for WalReader<'_> {
    /// The data of the record `node` describes, checked against the crc its header gave
    /// (the header itself was checked when `node` was read), sharing the mapped bytes.
    fn data(&self, node: &Node) -> Result<Bytes, ReadError> {
        self.checked_data(node, |segment, data| segment.map.slice(data.start, data.end))
    }

    /// Copies the checked data from the map, making no `Bytes` of it on the way.
    fn copy_data(&self, node: &Node, skip: usize, out: &mut BytesMut) -> Result<(), ReadError> {
        self.checked_data(node, |segment, data| {
            let from =
                data.start.checked_add(skip).filter(|from| *from <= data.end).ok_or(ReadError::Damaged)?;
            segment.map.visit(from, data.end, &mut |rest| out.extend_from_slice(rest));
            Ok(())
        })?
    }

    /// Copies the run of plain records behind `node` straight from the segment's bytes
    /// (`super::run`); the last one copied comes back as a node, its head read again whole.
    fn copy_run(&self, node: &Node, last: &Node, until: Offset, out: &mut BytesMut) -> Option<Node> {
        let (ordinal, position) = split_location(node.location);
        let (last_ordinal, last_position) = split_location(last.location);
        let start =
            RunStart { ordinal, position, len: node.len, stream: node.stream, n: node.n, end: node.end };
        let limits = RunLimits { last_n: last.n, limit: last.location, until };
        let before = out.len();
        let copied = self.with_segment(ordinal, |segment| {
            let size = segment.map.size();
            let end =
                if last_ordinal == ordinal { size.min((last_position + last.len) as usize) } else { size };
            let mut copied = None;
            if (position as usize) < end {
                segment.map.visit(position as usize, end, &mut |bytes| {
                    copied = copy_plain_records(bytes, &start, &limits, out);
                });
            }
            copied
        });
        let head = self.head(location(ordinal, copied.ok()??));
        if head.is_err() {
            // Cannot happen to bytes the run just checked; if it did, the run takes nothing.
            out.truncate(before);
        }
        Some(head.ok()?.node)
    }

    /// Reads the log forward from `node`, over other streams' records (and past bytes that
    /// are not records), to the record that names `node` as its predecessor.
    fn successor(
        &self,
        node: &Node,
        limit: Location,
        scan_bytes: &mut u64,
    ) -> Result<Option<Node>, ReadError> {
        let (ordinal, position) = split_location(node.location);
        self.walk((ordinal, position + node.len), limit, scan_bytes, |next| {
            let named = next.stream == node.stream && next.jumps.first() == Some(&node.location);
            match named && next.n == node.n.next() {
                true if next.start == node.end => Walk::Found,
                true => Walk::Damaged,
                false => Walk::On,
            }
        })
    }

    /// Reads the log forward from its oldest segment to the stream's create record.
    fn first_record(
        &self,
        stream: StreamId,
        limit: Location,
        scan_bytes: &mut u64,
    ) -> Result<Option<Node>, ReadError> {
        let Some(oldest) = self.table.all().first().map(|segment| segment.ordinal()) else {
            return Ok(None);
        };
        self.walk((oldest, Segment::records_start()), limit, scan_bytes, |next| {
            match next.stream == stream && next.n.is_create() {
                true => Walk::Found,
                false => Walk::On,
            }
        })
    }
}

/// What a forward walk makes of a record it passes.
enum Walk {
    On,
    Found,
    Damaged,
}

impl WalReader<'_> {
    /// Reads the log forward from `start` (segment ordinal and position) up to the location
    /// `limit`, across sealed segments and past bytes that are not records, offering each
    /// create and append record to `visit` until it finds one. Counts down `*scan_bytes`.
    fn walk(
        &self,
        start: (u32, u64),
        limit: Location,
        scan_bytes: &mut u64,
        visit: impl Fn(&Node) -> Walk,
    ) -> Result<Option<Node>, ReadError> {
        let (mut ordinal, mut position) = start;
        while location(ordinal, position) <= limit && *scan_bytes > 0 {
            let segment = self.segment(ordinal)?;
            let step = match slot(&segment, position, true) {
                Slot::Record(header, _) if header.kind == Kind::Seal => None,
                Slot::Record(header, Some(chain)) => {
                    let node = header.chain_node(location(ordinal, position), chain);
                    match visit(&node) {
                        Walk::Found => return Ok(Some(node)),
                        Walk::Damaged => return Err(ReadError::Damaged),
                        Walk::On => Some(header.record_len() as u64),
                    }
                }
                Slot::Record(header, None) => Some(header.record_len() as u64),
                Slot::Unwritten => return Ok(None),
                Slot::Damaged => self.resume_after(&segment, position).map(|at| at - position),
            };
            let skipped = match step {
                Some(bytes) => {
                    position += bytes;
                    bytes
                }
                None => {
                    let rest = segment.readable_len().saturating_sub(position);
                    (ordinal, position) = (ordinal + 1, Segment::records_start());
                    rest
                }
            };
            *scan_bytes = scan_bytes.saturating_sub(skipped);
        }
        Ok(None)
    }
}
