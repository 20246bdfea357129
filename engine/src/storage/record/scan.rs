//! Reading records in order from a run of stored bytes (a WAL segment, a stream file), each
//! checked end to end, until the bytes end, turn to zeros, reach a seal, or fail a check.
//!
//! Used wherever records are read in sequence: inspection, verification, statistics and
//! compaction's surveys. Data comes out as `Bytes` sharing the scanned bytes (a map).
//! [`next_header`] finds where records resume after bytes that are not a record, so a
//! reader can tell damage followed by intact records from the end of a log.

use bytes::Bytes;

use super::codec::{decode_record, DecodeError, Header, Kind, Meta, HEADER_BYTES, MAGIC, RECORD_ALIGN};

/// Sectors a disk writes whole or not at all (the smallest any disk uses).
pub(crate) const SECTOR_BYTES: usize = 512;

/// Whether the `len` bytes at `start` of `bytes` (which start at a sector boundary of their
/// file) could be a write the disk did not finish: they run past the end, or some sector of
/// them reads as zeros, as space no write reached does (segments are zero-filled ahead,
/// files grow from zeros). Damage to bytes that were written whole shows no such sector.
pub(crate) fn could_be_torn(bytes: &[u8], start: usize, len: usize) -> bool {
    let end = start + len;
    if end > bytes.len() {
        return true;
    }
    let mut sector = start / SECTOR_BYTES * SECTOR_BYTES;
    while sector < end {
        let (from, to) = (sector.max(start), (sector + SECTOR_BYTES).min(end));
        if bytes[from..to].iter().all(|b| *b == 0) {
            return true;
        }
        sector += SECTOR_BYTES;
    }
    false
}

/// Where the last non-zero byte of `bytes` is (`None`: all zeros). Looks at 64 bytes at a
/// time, which the compiler turns into vector instructions: a start scans some megabytes
/// past the end of every shard's log (`wal::recovery`), nearly all of them zeros, and a byte
/// at a time that was most of a small directory's start.
pub(crate) fn last_nonzero(bytes: &[u8]) -> Option<usize> {
    const BLOCK: usize = 64;
    let blocks = bytes.len() / BLOCK * BLOCK;
    if let Some(last) = bytes[blocks..].iter().rposition(|b| *b != 0) {
        return Some(blocks + last);
    }
    let block =
        bytes[..blocks].chunks_exact(BLOCK).rposition(|block| block.iter().fold(0, |any, b| any | b) != 0)?;
    let start = block * BLOCK;
    let last =
        bytes[start..start + BLOCK].iter().rposition(|b| *b != 0).expect("a non-zero byte in the block");
    Some(start + last)
}

/// How many bytes of a record that failed its checks at `start` to judge: the whole record
/// when its header holds, else the header alone.
pub(crate) fn failed_record_len(bytes: &[u8], start: usize) -> usize {
    let header =
        bytes.get(start..start + HEADER_BYTES).and_then(|raw| Header::decode(raw.try_into().ok()?).ok());
    header.map_or(HEADER_BYTES, |header| header.record_len())
}

/// The first position at or after `from` (rounded up to the record alignment) where a
/// header that passes its checks starts, if any.
pub fn next_header(bytes: &[u8], from: usize) -> Option<(usize, Header)> {
    if from >= bytes.len() {
        // Also keeps the rounding below from overflowing (`from` may be a window's end).
        return None;
    }
    let magic = MAGIC.to_le_bytes();
    let mut position = from.div_ceil(RECORD_ALIGN) * RECORD_ALIGN;
    while position + HEADER_BYTES <= bytes.len() {
        if bytes[position..position + 4] == magic {
            let raw: &[u8; HEADER_BYTES] =
                bytes[position..position + HEADER_BYTES].try_into().expect("a header's bytes");
            if let Ok(header) = Header::decode(raw) {
                return Some((position, header));
            }
        }
        position += RECORD_ALIGN;
    }
    None
}

/// Whether records of two different batches follow position `from` of `bytes`: records that
/// pass every check, with sequence numbers from `lsn_min` up to `lsn_min + lsn_span`, each
/// above the one before. Every record of a batch carries the batch's time, and a log (an
/// acid shard's, a file-durable stream file) writes a batch only once every earlier one is
/// durable. So two times after `from` mean that whatever precedes the earlier record was
/// durable before the crash: a record failing its checks (or zeros) there is damage to
/// written data, never the end a crash left.
pub(crate) fn later_batches_follow(bytes: &Bytes, from: usize, lsn_min: u64, lsn_span: u64) -> bool {
    let lsn_max = lsn_min.saturating_add(lsn_span);
    let (mut position, mut lsn_last, mut time_first) = (from, None::<u64>, None::<u64>);
    while let Some((start, _)) = next_header(bytes, position) {
        let mut scan = RecordScan::new(bytes.clone(), start as u64);
        for record in scan.by_ref() {
            let lsn = record.header.lsn.raw();
            if lsn < lsn_min || lsn > lsn_max || lsn_last.is_some_and(|last| lsn <= last) {
                continue;
            }
            lsn_last = Some(lsn);
            match time_first {
                None => time_first = Some(record.header.time_ms),
                Some(time) if time != record.header.time_ms => return true,
                Some(_) => {}
            }
        }
        position = (scan.position() as usize).max(start + 1);
    }
    false
}

/// One record read by a [`RecordScan`].
#[derive(Clone, Debug)]
pub struct Scanned {
    /// Where the record starts in the scanned bytes.
    pub position: u64,
    pub header: Header,
    pub meta: Meta,
    pub data: Bytes,
}

/// Why a scan stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScanEnd {
    /// The bytes ended exactly after a record.
    End,
    /// Zeros where the next record would be: unwritten space, the normal end of a log.
    Unwritten,
    /// A seal record (included in the scan) ends a segment.
    Sealed,
    /// The bytes at the position are not a valid record.
    Damaged(DecodeError),
}

impl ScanEnd {
    /// Whether the scan stopped at something other than a normal end.
    pub fn is_damage(&self) -> bool {
        matches!(self, ScanEnd::Damaged(_))
    }
}

/// Records of `bytes` from a position on.
pub struct RecordScan {
    bytes: Bytes,
    position: u64,
    end: Option<ScanEnd>,
}

impl RecordScan {
    pub fn new(bytes: Bytes, from: u64) -> RecordScan {
        RecordScan { bytes, position: from, end: None }
    }

    /// Where the next record would start (after the scan: where it stopped).
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Why the scan stopped (`None` while it has not).
    pub fn end(&self) -> Option<&ScanEnd> {
        self.end.as_ref()
    }

    fn stop(&mut self, end: ScanEnd) -> Option<Scanned> {
        self.end = Some(end);
        None
    }
}

impl Iterator for RecordScan {
    type Item = Scanned;

    fn next(&mut self) -> Option<Scanned> {
        if self.end.is_some() {
            return None;
        }
        let start = self.position as usize;
        if start >= self.bytes.len() {
            return self.stop(ScanEnd::End);
        }
        let rest = &self.bytes[start..];
        let decoded = match decode_record(rest) {
            Ok(decoded) => decoded,
            Err(DecodeError::Zeroed) => return self.stop(ScanEnd::Unwritten),
            Err(error) => return self.stop(ScanEnd::Damaged(error)),
        };
        let header = decoded.header;
        let data = self.bytes.slice_ref(decoded.data);
        let scanned = Scanned { position: self.position, header, meta: decoded.meta, data };
        self.position += header.record_len() as u64;
        if header.kind == Kind::Seal {
            self.end = Some(ScanEnd::Sealed);
        }
        Some(scanned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{ChainIndex, Lsn, StreamId};
    use crate::offset::Offset;
    use crate::storage::chain::Chain;
    use crate::storage::record::codec::append_for_tests;

    #[test]
    fn the_last_nonzero_byte_is_found_wherever_it_is() {
        for len in [0, 1, 63, 64, 65, 127, 128, 200, 4096] {
            let mut bytes = vec![0u8; len];
            assert_eq!(last_nonzero(&bytes), None, "{len} zeros");
            for at in 0..len {
                bytes.fill(0);
                bytes[at] = 1 + (at % 255) as u8;
                if at > 0 {
                    bytes[at / 2] = 7;
                }
                let expected = bytes.iter().rposition(|b| *b != 0);
                assert_eq!(last_nonzero(&bytes), expected, "{len} bytes, non-zero at {at}");
            }
        }
    }

    fn record(lsn: u64, data: &[u8]) -> Vec<u8> {
        let chain = Chain { n: ChainIndex::CREATE.next(), jumps: vec![crate::ids::Location::from_raw(0)] };
        append_for_tests(StreamId::from_raw(1), &chain, Offset::ZERO, Lsn::from_raw(lsn), data)
    }

    #[test]
    fn scans_records_until_zeros_or_damage() {
        let mut bytes = record(1, b"one");
        bytes.extend(record(2, b"two"));
        let second = record(1, b"x").len() as u64;
        bytes.extend(vec![0; 128]);
        let mut scan = RecordScan::new(Bytes::from(bytes.clone()), 0);
        let read: Vec<_> = scan.by_ref().map(|r| (r.header.lsn.raw(), r.data)).collect();
        assert_eq!(read, vec![(1, Bytes::from_static(b"one")), (2, Bytes::from_static(b"two"))]);
        assert_eq!(scan.end(), Some(&ScanEnd::Unwritten));

        bytes[second as usize + 70] ^= 1;
        let mut scan = RecordScan::new(Bytes::from(bytes), 0);
        assert_eq!(scan.by_ref().count(), 1);
        assert!(scan.end().unwrap().is_damage());
        assert_eq!(scan.position(), second, "the scan stops at the damaged record");
    }

    #[test]
    fn bytes_that_end_after_a_record_end_the_scan() {
        let bytes = record(1, b"only");
        let mut scan = RecordScan::new(Bytes::from(bytes), 0);
        assert_eq!(scan.by_ref().count(), 1);
        assert_eq!(scan.end(), Some(&ScanEnd::End));
    }

    #[test]
    fn next_header_skips_bytes_that_are_not_a_record() {
        let mut bytes = record(1, b"one");
        let second = bytes.len();
        bytes.extend(record(2, b"two"));
        assert_eq!(next_header(&bytes, 0).map(|(at, h)| (at, h.lsn.raw())), Some((0, 1)));
        assert_eq!(next_header(&bytes, 1).map(|(at, h)| (at, h.lsn.raw())), Some((second, 2)));
        bytes[3] ^= 0x40;
        assert_eq!(next_header(&bytes, 0).map(|(at, _)| at), Some(second), "a damaged header is skipped");
        assert_eq!(next_header(&bytes, second + 1), None);
        assert_eq!(next_header(&[0; 256], 0), None);
        assert_eq!(next_header(&bytes, usize::MAX), None, "a position past the end, however far");
    }

    #[test]
    fn torn_writes_leave_a_zero_sector_and_damage_does_not() {
        let mut bytes = vec![0u8; 64];
        bytes.extend(vec![7u8; 2000]);
        assert!(!could_be_torn(&bytes, 64, 2000), "written whole");
        bytes[700] ^= 1;
        assert!(!could_be_torn(&bytes, 64, 2000), "a flipped bit is not a tear");
        bytes[1024..1536].fill(0);
        assert!(could_be_torn(&bytes, 64, 2000), "a sector that never arrived");
        assert!(could_be_torn(&bytes, 64, 4000), "a record running past the end");
        let mut edges = vec![9u8; 1024];
        edges[500..512].fill(0);
        assert!(could_be_torn(&edges, 500, 100), "the record's part of a sector counts");
        assert!(!could_be_torn(&edges, 512, 100));
    }
}
