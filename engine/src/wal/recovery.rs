//! Rebuilding a shard from its log: the newest valid checkpoint, then every record after it.
//!
//! Replay checks every record end to end (header crc, payload crc, sequence number, and that
//! it continues its stream: offset, chain index and chain link) and stops at the first one
//! that fails. Everything after that point is dropped and reported: later segments move to
//! `dropped/`. If replay stopped at damage, or anything but zeros follows the last good
//! record within the window a crash can have written (see `SYNC_RUN_BYTES_MAX`), a seal
//! record is written and synced right after that record and writing continues in a new
//! segment: the stale bytes stay behind the seal, where no replay ever reads, so they can
//! never be taken for records after another crash (and stay there for inspection).

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::Path;
use std::sync::Arc;

use super::checkpoint::{checkpoint_path, Checkpoint};
use super::ledger::LedgerState;
use super::segment::{self, is_prepared_name, parse_segment_name, Segment, SegmentHeader};
use super::writer::WalPosition;
use super::{location, SegmentTable};
use crate::record::codec::{decode_record, DecodeError, Decoded, Header, Kind};
use crate::storage::{Damage, RecoveryReport};
use crate::stream::replay;
use crate::stream::StreamSnapshot;
use crate::vfs::{read_exact_at, read_file, Vfs};

/// Where quarantined segments go.
pub const DROPPED_DIR: &str = "dropped";
/// The previous checkpoint, kept as a fallback.
pub const PREVIOUS_CHECKPOINT_NAME: &str = "checkpoint.previous";

/// What recovery needs to know besides the directory.
#[derive(Clone, Debug)]
pub struct RecoverySettings {
    pub shard: u32,
    pub segment_bytes: u64,
    /// Bytes after the last good record that may hold a torn batch.
    pub stale_window_bytes: u64,
    pub now_ms: u64,
}

/// A recovered shard.
pub struct Recovered {
    pub table: Arc<SegmentTable>,
    pub ledger: LedgerState,
    /// Where the checkpoint recovery started from resumes (0 without one).
    pub checkpoint_resume: u32,
    pub position: WalPosition,
    pub stream_id_next: u64,
    pub streams: Vec<StreamSnapshot>,
    pub report: RecoveryReport,
}

/// Recovers the shard in `dir`, creating its first segment when the directory is new.
pub fn recover(vfs: &dyn Vfs, dir: &Path, settings: &RecoverySettings) -> io::Result<Recovered> {
    vfs.create_dir_all(dir)?;
    let segments = open_segments(vfs, dir, settings.shard)?;
    let checkpoint = load_checkpoint(vfs, dir, settings.shard);
    let mut replay = Replay::start(checkpoint.as_ref(), &segments);
    let table = Arc::new(SegmentTable::default());
    for segment in &segments {
        table.insert(Arc::clone(segment));
    }
    let end = replay.run(&segments);
    let mut report = RecoveryReport {
        checkpoint_lsn: checkpoint.as_ref().map(|c| c.lsn),
        clean_shutdown: checkpoint.as_ref().is_some_and(|c| c.clean) && replay.records == 0,
        records_replayed: replay.records,
        bytes_replayed: replay.bytes,
        ..RecoveryReport::default()
    };
    let position = match end {
        ReplayEnd::Continue { index, position } => {
            let segment = &segments[index];
            report.stale_bytes = stale_extent(segment, position, settings.stale_window_bytes)?;
            if replay.damage.is_none() && segment.readable_len() < segment.size() {
                let reason = format!(
                    "segment is {} bytes, its header says {}",
                    segment.readable_len(),
                    segment.size()
                );
                replay.damage = Some(damage_at(segment, position, reason));
            }
            if let Some(damage) = replay.damage.take() {
                report.damage.push(quarantine(vfs, dir, &segments[index + 1..], &table, damage)?);
            }
            if report.damage.is_empty() && report.stale_bytes == 0 {
                WalPosition { active: Arc::clone(segment), position, next_lsn: replay.next_lsn }
            } else {
                let seal = Header::seal(replay.next_lsn, settings.now_ms).encode();
                segment.file.write_all_at(position, &[&seal])?;
                segment.file.sync_data()?;
                start_segment(vfs, dir, settings, segment.ordinal() + 1, replay.next_lsn + 1, &table)?
            }
        }
        ReplayEnd::NeedSegment { ordinal } => {
            start_segment(vfs, dir, settings, ordinal, replay.next_lsn, &table)?
        }
    };
    reconcile_ledger(&mut replay.ledger, &table);
    Ok(Recovered {
        checkpoint_resume: replay.start.0,
        table,
        ledger: replay.ledger,
        position,
        stream_id_next: replay.stream_id_next,
        streams: replay.streams.into_values().collect(),
        report,
    })
}

/// Prepares and activates segment `ordinal`, whose first record will be `first_lsn`.
fn start_segment(
    vfs: &dyn Vfs,
    dir: &Path,
    settings: &RecoverySettings,
    ordinal: u32,
    first_lsn: u64,
    table: &SegmentTable,
) -> io::Result<WalPosition> {
    let prepared = segment::prepare(vfs, dir, ordinal, settings.segment_bytes)?;
    let header = SegmentHeader {
        shard: settings.shard,
        ordinal,
        first_lsn,
        size: settings.segment_bytes,
        created_ms: settings.now_ms,
    };
    let active = Arc::new(segment::activate(vfs, &prepared, dir, header)?);
    table.insert(Arc::clone(&active));
    Ok(WalPosition { active, position: Segment::records_start(), next_lsn: first_lsn })
}

/// Opens the shard's segments in order; removes leftovers of unfinished preparations.
fn open_segments(vfs: &dyn Vfs, dir: &Path, shard: u32) -> io::Result<Vec<Arc<Segment>>> {
    let mut named = Vec::new();
    let mut removed_leftovers = false;
    for name in vfs.list(dir)? {
        if is_prepared_name(&name) {
            vfs.remove_file(&dir.join(&name))?;
            removed_leftovers = true;
        } else if let Some(first_lsn) = parse_segment_name(&name) {
            named.push((first_lsn, dir.join(name)));
        }
    }
    if removed_leftovers {
        vfs.sync_dir(dir)?;
    }
    named.sort();
    let mut segments: Vec<Arc<Segment>> = Vec::with_capacity(named.len());
    for (first_lsn, path) in named {
        let segment = Segment::open(vfs, &path)?;
        let in_order = segments.last().is_none_or(|previous| previous.ordinal() < segment.ordinal());
        if segment.header.first_lsn != first_lsn || segment.header.shard != shard || !in_order {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("segment {} does not belong in shard {shard} at this place", path.display()),
            ));
        }
        segments.push(Arc::new(segment));
    }
    Ok(segments)
}

/// The newest checkpoint that decodes and belongs to this shard, else the previous one.
fn load_checkpoint(vfs: &dyn Vfs, dir: &Path, shard: u32) -> Option<Checkpoint> {
    for path in [checkpoint_path(dir), dir.join(PREVIOUS_CHECKPOINT_NAME)] {
        if !vfs.exists(&path) {
            continue;
        }
        match read_file(vfs, &path).ok().and_then(|bytes| Checkpoint::decode(&bytes).ok()) {
            Some(checkpoint) if checkpoint.shard == shard => return Some(checkpoint),
            _ => tracing::warn!(path = %path.display(), "ignoring an unreadable checkpoint"),
        }
    }
    None
}

/// Where replay left the log.
enum ReplayEnd {
    /// Writing continues in `segments[index]` at `position`.
    Continue { index: usize, position: u64 },
    /// The last segment is sealed (or there is none): a new one with this ordinal is needed.
    NeedSegment { ordinal: u32 },
}

/// The state replay builds.
struct Replay {
    streams: HashMap<u64, StreamSnapshot>,
    names: HashMap<Arc<str>, u64>,
    ledger: LedgerState,
    next_lsn: u64,
    stream_id_next: u64,
    /// Where replay starts: segment ordinal and position.
    start: (u32, u64),
    records: u64,
    bytes: u64,
    damage: Option<Damage>,
    /// Replay starts without a checkpoint after removed segments: records of streams created
    /// there (deleted streams, or the segments would still be here) are skipped.
    orphans_expected: bool,
}

impl Replay {
    fn start(checkpoint: Option<&Checkpoint>, segments: &[Arc<Segment>]) -> Replay {
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
            },
        }
    }

    /// Replays every segment from the start position until the end of the log or damage.
    fn run(&mut self, segments: &[Arc<Segment>]) -> ReplayEnd {
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
        loop {
            if *position > size {
                return SegmentEnd::Damaged(format!("segment ends at {size}, before position {position}"));
            }
            let remaining = (size - *position) as usize;
            let bytes = segment.map.slice(*position as usize, *position as usize + remaining);
            let decoded = match decode_record(&bytes) {
                Ok(decoded) => decoded,
                Err(DecodeError::Zeroed) => return SegmentEnd::Unwritten,
                Err(error) => return SegmentEnd::Damaged(format!("record {}: {error}", self.next_lsn)),
            };
            if decoded.header.lsn != self.next_lsn {
                return SegmentEnd::Damaged(format!(
                    "LSN {} where {} was expected",
                    decoded.header.lsn, self.next_lsn
                ));
            }
            let record_len = decoded.header.record_len() as u64;
            if decoded.header.kind == Kind::Seal {
                self.next_lsn += 1;
                *position += record_len;
                return SegmentEnd::Sealed;
            }
            let at = location(segment.ordinal(), *position);
            if let Err(reason) = self.apply(&decoded, at, record_len) {
                return SegmentEnd::Damaged(format!("record {}: {reason}", self.next_lsn));
            }
            self.next_lsn += 1;
            self.records += 1;
            self.bytes += record_len;
            *position += record_len;
        }
    }

    /// Applies one record's effect; refuses records that do not continue their stream.
    fn apply(&mut self, record: &Decoded<'_>, at: u64, record_len: u64) -> Result<(), String> {
        let header = &record.header;
        let ordinal = (at >> 32) as u32;
        let orphan =
            matches!(header.kind, Kind::Append | Kind::Delete) && !self.streams.contains_key(&header.stream);
        if orphan && self.orphans_expected {
            self.stream_id_next = self.stream_id_next.max(header.stream + 1);
            return Ok(());
        }
        match header.kind {
            Kind::Create => {
                let snapshot = replay::created(record, at)?;
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
                replay::append(stream, record, at)?;
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

enum SegmentEnd {
    Sealed,
    /// Unwritten (zeroed) space: the end of the log if this is the last segment.
    Unwritten,
    Damaged(String),
}

fn damage_at(segment: &Segment, position: u64, reason: String) -> Damage {
    Damage { file: segment.path.clone(), position, reason, quarantined: Vec::new() }
}

/// How far non-zero bytes reach into the window after `position` (0: all zeros). Read with
/// positional reads, not through the map, so the scan leaves no pages mapped in.
fn stale_extent(segment: &Segment, position: u64, window: u64) -> io::Result<u64> {
    const CHUNK_BYTES: usize = 256 * 1024;
    let end = segment.readable_len().min(position.saturating_add(window));
    let mut buffer = vec![0u8; CHUNK_BYTES];
    let mut extent = 0;
    let mut at = position;
    while at < end {
        let len = (end - at).min(CHUNK_BYTES as u64) as usize;
        read_exact_at(segment.file.as_ref(), at, &mut buffer[..len])?;
        if let Some(last) = buffer[..len].iter().rposition(|b| *b != 0) {
            extent = at + last as u64 + 1 - position;
        }
        at += len as u64;
    }
    Ok(extent)
}

/// Moves segments after the damage into `dropped/`, so they can never be replayed.
fn quarantine(
    vfs: &dyn Vfs,
    dir: &Path,
    later: &[Arc<Segment>],
    table: &SegmentTable,
    mut damage: Damage,
) -> io::Result<Damage> {
    if later.is_empty() {
        return Ok(damage);
    }
    let dropped = dir.join(DROPPED_DIR);
    vfs.create_dir_all(&dropped)?;
    for segment in later {
        let target = dropped.join(segment.path.file_name().unwrap_or_default());
        vfs.rename(&segment.path, &target)?;
        table.remove(segment.ordinal());
        damage.quarantined.push(target);
    }
    vfs.sync_dir(&dropped)?;
    vfs.sync_dir(dir)?;
    Ok(damage)
}

/// Accounts exactly for the segments recovery kept: none a checkpoint names but that is
/// gone, and every kept one (zero if it holds no live record).
fn reconcile_ledger(ledger: &mut LedgerState, table: &SegmentTable) {
    let known: BTreeMap<u32, ()> = table.all().iter().map(|s| (s.ordinal(), ())).collect();
    ledger.live.retain(|ordinal, _| known.contains_key(ordinal));
    for ordinal in known.keys() {
        ledger.live.entry(*ordinal).or_default();
    }
}
