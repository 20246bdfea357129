//! Copying a run of a stream's records from a segment's bytes in one pass: the fast path of
//! a forward read (`crate::storage::chain::read`'s `one_pass`) over acid's log.
//!
//! A forward read takes record after record: it reads the next header into a chain node,
//! checks that it follows the last one, then checks and copies its data. Done through the
//! general interfaces, each record is a few lookups, dynamic calls and moves of a node with
//! its jump list on the heap — about as much of the core as the crc of 4 KiB of data. Here
//! the bytes of the run are lent once, and each record is checked straight from them: its
//! header (magic, crc, consistency), that the whole record lies in the run, its chain's index
//! and nearest jump ([`peek_chain`]: the same checks as a full decode, without collecting the
//! jumps), that it follows the record before it exactly as [`follows`] demands, and its
//! payload crc — and only then is its data copied. The first record that is anything but
//! plain (not the next of its stream, cut by the read's end, large enough to be sent as a
//! slice, damaged, or past the read's last record) ends the run, copying nothing of it: the
//! general path takes it from there with its own checks, so what is served is exactly what
//! the general path would serve.
//!
//! [`follows`]: crate::storage::chain::follows

use bytes::BytesMut;

use super::location;
use crate::ids::{ChainIndex, Location, StreamId};
use crate::offset::Offset;
use crate::storage::chain::read::COPY_BELOW_BYTES;
use crate::storage::record::codec::{peek_chain, whole_payload_crc, Header, Kind, HEADER_BYTES};

/// The record a run starts after: where it lies and what the next one must continue.
pub(super) struct RunStart {
    pub ordinal: u32,
    /// Its position in the segment; the run's bytes start here.
    pub position: u64,
    pub len: u64,
    pub stream: StreamId,
    pub n: ChainIndex,
    pub end: Offset,
}

/// What a run may take: records up to index `last_n` that start at or before the location
/// `limit` (the read's last record's) and end by `until`.
pub(super) struct RunLimits {
    pub last_n: ChainIndex,
    pub limit: Location,
    pub until: Offset,
}

/// Copies the data of the plain records that follow `start` in `bytes` (the segment's bytes
/// from `start`'s position on) into `out`; returns the position in the segment of the last
/// record copied, or `None` when the first one is not plain.
pub(super) fn copy_plain_records(
    bytes: &[u8],
    start: &RunStart,
    limits: &RunLimits,
    out: &mut BytesMut,
) -> Option<u64> {
    let mut previous = (location(start.ordinal, start.position), start.n, start.end);
    let mut at = usize::try_from(start.len).ok()?;
    let mut copied = None;
    while previous.1 < limits.last_n {
        let position = start.position + at as u64;
        if position >= 1 << 32 || location(start.ordinal, position) > limits.limit {
            break;
        }
        let Some(record) = plain_record(&bytes[at.min(bytes.len())..], start.stream, previous, limits) else {
            break;
        };
        out.extend_from_slice(record.data);
        previous = (location(start.ordinal, position), record.n, record.end);
        copied = Some(position);
        at += record.len;
    }
    copied
}

/// A record checked plain and whole.
struct Plain<'a> {
    n: ChainIndex,
    end: Offset,
    /// The bytes it takes in the log, padding included.
    len: usize,
    data: &'a [u8],
}

/// The record at the start of `bytes` if it is plain: an append of `stream` whose header and
/// payload check, lying whole in `bytes`, that follows `previous` (location, index, end) in
/// its chain, ends by the read's end and holds less data than is sent as a slice.
fn plain_record<'a>(
    bytes: &'a [u8],
    stream: StreamId,
    previous: (Location, ChainIndex, Offset),
    limits: &RunLimits,
) -> Option<Plain<'a>> {
    let raw: &[u8; HEADER_BYTES] = bytes.get(..HEADER_BYTES)?.try_into().ok()?;
    let header = Header::decode(raw).ok()?;
    let len = header.record_len();
    let payload = bytes.get(HEADER_BYTES..HEADER_BYTES + header.payload_len as usize)?;
    let meta_len = usize::from(header.meta_len);
    if header.kind != Kind::Append || len > bytes.len() || meta_len > payload.len() {
        return None;
    }
    let (n, nearest) = peek_chain(&payload[..meta_len]).ok()?;
    let (previous_location, previous_n, previous_end) = previous;
    let follows = header.stream == stream
        && n == previous_n.next()
        && nearest == Some(previous_location)
        && header.offset == previous_end;
    let data = &payload[meta_len..];
    let end = header.end_offset();
    let plain =
        follows && n <= limits.last_n && end <= limits.until && (data.len() as u64) < COPY_BELOW_BYTES;
    if !plain || whole_payload_crc(payload) != header.payload_crc {
        return None;
    }
    Some(Plain { n, end, len, data })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::Lsn;
    use crate::storage::chain::{jump_count, Chain};
    use crate::storage::record::codec::append_for_tests;

    const SEGMENT: u32 = 3;

    /// A log of records; each record's position and chain index.
    #[derive(Default)]
    struct Log {
        bytes: Vec<u8>,
        /// Per stream: (location, index, end) of its last record.
        tails: std::collections::HashMap<u64, (Location, u64, Offset)>,
        /// Records appended so far (the next one's sequence number, less one).
        records: u64,
    }

    impl Log {
        /// Appends the next record of `stream` holding `data`; returns its position.
        fn append(&mut self, stream: u64, data: &[u8]) -> u64 {
            let position = self.bytes.len() as u64;
            let (previous, n, offset) = match self.tails.get(&stream) {
                Some((location, n, end)) => (*location, n + 1, *end),
                None => (location(SEGMENT, 0), 1, Offset::ZERO),
            };
            let index = ChainIndex::from_raw(n);
            let chain = Chain { n: index, jumps: vec![previous; jump_count(index)] };
            self.records += 1;
            let lsn = Lsn::from_raw(self.records);
            let record = append_for_tests(StreamId::from_raw(stream), &chain, offset, lsn, data);
            let raw: &[u8; HEADER_BYTES] = record[..HEADER_BYTES].try_into().unwrap();
            let end = Header::decode(raw).unwrap().end_offset();
            self.bytes.extend_from_slice(&record);
            self.tails.insert(stream, (location(SEGMENT, position), n, end));
            position
        }

        /// The run's start at the record of `stream` at `position` (index `n`, ending at `end`).
        fn start(&self, position: u64, n: u64, end: Offset) -> RunStart {
            let raw: &[u8; HEADER_BYTES] =
                self.bytes[position as usize..][..HEADER_BYTES].try_into().unwrap();
            let header = Header::decode(raw).unwrap();
            RunStart {
                ordinal: SEGMENT,
                position,
                len: header.record_len() as u64,
                stream: header.stream,
                n: ChainIndex::from_raw(n),
                end,
            }
        }

        fn copy(&self, start: &RunStart, limits: &RunLimits) -> (Option<u64>, Vec<u8>) {
            let mut out = BytesMut::new();
            let copied = copy_plain_records(&self.bytes[start.position as usize..], start, limits, &mut out);
            (copied, out.to_vec())
        }
    }

    fn limits(last_n: u64) -> RunLimits {
        RunLimits {
            last_n: ChainIndex::from_raw(last_n),
            limit: location(SEGMENT, u32::MAX as u64),
            until: Offset { messages: u64::MAX, bytes: u64::MAX },
        }
    }

    /// A log of one stream's records 1..=count, each `size` bytes of `index as u8`.
    fn one_stream(count: u8, size: usize) -> (Log, Vec<u64>) {
        let mut log = Log::default();
        let positions = (1..=count).map(|i| log.append(7, &vec![i; size])).collect();
        (log, positions)
    }

    fn offset_after(records: u64, size: usize) -> Offset {
        Offset { messages: records, bytes: records * size as u64 }
    }

    #[test]
    fn a_run_copies_every_following_record_up_to_the_last() {
        let (log, positions) = one_stream(5, 100);
        let start = log.start(positions[0], 1, offset_after(1, 100));
        let (copied, data) = log.copy(&start, &limits(5));
        assert_eq!(copied, Some(positions[4]));
        let expected: Vec<u8> = (2..=5u8).flat_map(|i| vec![i; 100]).collect();
        assert_eq!(data, expected);
        let (copied, data) = log.copy(&start, &limits(3));
        assert_eq!((copied, data.len()), (Some(positions[2]), 200), "never past the last record");
    }

    #[test]
    fn a_run_ends_before_another_streams_record() {
        let mut log = Log::default();
        let first = log.append(7, b"a");
        let second = log.append(7, b"b");
        log.append(8, b"other");
        log.append(7, b"c");
        let start = log.start(first, 1, Offset { messages: 1, bytes: 1 });
        assert_eq!(log.copy(&start, &limits(3)), (Some(second), b"b".to_vec()));
    }

    #[test]
    fn a_run_copies_nothing_of_a_damaged_record_or_after_it() {
        let (clean, positions) = one_stream(4, 64);
        let third = positions[2] as usize;
        let raw: &[u8; HEADER_BYTES] = clean.bytes[third..][..HEADER_BYTES].try_into().unwrap();
        let record_bytes = HEADER_BYTES + Header::decode(raw).unwrap().payload_len as usize;
        // Every byte of the third record but its padding, which nothing reads.
        for index in (third..third + record_bytes).step_by(3) {
            let mut log = Log { bytes: clean.bytes.clone(), ..Log::default() };
            log.bytes[index] ^= 0x10;
            let start = log.start(positions[0], 1, offset_after(1, 64));
            let (copied, data) = log.copy(&start, &limits(4));
            assert_eq!(copied, Some(positions[1]), "flip at {index} went unnoticed");
            assert_eq!(data, vec![2; 64]);
        }
    }

    #[test]
    fn a_run_leaves_records_cut_by_the_read_large_ones_and_those_past_its_limit() {
        let (log, positions) = one_stream(4, 100);
        let start = log.start(positions[0], 1, offset_after(1, 100));
        let cut = RunLimits { until: Offset { messages: 3, bytes: 250 }, ..limits(4) };
        assert_eq!(log.copy(&start, &cut).0, Some(positions[1]), "the third record ends past 250");
        let limited = RunLimits { limit: location(SEGMENT, positions[2]), ..limits(4) };
        assert_eq!(log.copy(&start, &limited).0, Some(positions[2]), "none starts past the limit");
        let mut large = Log::default();
        let first = large.append(7, b"x");
        large.append(7, &vec![1; COPY_BELOW_BYTES as usize]);
        let start = large.start(first, 1, Offset { messages: 1, bytes: 1 });
        assert_eq!(large.copy(&start, &limits(2)), (None, Vec::new()), "sent as a slice, not copied");
    }

    #[test]
    fn a_run_checks_the_chain_it_follows() {
        let (log, positions) = one_stream(3, 10);
        let wrong_end = log.start(positions[0], 1, offset_after(1, 11));
        assert_eq!(log.copy(&wrong_end, &limits(3)).0, None, "the next must start where this ends");
        let wrong_n = log.start(positions[0], 2, offset_after(1, 10));
        assert_eq!(log.copy(&wrong_n, &limits(3)).0, None, "the next must be the next index");
        let mut wrong_place = log.start(positions[0], 1, offset_after(1, 10));
        wrong_place.position += 8;
        wrong_place.len -= 8;
        let mut out = BytesMut::new();
        let shifted =
            copy_plain_records(&log.bytes[positions[0] as usize..], &wrong_place, &limits(3), &mut out);
        assert_eq!(shifted, None, "the next must name this record as its nearest jump");
    }
}
