//! Rebuilding a shard from its log: the newest valid checkpoint, then every record after it.
//!
//! Opening the log sets aside (in `dropped/`) any `.wal` file that is not a readable segment
//! of this shard — except one whose header alone is damaged and whose place can be told
//! (`wal::salvage`): its records are read by their own checks — and finds the parts of the
//! log that are gone (`wal::lost`): segments the checkpoint needs that are missing, and
//! segment files cut short. Replay (`wal::replay`)
//! then checks every record after the checkpoint: it stops at a torn write (the
//! unacknowledged end of the log a crash leaves), and steps over damage, marking the
//! streams it touches. Streams with records in a lost part are marked too. Damage never
//! stops a start: every undamaged stream is served as it was, a damaged one up to its
//! damage. Everything found is reported (and logged by the shard, once per stream).
//!
//! If replay stopped at a torn write, the last segment is cut short, or anything but zeros
//! follows the last good record within the window a crash can have written (see
//! `SYNC_RUN_BYTES_MAX`), a seal record is written and synced right after that record and
//! writing continues in a new segment: the stale bytes stay behind the seal, where no replay
//! ever reads, so they can never be taken for records after another crash (and stay there
//! for inspection). Finally, saved TTL renewals (`crate::storage::renewals`) move read
//! streams' windows on.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::checkpoint::{checkpoint_path, Checkpoint, PREVIOUS_CHECKPOINT_NAME};
use super::ledger::{DurableCheckpoint, LedgerState};
use super::lost::{lost_parts, mark_streams, Lost};
use super::replay::{Replay, ReplayEnd};
use super::salvage;
use super::segment::{self, is_prepared_name, parse_segment_name, Segment, SegmentHeader};
use super::source::WalSource;
use super::{SegmentTable, WalPosition, RENEWALS_FILE};
use crate::ids::{Lsn, StreamId};
use crate::meta::StreamSnapshot;
use crate::storage::record::codec::{Header, HEADER_BYTES};
use crate::storage::record::scan::last_nonzero;
use crate::storage::renewals;
use crate::storage::vfs::{create_dir_durably, is_out_of_space, read_exact_at, read_file, Vfs};
use crate::storage::{Damage, RecoveryReport};

/// Where files that are not segments of the shard go.
pub(crate) const DROPPED_DIR: &str = "dropped";

/// What recovery needs to know besides the directory.
#[derive(Clone, Debug)]
pub(crate) struct RecoverySettings {
    pub shard: u32,
    pub segment_bytes: u64,
    /// Bytes after the last good record that may hold a torn batch.
    pub stale_window_bytes: u64,
    pub now_ms: u64,
}

/// A recovered shard.
pub(crate) struct Recovered {
    pub table: Arc<SegmentTable>,
    pub ledger: LedgerState,
    /// The checkpoint recovery started from, as segment removal sees it (resuming at 0,
    /// counting nothing dead, without one).
    pub checkpoint: DurableCheckpoint,
    pub position: WalPosition,
    pub stream_id_next: StreamId,
    pub streams: Vec<StreamSnapshot>,
    pub report: RecoveryReport,
}

/// A shard's log as it is on disk, read without changing anything: the state recovery would
/// rebuild, and where and why it would stop.
pub struct Analysis {
    /// The segments, in order.
    pub segments: Vec<Arc<Segment>>,
    /// Prepared segment files a crash left unused (recovery removes them).
    pub leftovers: Vec<PathBuf>,
    /// `.wal` files that are not readable segments of this shard, and why (recovery moves
    /// them to `dropped/`).
    pub strays: Vec<(PathBuf, String)>,
    /// Segments whose header is damaged, read by their records' own checks (`salvage`), and
    /// what was found.
    pub salvaged: Vec<(PathBuf, String)>,
    /// Parts of the log that are gone.
    pub lost: Vec<Lost>,
    /// Streams marked damaged by this analysis.
    pub damaged_streams: usize,
    /// The checkpoint replay started from (its streams are in the replayed state).
    pub checkpoint: Option<CheckpointInfo>,
    /// Non-zero bytes within the stale window after the last good record.
    pub stale_bytes: u64,
    /// The checkpoint replay started from, as segment removal sees it.
    removal: DurableCheckpoint,
    replay: Replay,
    end: ReplayEnd,
}

/// Where a checkpoint stands, without its streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointInfo {
    pub lsn: Lsn,
    pub clean: bool,
    pub resume_ordinal: u32,
    pub resume_position: u64,
    pub written_ms: u64,
}

impl Analysis {
    /// The streams as of the last good record, in no particular order.
    pub fn streams(&self) -> impl Iterator<Item = &StreamSnapshot> {
        self.replay.streams.values()
    }

    /// Everything found damaged or gone, in the order a reader of the log meets it (the
    /// torn end of the log, which recovery cuts, is [`Analysis::torn`]).
    pub fn damage(&self, dir: &Path) -> Vec<Damage> {
        let strays = self
            .strays
            .iter()
            .chain(&self.salvaged)
            .map(|(file, why)| Damage::new(file.clone(), 0, why.clone()));
        let lost = self.lost.iter().map(|part| part.damage(dir));
        strays.chain(lost).chain(self.replay.damage.iter().cloned()).collect()
    }

    /// Where replay stopped at a torn write, and why.
    pub fn torn(&self) -> Option<&Damage> {
        self.replay.torn.as_ref()
    }

    /// Live bytes per segment and deleted chains awaiting reclaim, as of the last good record.
    pub fn ledger(&self) -> &LedgerState {
        &self.replay.ledger
    }

    /// Records replayed (checked end to end) after the checkpoint.
    pub fn records_replayed(&self) -> u64 {
        self.replay.records
    }

    /// The sequence number the next record gets.
    pub fn next_lsn(&self) -> Lsn {
        self.replay.next_lsn
    }

    /// Where the last good record ends: segment index and position (`None`: the last
    /// segment is sealed, or there is none).
    pub fn end(&self) -> Option<(usize, u64)> {
        match self.end {
            ReplayEnd::Continue { index, position } => Some((index, position)),
            ReplayEnd::NeedSegment { .. } => None,
        }
    }

    /// What a recovery from here reports (before it repairs anything); `dir` is the shard's.
    pub fn report(&self, dir: &Path) -> RecoveryReport {
        let mut damage = self.damage(dir);
        damage.extend(self.replay.torn.iter().cloned());
        RecoveryReport {
            checkpoint_lsn: self.checkpoint.as_ref().map(|c| c.lsn),
            clean_shutdown: self.checkpoint.as_ref().is_some_and(|c| c.clean) && self.replay.records == 0,
            records_replayed: self.replay.records,
            bytes_replayed: self.replay.bytes,
            damage,
            stale_bytes: self.stale_bytes,
            damaged_streams: self.replay.streams.values().filter(|s| s.damage.is_some()).count() as u64,
            ..RecoveryReport::default()
        }
    }
}

/// Reads shard `shard`'s log in `dir` (which must exist) without changing it; `window`:
/// bytes past a failed record within which a crash can have left a torn batch.
pub(crate) fn analyze(vfs: &dyn Vfs, dir: &Path, shard: u32, window: u64) -> io::Result<Analysis> {
    let (named, leftovers) = list_segments(vfs, dir)?;
    let checkpoint = load_checkpoint(vfs, dir, shard);
    let known: Vec<u32> = checkpoint.as_ref().map_or_else(Vec::new, |c| {
        c.ledger.live.iter().filter(|(_, live)| **live > 0).map(|(ordinal, _)| *ordinal).collect()
    });
    let (segments, strays, salvaged) = open_segments(vfs, named, shard, &known)?;
    let lost = lost_parts(&segments, checkpoint.as_ref());
    let checkpoint_info = checkpoint.as_ref().map(|c| CheckpointInfo {
        lsn: c.lsn,
        clean: c.clean,
        resume_ordinal: c.resume_ordinal,
        resume_position: c.resume_position,
        written_ms: c.written_ms,
    });
    let removal = checkpoint
        .as_ref()
        .map_or_else(DurableCheckpoint::default, |c| DurableCheckpoint::of(c.resume_ordinal, &c.ledger));
    let mut replay = Replay::start(checkpoint, &segments, window);
    let end = replay.run(&segments);
    let mut stale_bytes = 0;
    if let ReplayEnd::Continue { index, position } = end {
        stale_bytes = stale_extent(&segments[index], position, window)?;
    }
    let table = Arc::new(SegmentTable::default());
    for segment in &segments {
        table.insert(Arc::clone(segment));
    }
    let damaged_streams = mark_streams(&WalSource { table }, &mut replay.streams, &lost);
    Ok(Analysis {
        segments,
        leftovers,
        strays,
        salvaged,
        lost,
        damaged_streams,
        checkpoint: checkpoint_info,
        stale_bytes,
        removal,
        replay,
        end,
    })
}

/// Recovers the shard in `dir`, creating its first segment when the directory is new.
pub(crate) fn recover(vfs: &dyn Vfs, dir: &Path, settings: &RecoverySettings) -> io::Result<Recovered> {
    create_dir_durably(vfs, dir)?;
    let mut analysis = analyze(vfs, dir, settings.shard, settings.stale_window_bytes)?;
    let mut report = analysis.report(dir);
    for leftover in &analysis.leftovers {
        vfs.remove_file(leftover)?;
    }
    set_aside(vfs, dir, &analysis.strays, &mut report)?;
    if !analysis.leftovers.is_empty() || !analysis.strays.is_empty() {
        vfs.sync_dir(dir)?;
    }
    let table = Arc::new(SegmentTable::default());
    for segment in &analysis.segments {
        table.insert(Arc::clone(segment));
    }
    let position = continue_at(vfs, dir, settings, &analysis, &report, &table)?;
    let replay = &mut analysis.replay;
    reconcile_ledger(&mut replay.ledger, &table);
    let mut streams = std::mem::take(&mut replay.streams).into_vec();
    let renewed = renewals::load(vfs, [dir.join(RENEWALS_FILE)]);
    renewals::apply(&renewed, &mut streams, |stream| stream.id.raw());
    Ok(Recovered {
        checkpoint: std::mem::take(&mut analysis.removal),
        table,
        ledger: std::mem::take(&mut replay.ledger),
        position,
        stream_id_next: replay.stream_id_next,
        streams,
        report,
    })
}

/// Where the log continues after what recovery found: at the end of the replayed records
/// when nothing stale follows them; else after a seal written there (and in a new segment,
/// when the disk has room for one).
fn continue_at(
    vfs: &dyn Vfs,
    dir: &Path,
    settings: &RecoverySettings,
    analysis: &Analysis,
    report: &RecoveryReport,
    table: &Arc<SegmentTable>,
) -> io::Result<WalPosition> {
    let replay = &analysis.replay;
    let (segment, position) = match analysis.end {
        ReplayEnd::Continue { index, position } => (&analysis.segments[index], position),
        ReplayEnd::NeedSegment { ordinal } => {
            let Some(last) = analysis.segments.last() else {
                return start_segment(vfs, dir, settings, ordinal, replay.next_lsn, table);
            };
            let sealed = WalPosition {
                active: Arc::clone(last),
                position: last.size(),
                next_lsn: replay.next_lsn,
                sealed: true,
                zeroed_to: last.size(),
            };
            return start_or_stay(vfs, dir, settings, table, sealed);
        }
    };
    let cut = segment.readable_len() < segment.size();
    if replay.torn.is_none() && report.stale_bytes == 0 && !cut {
        // What a previous run zero-filled ahead of its records (or wrote and did not
        // acknowledge) is there to write over once it is durable.
        segment.file().sync_data()?;
        let zeroed_to = segment.file().written_end(position)?.min(segment.size());
        return Ok(WalPosition {
            active: Arc::clone(segment),
            position,
            next_lsn: replay.next_lsn,
            sealed: false,
            zeroed_to,
        });
    }
    let seal = Header::seal(replay.next_lsn, settings.now_ms).encode();
    segment.file().write_all_at(position, &[&seal])?;
    if cut {
        // Sealed, what followed the cut is history: the file gets its size back (if the disk
        // has room), so later starts do not report the cut.
        if let Err(error) = segment.file().set_len(segment.size()) {
            tracing::warn!(%error, path = %segment.path.display(), "cannot give a cut segment its size back");
        }
    }
    segment.file().sync_data()?;
    let sealed = WalPosition {
        active: Arc::clone(segment),
        position: position + HEADER_BYTES as u64,
        next_lsn: replay.next_lsn.next(),
        sealed: true,
        zeroed_to: position + HEADER_BYTES as u64,
    };
    start_or_stay(vfs, dir, settings, table, sealed)
}

/// Moves files that are not segments of this shard to `dropped/` (kept for inspection,
/// never read as segments again).
fn set_aside(
    vfs: &dyn Vfs,
    dir: &Path,
    strays: &[(PathBuf, String)],
    report: &mut RecoveryReport,
) -> io::Result<()> {
    if strays.is_empty() {
        return Ok(());
    }
    let dropped = dir.join(DROPPED_DIR);
    create_dir_durably(vfs, &dropped)?;
    for (path, _) in strays {
        let target = dropped.join(path.file_name().unwrap_or_default());
        vfs.rename(path, &target)?;
        if let Some(damage) = report.damage.iter_mut().find(|damage| damage.file == *path) {
            damage.quarantined.push(target);
        }
    }
    vfs.sync_dir(&dropped)
}

/// Starts the segment after the sealed one `sealed` is in; on a full disk the shard starts
/// on the sealed one instead, refusing writes until a new segment can be prepared.
fn start_or_stay(
    vfs: &dyn Vfs,
    dir: &Path,
    settings: &RecoverySettings,
    table: &SegmentTable,
    sealed: WalPosition,
) -> io::Result<WalPosition> {
    let ordinal = sealed.active.ordinal() + 1;
    match start_segment(vfs, dir, settings, ordinal, sealed.next_lsn, table) {
        Err(error) if is_out_of_space(&error) => {
            tracing::error!(%error, dir = %dir.display(), "the disk is full: writes are refused until a segment can be prepared");
            Ok(sealed)
        }
        Ok(started) => {
            table.insert(Arc::new(sealed.active.sealed()));
            Ok(started)
        }
        failed => failed,
    }
}

/// Prepares and activates segment `ordinal`, whose first record will be `first_lsn`.
fn start_segment(
    vfs: &dyn Vfs,
    dir: &Path,
    settings: &RecoverySettings,
    ordinal: u32,
    first_lsn: Lsn,
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
    let (position, zeroed_to) =
        (Segment::records_start(), segment::first_zeroed_bytes(settings.segment_bytes));
    Ok(WalPosition { active, position, next_lsn: first_lsn, sealed: false, zeroed_to })
}

/// A segment file's first LSN (from its name) and path.
type NamedSegment = (Lsn, PathBuf);

/// The segment files of `dir` (in order) and leftover prepared files.
fn list_segments(vfs: &dyn Vfs, dir: &Path) -> io::Result<(Vec<NamedSegment>, Vec<PathBuf>)> {
    let mut named = Vec::new();
    let mut leftovers = Vec::new();
    for name in vfs.list(dir)? {
        if is_prepared_name(&name) {
            leftovers.push(dir.join(&name));
        } else if let Some(first_lsn) = parse_segment_name(&name) {
            named.push((first_lsn, dir.join(name)));
        }
    }
    named.sort();
    Ok((named, leftovers))
}

/// A file set aside, and why.
type Stray = (PathBuf, String);

/// The segments in order, the files set aside, and the segments read without their header.
type OpenedSegments = (Vec<Arc<Segment>>, Vec<Stray>, Vec<Stray>);

/// Opens the named segments, in the order of their ordinals. A file that is not a readable
/// segment of this shard, or a second one with an ordinal already taken, is a stray; one
/// whose header is damaged is read by its records' checks where its ordinal can be told
/// (`salvage`; `known`: the ordinals the checkpoint counts), else a stray too.
fn open_segments(
    vfs: &dyn Vfs,
    named: Vec<NamedSegment>,
    shard: u32,
    known: &[u32],
) -> io::Result<OpenedSegments> {
    let mut by_ordinal: BTreeMap<u32, Arc<Segment>> = BTreeMap::new();
    let mut strays = Vec::new();
    let mut headerless = Vec::new();
    for (first_lsn, path) in named {
        let segment = match Segment::open(vfs, &path) {
            Ok(segment) => segment,
            Err(error)
                if matches!(error.kind(), io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof) =>
            {
                headerless.push((first_lsn, path, error));
                continue;
            }
            Err(error) => return Err(error),
        };
        let why = if segment.header.shard != shard {
            Some(format!("a segment of shard {}, not {shard}", segment.header.shard))
        } else if segment.header.first_lsn != first_lsn {
            Some(format!("its name says sequence {first_lsn}, its header {}", segment.header.first_lsn))
        } else if by_ordinal.contains_key(&segment.ordinal()) {
            Some(format!("a second segment {}", segment.ordinal()))
        } else {
            None
        };
        match why {
            Some(why) => strays.push((path, why)),
            None => {
                by_ordinal.insert(segment.ordinal(), Arc::new(segment));
            }
        }
    }
    let salvaged = salvage::open_headerless(vfs, headerless, shard, known, &mut by_ordinal, &mut strays)?;
    // Only the last one may be written again (and keeps its file open).
    let count = by_ordinal.len();
    let segments = by_ordinal
        .into_values()
        .enumerate()
        .map(|(index, segment)| if index + 1 < count { Arc::new(segment.sealed()) } else { segment })
        .collect();
    Ok((segments, strays, salvaged))
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
        read_exact_at(segment.file().as_ref(), at, &mut buffer[..len])?;
        if let Some(last) = last_nonzero(&buffer[..len]) {
            extent = at + last as u64 + 1 - position;
        }
        at += len as u64;
    }
    Ok(extent)
}

/// Accounts exactly for the segments recovery kept: none a checkpoint names but that is
/// gone (its streams are marked damaged), and every kept one (zero if it holds no live
/// record).
fn reconcile_ledger(ledger: &mut LedgerState, table: &SegmentTable) {
    let known: BTreeMap<u32, ()> = table.all().iter().map(|s| (s.ordinal(), ())).collect();
    ledger.live.retain(|ordinal, _| known.contains_key(ordinal));
    for ordinal in known.keys() {
        ledger.live.entry(*ordinal).or_default();
    }
}
