//! Replaying a shard's log: every record after the checkpoint, checked and applied in order.
//!
//! Replay checks every record end to end (header crc, payload crc, sequence number, and that
//! it continues its stream: see `storage::replay`). A record that fails its checks is one of
//! two things:
//!
//! - **a torn write**, the unacknowledged end of the log a crash left: only in the last
//!   segment, only where some sector of the record reads as zeros (space the write never
//!   reached), only when no record follows beyond the window a crash can leave unsynced,
//!   and only when the records that follow are all of one batch (one time: a later batch is
//!   written only once the earlier ones are durable). Replay stops there, and recovery seals
//!   the log right after the last good record. Zeros where a record should start end the
//!   log by the same rule: followed by records of two batches, they are damage.
//! - **damage** anywhere else: bytes that were written whole and synced, then changed or
//!   lost. Replay notes it, steps over it (by the record's own length when its header holds,
//!   else to the next record that passes its checks) and goes on. The record's stream, when
//!   known, is marked damaged; streams whose records stop following on are marked too.
//!
//! Compaction's copies (`MOVED`) build a shadow chain that replaces the stream's chain only
//! when the copy flagged `MOVE_END` is reached; a move interrupted by anything else was cut
//! short by a crash (or damaged) and is dropped, leaving the stream's chain as it was.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;

use super::checkpoint::Checkpoint;
use super::ledger::LedgerState;
use super::segment::Segment;
use super::snapshots::Snapshots;
use super::{location, split_location};
use crate::ids::{Location, Lsn, StreamId};
use crate::meta::StreamSnapshot;
use crate::storage::record::codec::{flags, Header, Kind, MAGIC};
use crate::storage::record::scan::{
    could_be_torn, failed_record_len, later_batches_follow, next_header, RecordScan, ScanEnd, Scanned,
};
use crate::storage::replay;
use crate::storage::Damage;

/// How far past a record that fails its checks replay looks for the next good one, in
/// sequence numbers (more would be another log's records carried as data).
const RESYNC_LSN_MAX: u64 = 1 << 16;

/// Where replay left the log.
pub(super) enum ReplayEnd {
    /// Writing continues in `segments[index]` at `position`.
    Continue { index: usize, position: u64 },
    /// The last segment is sealed (or there is none): a new one with this ordinal is needed.
    NeedSegment { ordinal: u32 },
}

/// The state replay builds.
pub(super) struct Replay {
    pub streams: Snapshots,
    pub ledger: LedgerState,
    pub next_lsn: Lsn,
    pub stream_id_next: StreamId,
    /// Where replay starts: segment ordinal and position.
    pub start: (u32, u64),
    pub records: u64,
    pub bytes: u64,
    /// Damage replay stepped over, in log order.
    pub damage: Vec<Damage>,
    /// Where replay stopped at a torn write: the unacknowledged end of the log.
    pub torn: Option<Damage>,
    /// Replay starts without a checkpoint after removed segments: records of streams created
    /// there (deleted streams, or the segments would still be here) are skipped.
    pub orphans_expected: bool,
    /// The streams' names, for a create's check that its name is free: made at the first
    /// create replayed (a start with nothing after its checkpoint never needs them).
    names: Option<HashSet<Arc<str>>>,
    /// Streams whose create record was lost: their later records are skipped.
    lost_streams: HashSet<StreamId>,
    /// A move being replayed: its copies so far.
    moving: Option<Moving>,
    /// Replay starts from a checkpoint.
    pub checkpoint_used: bool,
    /// Bytes past a failed record within which a crash can have left a torn batch.
    window: u64,
}

/// The copies of a move replayed so far.
struct Moving {
    stream: StreamId,
    shadow: StreamSnapshot,
    /// Bytes of the copies per segment (live once the move is complete).
    bytes: BTreeMap<u32, u64>,
}

/// How a segment's records ended.
enum SegmentEnd {
    Sealed,
    /// Unwritten (zeroed) space: the end of the log if this is the last segment.
    Unwritten,
    /// A torn write: the end of the log.
    Torn(String),
}

impl Replay {
    /// Replay from `checkpoint` (if there is one) over `segments`; `window`: bytes past a
    /// failed record within which a crash can have left a torn batch. The checkpoint's
    /// streams move into the replay (a copy would hold every stream twice at a start).
    pub(super) fn start(checkpoint: Option<Checkpoint>, segments: &[Arc<Segment>], window: u64) -> Replay {
        let mut replay = Replay {
            streams: Snapshots::default(),
            names: None,
            ledger: LedgerState::default(),
            next_lsn: segments.first().map_or(Lsn::FIRST, |s| s.header.first_lsn),
            stream_id_next: StreamId::FIRST,
            start: (segments.first().map_or(0, |s| s.ordinal()), Segment::records_start()),
            records: 0,
            bytes: 0,
            damage: Vec::new(),
            torn: None,
            orphans_expected: segments.first().is_some_and(|s| s.ordinal() > 0),
            lost_streams: HashSet::new(),
            moving: None,
            checkpoint_used: false,
            window,
        };
        if let Some(checkpoint) = checkpoint {
            replay.streams = Snapshots::from_vec(checkpoint.streams);
            replay.ledger = checkpoint.ledger;
            replay.next_lsn = checkpoint.next_lsn;
            replay.stream_id_next = checkpoint.stream_id_next;
            replay.start = (checkpoint.resume_ordinal, checkpoint.resume_position);
            replay.orphans_expected = false;
            replay.checkpoint_used = true;
        }
        replay
    }

    /// Replays every segment from the start position to the end of the log (or a torn write).
    pub(super) fn run(&mut self, segments: &[Arc<Segment>]) -> ReplayEnd {
        let Some(first) = segments.iter().position(|s| s.ordinal() >= self.start.0) else {
            let after = segments.last().map_or(0, |s| s.ordinal() + 1);
            let ordinal = if self.checkpoint_used { after.max(self.start.0 + 1) } else { after };
            return ReplayEnd::NeedSegment { ordinal };
        };
        let mut position = self.start.1;
        for index in first..segments.len() {
            let segment = &segments[index];
            let last = index + 1 == segments.len();
            if index > first || segment.ordinal() != self.start.0 {
                position = Segment::records_start();
                self.enter(segment);
            }
            match self.replay_segment(segment, &mut position, last) {
                SegmentEnd::Sealed if !last => {}
                SegmentEnd::Sealed => return ReplayEnd::NeedSegment { ordinal: segment.ordinal() + 1 },
                SegmentEnd::Unwritten if last => return ReplayEnd::Continue { index, position },
                SegmentEnd::Unwritten => {
                    let reason = "a segment without its seal is followed by another".to_string();
                    self.damage.push(damage_at(segment, position, reason));
                }
                SegmentEnd::Torn(reason) => {
                    self.torn = Some(Damage::torn_end(segment.path.clone(), position, reason));
                    return ReplayEnd::Continue { index, position };
                }
            }
        }
        unreachable!("the loop returns at the last segment")
    }

    /// Notes sequence numbers that no segment holds before `segment` starts.
    fn enter(&mut self, segment: &Segment) {
        let first_lsn = segment.header.first_lsn;
        if first_lsn != self.next_lsn {
            let reason = format!("segment starts at sequence {first_lsn}, {} was expected", self.next_lsn);
            self.damage.push(damage_at(segment, 0, reason));
            self.next_lsn = self.next_lsn.max(first_lsn);
        }
    }

    /// Replays records of one segment from `position` (left after the last one replayed).
    fn replay_segment(&mut self, segment: &Segment, position: &mut u64, last: bool) -> SegmentEnd {
        let size = segment.readable_len();
        if *position > size {
            let reason = format!("the checkpoint resumes at {position}, past the segment's end at {size}");
            self.damage.push(damage_at(segment, size, reason));
            *position = size;
        }
        let bytes = segment.map.slice(0, size as usize);
        loop {
            let mut scan = RecordScan::new(bytes.clone(), *position);
            for record in scan.by_ref() {
                assert!(record.position >= *position, "replay moves forward through a segment");
                *position = record.position + record.header.record_len() as u64;
                if self.replay_record(segment, &record) {
                    return SegmentEnd::Sealed;
                }
            }
            let failed = scan.position() as usize;
            let error = match scan.end() {
                Some(ScanEnd::Damaged(error)) => Some(*error),
                _ => None,
            };
            // Zeros, or in the last segment a record that could be a write the disk did not
            // finish (a sector of it reads as zeros), end the log unless what follows proves
            // that it went on.
            let could_end =
                error.is_none() || (last && could_be_torn(&bytes, failed, failed_record_len(&bytes, failed)));
            if could_end && !self.written_after(segment, &bytes, failed, last) {
                return match error {
                    Some(error) => SegmentEnd::Torn(format!("record {}: {error}", self.next_lsn)),
                    None => SegmentEnd::Unwritten,
                };
            }
            let reason = match error {
                Some(error) => format!("record {}: {error}", self.next_lsn),
                None => format!("record {}: zeros where it was written (records follow)", self.next_lsn),
            };
            match self.step_over(segment, &bytes, failed, reason) {
                Some(next) => *position = next,
                None if last => return SegmentEnd::Unwritten,
                // The rest of a sealed segment is unreadable: on with the next one.
                None => return SegmentEnd::Sealed,
            }
        }
    }

    /// Whether what follows `failed` proves that the log went on past it, so that a record
    /// failing its checks (or zeros) there is damage rather than the end of the log: in
    /// the last segment, a record beyond the window a crash can leave unsynced, or records
    /// of two batches (`later_batches_follow`); in an earlier one (fully synced before the
    /// next began), any record that continues the sequence. Only the written part of the
    /// last segment is read, through its file: the space zero-filled ahead ends at the
    /// file's first hole, and mapping it would bring megabytes of nothing into memory.
    fn written_after(&self, segment: &Segment, bytes: &Bytes, failed: usize, last: bool) -> bool {
        let next = self.next_lsn.raw();
        // (Even where a clean stop's checkpoint ended the log: a restart may have written on
        // from there, and crashed before its next checkpoint.)
        if !last {
            return next_header(bytes, failed.saturating_add(1)).is_some_and(|(_, header)| {
                header.lsn > self.next_lsn && header.lsn.raw() - next <= RESYNC_LSN_MAX
            });
        }
        // Positions in `written` count from `failed` (a record boundary, so aligned).
        let written = segment.written_from(failed as u64);
        next_header(&written, self.window as usize).is_some()
            || later_batches_follow(&written, 1, next, RESYNC_LSN_MAX)
    }

    /// Steps over damage at `failed`: to the end of the record when its header holds (its
    /// stream is then known), else to the next record that passes its checks and continues
    /// the sequence. `None` when nothing readable follows in the segment.
    fn step_over(&mut self, segment: &Segment, bytes: &Bytes, failed: usize, reason: String) -> Option<u64> {
        self.damage.push(damage_at(segment, failed as u64, reason.clone()));
        let raw = bytes.get(failed..failed + crate::storage::record::codec::HEADER_BYTES);
        if let Some(header) = raw.and_then(|raw| Header::decode(raw.try_into().ok()?).ok()) {
            let at = location(segment.ordinal(), failed as u64);
            self.damaged_record(&header, at, &reason);
            self.next_lsn = self.next_lsn.max(header.lsn.next());
            return Some((failed + header.record_len()) as u64);
        }
        self.attribute_unreadable(bytes, failed, &reason);
        let mut from = failed + 1;
        while let Some((next, header)) = next_header(bytes, from) {
            if header.lsn > self.next_lsn && header.lsn <= self.next_lsn.plus(RESYNC_LSN_MAX) {
                return Some(next as u64);
            }
            from = next + 1;
        }
        None
    }

    /// Replays one record that passed its checks; true if it is the segment's seal.
    fn replay_record(&mut self, segment: &Segment, record: &Scanned) -> bool {
        let header = &record.header;
        let at = location(segment.ordinal(), record.position);
        if header.lsn < self.next_lsn {
            let reason =
                format!("record {} out of sequence ({} was expected); skipped", header.lsn, self.next_lsn);
            self.damage.push(damage_at(segment, record.position, reason));
            return false;
        }
        if header.lsn > self.next_lsn {
            let reason = format!("records {} to {} are missing", self.next_lsn, header.lsn.raw() - 1);
            self.damage.push(damage_at(segment, record.position, reason));
            self.next_lsn = header.lsn;
        }
        assert_eq!(header.lsn, self.next_lsn, "the record replayed is the next in sequence");
        self.next_lsn = self.next_lsn.next();
        if header.kind == Kind::Seal {
            return true;
        }
        if let Err(reason) = self.apply(record, at, header.record_len() as u64) {
            self.damage.push(damage_at(segment, record.position, format!("record {}: {reason}", header.lsn)));
        }
        self.records += 1;
        self.bytes += header.record_len() as u64;
        false
    }

    /// Applies one record's effect. An error says why it was skipped (damage, reported).
    fn apply(&mut self, record: &Scanned, at: Location, record_len: u64) -> Result<(), String> {
        let header = &record.header;
        let ordinal = split_location(at).0;
        let continues_move = header.has(flags::MOVED)
            && header.kind == Kind::Append
            && self.moving.as_ref().is_some_and(|moving| moving.stream == header.stream);
        if !continues_move {
            // A move interrupted by anything else was cut short: its copies are dead bytes.
            self.moving = None;
        }
        if self.lost_streams.contains(&header.stream) {
            return Ok(());
        }
        if header.has(flags::MOVED) {
            return self.apply_moved(record, at, record_len);
        }
        let orphan =
            matches!(header.kind, Kind::Append | Kind::Delete) && !self.streams.contains(header.stream);
        if orphan {
            self.stream_id_next = self.stream_id_next.max(header.stream.next());
            if self.orphans_expected {
                return Ok(());
            }
            self.lost_streams.insert(header.stream);
            return Err(format!("a record of stream {}, whose create record is lost", header.stream));
        }
        match header.kind {
            Kind::Create => {
                let snapshot = replay::created(&record.header, &record.meta, at)?;
                if self.streams.contains(header.stream) || self.names().contains(&snapshot.name) {
                    return Err("create of a stream that exists".into());
                }
                self.names().insert(Arc::clone(&snapshot.name));
                self.streams.insert(snapshot);
                self.stream_id_next = self.stream_id_next.max(header.stream.next());
            }
            Kind::Append => {
                let stream = self.streams.get_mut(header.stream).expect("not an orphan");
                if stream.damage.is_none() {
                    if let Err(reason) = replay::append(stream, &record.header, &record.meta, at) {
                        replay::mark_damaged(stream, stream.tail, format!("record {}: {reason}", header.lsn));
                    }
                }
                if stream.chain_tail != at {
                    replay::append_after_damage(stream, &record.header, &record.meta, at)?;
                }
            }
            Kind::Delete => {
                let stream = self.streams.get_mut(header.stream).expect("not an orphan");
                if !replay::deleted(stream, header) {
                    return Ok(());
                }
                let stream = self.streams.remove(header.stream).expect("not an orphan");
                if let Some(names) = &mut self.names {
                    names.remove(&stream.name);
                }
                self.ledger.pending.insert(stream.chain_tail);
                return Ok(());
            }
            Kind::Seal => unreachable!("seals end a segment before they are applied"),
        }
        *self.ledger.live.entry(ordinal).or_default() += record_len;
        Ok(())
    }

    /// The names of the streams replayed so far (made when first needed).
    fn names(&mut self) -> &mut HashSet<Arc<str>> {
        let streams = &self.streams;
        self.names.get_or_insert_with(|| streams.values().map(|stream| Arc::clone(&stream.name)).collect())
    }

    /// Steps a stream over its record at `at` whose header holds but whose payload does not.
    fn damaged_record(&mut self, header: &Header, at: Location, reason: &str) {
        if header.has(flags::MOVED) {
            // A damaged copy ends its move; the stream keeps its original chain.
            self.moving = None;
            return;
        }
        match header.kind {
            Kind::Create => {
                self.lost_streams.insert(header.stream);
                self.stream_id_next = self.stream_id_next.max(header.stream.next());
            }
            Kind::Append => {
                if let Some(stream) = self.streams.get_mut(header.stream) {
                    replay::mark_damaged(stream, stream.tail, reason.to_string());
                    replay::skip_damaged(stream, header, at);
                    *self.ledger.live.entry(split_location(at).0).or_default() += header.record_len() as u64;
                }
            }
            Kind::Delete | Kind::Seal => {}
        }
    }

    /// A record whose header fails names no stream for certain; if what is left of it names
    /// a stream whose tail is where it starts, that stream is marked (a stream whose later
    /// records stop following on is marked anyway).
    fn attribute_unreadable(&mut self, bytes: &Bytes, failed: usize, reason: &str) {
        let Some(raw) = bytes.get(failed..failed + 48) else { return };
        let field = |at: usize| u64::from_le_bytes(raw[at..at + 8].try_into().expect("8 bytes"));
        if raw[0..4] != MAGIC.to_le_bytes() {
            return;
        }
        if let Some(stream) = self.streams.get_mut(StreamId::from_raw(field(24))) {
            if stream.tail.messages == field(32) && stream.tail.bytes == field(40) {
                replay::mark_damaged(stream, stream.tail, reason.to_string());
            }
        }
    }

    /// Applies a copy written by compaction (see the module documentation).
    fn apply_moved(&mut self, record: &Scanned, at: Location, record_len: u64) -> Result<(), String> {
        let header = &record.header;
        if !self.streams.contains(header.stream) {
            if self.orphans_expected {
                self.stream_id_next = self.stream_id_next.max(header.stream.next());
                return Ok(());
            }
            return Err("move of an unknown stream".into());
        }
        let moving = match header.kind {
            Kind::Create => {
                let shadow = replay::created(&record.header, &record.meta, at)?;
                self.moving.insert(Moving { stream: header.stream, shadow, bytes: BTreeMap::new() })
            }
            Kind::Append => {
                let moving = self.moving.as_mut().ok_or("a moved record outside a move")?;
                replay::append(&mut moving.shadow, &record.header, &record.meta, at)?;
                moving
            }
            Kind::Delete | Kind::Seal => return Err("a kind of record that is never moved".into()),
        };
        *moving.bytes.entry(split_location(at).0).or_default() += record_len;
        let stream = self.streams.get_mut(header.stream).expect("checked above");
        // Logs written before the writer cleared a copied record's own move marks carry a
        // MOVE_END on every copy of a record that ended an earlier move of the stream: a
        // copy short of the stream's chain does not end this move.
        let short = moving.shadow.chain_n < stream.chain_n;
        if header.has(flags::MOVE_END) && !short {
            let moved = self.moving.take().expect("a move is in progress");
            if moved.shadow.tail != stream.tail || moved.shadow.chain_n != stream.chain_n {
                return Err(format!(
                    "a move that does not end where its stream does: its copies end at {} (record {} of the chain), the stream at {} (record {})",
                    moved.shadow.tail, moved.shadow.chain_n, stream.tail, stream.chain_n
                ));
            }
            self.ledger.pending.insert(stream.chain_tail);
            stream.chain_tail = moved.shadow.chain_tail;
            for (ordinal, bytes) in moved.bytes {
                *self.ledger.live.entry(ordinal).or_default() += bytes;
            }
        }
        Ok(())
    }
}

pub(super) fn damage_at(segment: &Segment, position: u64, reason: String) -> Damage {
    Damage::new(segment.path.clone(), position, reason)
}
