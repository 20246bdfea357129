//! Replaying a shard's log: every record after the checkpoint, checked and applied in order.
//!
//! Replay checks every record end to end (header crc, payload crc, sequence number, and that
//! it continues its stream: see `stream::replay`) and stops at the first one that fails.
//! Compaction's copies (`MOVED`) build a shadow chain that replaces the stream's chain only
//! when the copy flagged `MOVE_END` is reached; a move interrupted by anything else was cut
//! short by a crash and is dropped, leaving the stream's chain as it was.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::checkpoint::Checkpoint;
use super::ledger::LedgerState;
use super::location;
use super::segment::Segment;
use crate::record::codec::{flags, Kind};
use crate::record::scan::{RecordScan, ScanEnd, Scanned};
use crate::storage::Damage;
use crate::stream::replay;
use crate::stream::StreamSnapshot;

/// Where replay left the log.
pub(super) enum ReplayEnd {
    /// Writing continues in `segments[index]` at `position`.
    Continue { index: usize, position: u64 },
    /// The last segment is sealed (or there is none): a new one with this ordinal is needed.
    NeedSegment { ordinal: u32 },
}

/// The state replay builds.
pub(super) struct Replay {
    pub streams: HashMap<u64, StreamSnapshot>,
    pub names: HashMap<Arc<str>, u64>,
    pub ledger: LedgerState,
    pub next_lsn: u64,
    pub stream_id_next: u64,
    /// Where replay starts: segment ordinal and position.
    pub start: (u32, u64),
    pub records: u64,
    pub bytes: u64,
    pub damage: Option<Damage>,
    /// Replay starts without a checkpoint after removed segments: records of streams created
    /// there (deleted streams, or the segments would still be here) are skipped.
    pub orphans_expected: bool,
    /// A move being replayed: its copies so far.
    moving: Option<Moving>,
    /// Replay starts from the checkpoint (it names a segment that is still there).
    pub checkpoint_used: bool,
}

/// The copies of a move replayed so far.
struct Moving {
    stream: u64,
    shadow: StreamSnapshot,
    /// Bytes of the copies per segment (live once the move is complete).
    bytes: BTreeMap<u32, u64>,
}

impl Replay {
    pub fn start(checkpoint: Option<&Checkpoint>, segments: &[Arc<Segment>]) -> Replay {
        let usable = checkpoint.filter(|c| segments.iter().any(|s| s.ordinal() == c.resume_ordinal));
        match usable {
            Some(checkpoint) => Replay {
                names: checkpoint.streams.iter().map(|s| (Arc::clone(&s.name), s.id)).collect(),
                streams: checkpoint.streams.iter().map(|s| (s.id, s.clone())).collect(),
                ledger: checkpoint.ledger.clone(),
                next_lsn: checkpoint.next_lsn,
                stream_id_next: checkpoint.stream_id_next,
                start: (checkpoint.resume_ordinal, checkpoint.resume_position),
                records: 0,
                bytes: 0,
                damage: None,
                orphans_expected: false,
                moving: None,
                checkpoint_used: true,
            },
            None => Replay {
                streams: HashMap::new(),
                names: HashMap::new(),
                ledger: LedgerState::default(),
                next_lsn: segments.first().map_or(1, |s| s.header.first_lsn),
                stream_id_next: 1,
                start: (segments.first().map_or(0, |s| s.ordinal()), Segment::records_start()),
                records: 0,
                bytes: 0,
                damage: None,
                orphans_expected: segments.first().is_some_and(|s| s.ordinal() > 0),
                moving: None,
                checkpoint_used: false,
            },
        }
    }

    /// Replays every segment from the start position until the end of the log or damage.
    pub fn run(&mut self, segments: &[Arc<Segment>]) -> ReplayEnd {
        let Some(first) = segments.iter().position(|s| s.ordinal() == self.start.0) else {
            return ReplayEnd::NeedSegment { ordinal: segments.last().map_or(0, |s| s.ordinal() + 1) };
        };
        let mut position = self.start.1;
        for index in first..segments.len() {
            let segment = &segments[index];
            if index > first && segment.header.first_lsn != self.next_lsn {
                let reason =
                    format!("segment starts at LSN {}, expected {}", segment.header.first_lsn, self.next_lsn);
                self.damage = Some(damage_at(&segments[index - 1], position, reason));
                return ReplayEnd::Continue { index: index - 1, position };
            }
            if index > first {
                position = Segment::records_start();
            }
            match self.replay_segment(segment, &mut position) {
                SegmentEnd::Sealed if index + 1 < segments.len() => continue,
                SegmentEnd::Sealed => return ReplayEnd::NeedSegment { ordinal: segment.ordinal() + 1 },
                SegmentEnd::Unwritten if index + 1 == segments.len() => {
                    return ReplayEnd::Continue { index, position }
                }
                SegmentEnd::Unwritten => {
                    self.damage =
                        Some(damage_at(segment, position, "unsealed segment followed by another".into()));
                    return ReplayEnd::Continue { index, position };
                }
                SegmentEnd::Damaged(reason) => {
                    self.damage = Some(damage_at(segment, position, reason));
                    return ReplayEnd::Continue { index, position };
                }
            }
        }
        unreachable!("the loop returns at the last segment")
    }

    /// Replays records of one segment from `position` (left at the first byte not replayed).
    fn replay_segment(&mut self, segment: &Segment, position: &mut u64) -> SegmentEnd {
        let size = segment.readable_len();
        if *position > size {
            return SegmentEnd::Damaged(format!("segment ends at {size}, before position {position}"));
        }
        let mut scan = RecordScan::new(segment.map.slice(0, size as usize), *position);
        for record in scan.by_ref() {
            if record.header.lsn != self.next_lsn {
                return SegmentEnd::Damaged(format!(
                    "LSN {} where {} was expected",
                    record.header.lsn, self.next_lsn
                ));
            }
            let record_len = record.header.record_len() as u64;
            if record.header.kind == Kind::Seal {
                self.next_lsn += 1;
                *position += record_len;
                return SegmentEnd::Sealed;
            }
            let at = location(segment.ordinal(), *position);
            if let Err(reason) = self.apply(&record, at, record_len) {
                return SegmentEnd::Damaged(format!("record {}: {reason}", self.next_lsn));
            }
            self.next_lsn += 1;
            self.records += 1;
            self.bytes += record_len;
            *position += record_len;
        }
        match scan.end() {
            Some(ScanEnd::Damaged(error)) => {
                SegmentEnd::Damaged(format!("record {}: {error}", self.next_lsn))
            }
            _ => SegmentEnd::Unwritten,
        }
    }

    /// Applies one record's effect; refuses records that do not continue their stream.
    fn apply(&mut self, record: &Scanned, at: u64, record_len: u64) -> Result<(), String> {
        let header = &record.header;
        let ordinal = (at >> 32) as u32;
        let continues_move = header.has(flags::MOVED)
            && header.kind == Kind::Append
            && self.moving.as_ref().is_some_and(|moving| moving.stream == header.stream);
        if !continues_move {
            // A move interrupted by anything else was cut short: its copies are dead bytes.
            self.moving = None;
        }
        if header.has(flags::MOVED) {
            return self.apply_moved(record, at, record_len);
        }
        let orphan =
            matches!(header.kind, Kind::Append | Kind::Delete) && !self.streams.contains_key(&header.stream);
        if orphan && self.orphans_expected {
            self.stream_id_next = self.stream_id_next.max(header.stream + 1);
            return Ok(());
        }
        match header.kind {
            Kind::Create => {
                let snapshot = replay::created(&record.header, &record.meta, at)?;
                if self.streams.contains_key(&header.stream) || self.names.contains_key(&snapshot.name) {
                    return Err("create of a stream that exists".into());
                }
                self.names.insert(Arc::clone(&snapshot.name), header.stream);
                self.streams.insert(header.stream, snapshot);
                self.stream_id_next = self.stream_id_next.max(header.stream + 1);
                *self.ledger.live.entry(ordinal).or_default() += record_len;
            }
            Kind::Append => {
                let stream = self.streams.get_mut(&header.stream).ok_or("append to an unknown stream")?;
                replay::append(stream, &record.header, &record.meta, at)?;
                *self.ledger.live.entry(ordinal).or_default() += record_len;
            }
            Kind::Delete => {
                let stream = self.streams.remove(&header.stream).ok_or("delete of an unknown stream")?;
                self.names.remove(&stream.name);
                self.ledger.pending.insert(stream.chain_tail);
            }
            Kind::Seal => unreachable!("seals end a segment before they are applied"),
        }
        Ok(())
    }
}

impl Replay {
    /// Applies a copy written by compaction (see the module documentation).
    fn apply_moved(&mut self, record: &Scanned, at: u64, record_len: u64) -> Result<(), String> {
        let header = &record.header;
        if !self.streams.contains_key(&header.stream) {
            if self.orphans_expected {
                self.stream_id_next = self.stream_id_next.max(header.stream + 1);
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
        *moving.bytes.entry((at >> 32) as u32).or_default() += record_len;
        if header.has(flags::MOVE_END) {
            let moved = self.moving.take().expect("a move is in progress");
            let stream = self.streams.get_mut(&moved.stream).expect("checked above");
            if moved.shadow.tail != stream.tail || moved.shadow.chain_n != stream.chain_n {
                return Err("a move that does not end where its stream does".into());
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

pub(super) enum SegmentEnd {
    Sealed,
    /// Unwritten (zeroed) space: the end of the log if this is the last segment.
    Unwritten,
    Damaged(String),
}

pub(super) fn damage_at(segment: &Segment, position: u64, reason: String) -> Damage {
    Damage { file: segment.path.clone(), position, reason, quarantined: Vec::new() }
}
