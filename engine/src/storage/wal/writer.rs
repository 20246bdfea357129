//! The commit step of an acid shard: a batch of records becomes one vectored write at the
//! end of the shard's active segment, made durable by a device flush (its own fdatasync, or
//! one shared with the other shards on the same file system: `storage::flush`).
//!
//! Each record is encoded (header and meta into a reused staging buffer; plain payloads are
//! written from the request's own buffer, JSON payloads are laid out in staging) and chained
//! to its stream's previous record. When a record does not fit, the pending run is written,
//! the segment is sealed (a seal record, then fdatasync), and the next segment — prepared by
//! the housekeeper while this one filled — becomes active. The ledger learns each batch's
//! live bytes, and deleted streams go to the housekeeper to be reclaimed.
//!
//! Beside this file: `room` (where the next records go, a full disk as a refusal),
//! `rotation` (sealing the active segment and moving to the next), `zeroing` (the
//! zero-filled prefix records are written into), `in_flight` (a commit on its way to the
//! device) and `compact` (moving live streams out of mostly-dead segments).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use crossbeam_channel::Receiver;

use super::checkpoint::Checkpoint;
use super::housekeeper::{Housekeeper, Task};
use super::ledger::{DurableCheckpoint, Ledger};
use super::segment::Segment;
use super::source::WalSource;
use super::{location, SegmentTable, ShardFiles, WalPosition, RENEWALS_FILE};
use crate::ids::{ChainIndex, Location, Lsn, StreamId};
use crate::limits::halve_when_over;
use crate::storage::chain::{Chain, Levels};
use crate::storage::chunk::ReadError;
use crate::storage::maintenance::{CheckpointKind, Maintenance, Resident, ShardCheckpoint, Upkeep};
use crate::storage::record::codec::{HEADER_BYTES, RECORD_ALIGN};
use crate::storage::record::{encode, Record};
use crate::storage::renewals::{Renewal, RenewalStore};
use crate::storage::{write_failed, CommitError, Committing, NoRoom, Persist, Place, Purpose, Unprepared};

mod compact;
mod in_flight;
mod room;
mod rotation;
mod zeroing;

use in_flight::InFlight;
use room::{Plan, Spares};
use zeroing::Zeroing;

/// Chains whose levels are kept in memory (the rest are rebuilt from their tail when written).
const CHAINS_CACHED_MAX: usize = 16_384;
/// Most bytes written past the durable end of the log before a sync, even inside one batch:
/// with the largest record, this bounds where a crash can leave stale bytes (recovery
/// checks that window).
pub(crate) const SYNC_RUN_BYTES_MAX: u64 = 4 << 20;
/// How often, at most, a commit asks whether the active segment's file still has its name
/// (milliseconds): an `fstat` per shard per commit costs a noticeable share of acid's
/// append rate (docs/performance/code-choices.md).
const LINKED_CHECK_MS: u64 = 10;

pub(crate) struct WalWriter {
    files: ShardFiles,
    table: Arc<SegmentTable>,
    ledger: Arc<Ledger>,
    source: WalSource,
    housekeeper: Housekeeper,
    active: Arc<Segment>,
    position: u64,
    next_lsn: Lsn,
    /// Segments prepared ahead of need (`room`).
    spares: Spares,
    /// Where this batch's accepted ops will go (`room`).
    plan: Plan,
    /// The active segment is sealed: the next record goes to a new one.
    sealed: bool,
    /// When the active segment's file was last found to still have its name (clock ms).
    linked_checked_ms: u64,
    /// A segment deleted under the process whose live records are still in its map: the
    /// first to compact, so they are written again where a restart finds them.
    salvage: Option<u32>,
    /// Deleted segments surveyed for salvage once already (`compact`).
    salvaged: BTreeSet<u32>,
    /// When sealed segments were last looked for among the deleted (clock ms).
    deleted_checked_ms: u64,
    /// The clock's time at the last reservation or commit (milliseconds).
    now_ms: u64,
    /// The housekeeper's listing of a segment to compact, when one was asked for.
    survey: Option<Receiver<Vec<Resident>>>,
    /// A rotation happened since the last look for a segment to compact.
    compaction_due: bool,
    /// The next look compacts whatever the live share (`Upkeep::Compact`).
    compaction_forced: bool,
    /// The active segment is to be sealed after this batch (`Upkeep::Seal`).
    seal_asked: bool,
    chains: HashMap<StreamId, Levels>,
    /// Header, meta and JSON data of the records of the current run.
    staging: Vec<u8>,
    meta: Vec<u8>,
    parts: Vec<Part>,
    /// Where the current run starts in the active segment.
    run_start: u64,
    /// Everything before this position of the active segment is durable.
    synced_to: u64,
    /// The active segment is zero-filled (its blocks written and durable) up to here: a
    /// record before it needs no new block, so the device flush alone makes it durable.
    zeroed_to: u64,
    /// The housekeeper's zero-fill of the next step of the active segment, when one is
    /// under way (`zeroing`).
    zeroing: Option<Zeroing>,
    /// The last commit, until `finish_commit` has waited for its flush.
    in_flight: Option<InFlight>,
    /// This batch's live bytes per segment, and its deleted chains.
    added: BTreeMap<u32, u64>,
    deleted: Vec<Location>,
    /// A segment was sealed since the last checkpoint.
    checkpoint_due: bool,
    /// The last durable checkpoint, as segment removal sees it: what it lets go may go once
    /// the next is durable (the housekeeper moves it on as checkpoints land).
    durable: Arc<Mutex<DurableCheckpoint>>,
}

/// A piece of the current run: staged bytes, or a plain body written from its own buffer.
enum Part {
    Staged(Range<usize>),
    Body(Bytes),
}

impl WalWriter {
    pub(crate) fn new(
        files: ShardFiles,
        table: Arc<SegmentTable>,
        ledger: Arc<Ledger>,
        housekeeper: Housekeeper,
        at: WalPosition,
        checkpoint: DurableCheckpoint,
    ) -> WalWriter {
        let sealed = at.sealed;
        let source = WalSource { table: Arc::clone(&table) };
        let mut writer = WalWriter {
            files,
            table,
            ledger,
            source,
            housekeeper,
            run_start: at.position,
            synced_to: at.position,
            zeroed_to: at.zeroed_to,
            zeroing: None,
            in_flight: None,
            active: at.active,
            position: at.position,
            next_lsn: at.next_lsn,
            spares: Spares::default(),
            plan: Plan::default(),
            sealed,
            linked_checked_ms: 0,
            salvage: None,
            salvaged: BTreeSet::new(),
            deleted_checked_ms: 0,
            now_ms: 0,
            survey: None,
            compaction_due: false,
            compaction_forced: false,
            seal_asked: false,
            chains: HashMap::new(),
            staging: Vec::new(),
            meta: Vec::new(),
            parts: Vec::new(),
            added: BTreeMap::new(),
            deleted: Vec::new(),
            checkpoint_due: false,
            durable: Arc::new(Mutex::new(checkpoint)),
        };
        writer.reset_plan();
        writer.request_spare_when_due();
        writer.request_zero_ahead_when_due();
        writer
    }

    pub(crate) fn source(&self) -> WalSource {
        self.source.clone()
    }

    /// Writes and syncs the run so far once it is long (the batch goes on).
    fn sync_run_when_long(&mut self) -> io::Result<()> {
        match self.position - self.synced_to >= SYNC_RUN_BYTES_MAX {
            true => self.sync_run(),
            false => Ok(()),
        }
    }

    /// Writes and syncs the run so far (the batch goes on).
    fn sync_run(&mut self) -> io::Result<()> {
        self.write_run()?;
        self.active.file().sync_data()?;
        self.synced_to = self.position;
        Ok(())
    }

    /// Encodes `record` into the current run.
    fn stage(&mut self, record: &Record, time_ms: u64) -> io::Result<Place> {
        let chain = match record {
            Record::Create { .. } => Some(Chain { n: ChainIndex::CREATE, jumps: Vec::new() }),
            Record::Append { stream, chain_tail, .. } => {
                Some(self.levels(*stream, *chain_tail)?.next_chain())
            }
            Record::Delete { .. } => None,
        };
        let mut meta = std::mem::take(&mut self.meta);
        let prepared = encode::prepare(record, chain.as_ref(), &mut meta)?;
        let room = self.ensure_room(prepared.record_len, time_ms);
        self.meta = meta;
        room?;
        let place_location = location(self.active.ordinal(), self.position);
        // Records start aligned, inside the active segment, with room left for its seal.
        assert_eq!(self.position % RECORD_ALIGN as u64, 0, "records are aligned");
        assert!(
            self.position + prepared.record_len as u64 + HEADER_BYTES as u64 <= self.active.size(),
            "a staged record and the seal fit the active segment"
        );
        let staged = encode::stage(&prepared, &self.meta, self.next_lsn, time_ms, &mut self.staging);
        self.parts.push(Part::Staged(staged.head));
        if let Some(body) = staged.body {
            self.parts.push(Part::Body(body.clone()));
        }
        let padding_from = self.staging.len();
        self.staging.extend_from_slice(staged.padding);
        self.parts.push(Part::Staged(padding_from..self.staging.len()));
        self.next_lsn = self.next_lsn.next();
        self.position += prepared.record_len as u64;
        // (A delete is not in a chain: its place's index is never read.)
        let n = chain.as_ref().map_or(ChainIndex::CREATE, |c| c.n);
        self.after_staged(record, place_location, prepared.record_len as u64, n);
        Ok(Place { location: place_location, n })
    }

    /// Updates the chains, the batch's live bytes and its deleted chains for a staged record.
    fn after_staged(&mut self, record: &Record, at: Location, record_len: u64, n: ChainIndex) {
        match record {
            Record::Create { stream, .. } => {
                self.chains.insert(*stream, Levels::started_at(at));
            }
            Record::Append { stream, .. } => {
                let levels = self.chains.get_mut(stream).expect("levels were loaded when staging");
                debug_assert_eq!(levels.next_index(), n);
                levels.push(at);
            }
            // A soft delete leaves the chain live: forks still read it.
            Record::Delete { soft: true, .. } => return,
            Record::Delete { stream, chain_tail, .. } => {
                let tail = self.chains.remove(stream).map_or(*chain_tail, |levels| levels.last());
                self.deleted.push(tail);
                return;
            }
        }
        *self.added.entry(self.active.ordinal()).or_default() += record_len;
    }

    /// The levels of `stream`'s chain, rebuilt from `chain_tail` when not cached (an append
    /// was prepared first, so they are there unless compaction just replaced them).
    fn levels(&mut self, stream: StreamId, chain_tail: Location) -> io::Result<&mut Levels> {
        self.load_levels(stream, chain_tail)
            .map_err(|error| io::Error::other(format!("rebuilding a prepared chain: {error}")))?;
        Ok(self.chains.get_mut(&stream).expect("just loaded"))
    }

    /// Caches the levels of `stream`'s chain, rebuilt from its last record `chain_tail`.
    fn load_levels(&mut self, stream: StreamId, chain_tail: Location) -> Result<(), ReadError> {
        if !self.chains.contains_key(&stream) {
            let source = &self.source.reader();
            let tail = source.head(chain_tail)?.node;
            if tail.stream != stream {
                return Err(ReadError::Damaged);
            }
            let levels = Levels::rebuild(source, &tail)?;
            self.chains.insert(stream, levels);
        }
        Ok(())
    }

    /// Writes the current run at its place in the active segment (no sync).
    fn write_run(&mut self) -> io::Result<()> {
        if self.parts.is_empty() {
            return Ok(());
        }
        if self.position > self.zeroed_to {
            // The run reaches past the zero-filled prefix: not while zeros are written there.
            self.collect_zeroing(true);
        }
        assert!(
            self.synced_to <= self.run_start && self.run_start < self.position,
            "runs follow one another"
        );
        let slices: Vec<&[u8]> = self
            .parts
            .iter()
            .map(|part| match part {
                Part::Staged(range) => &self.staging[range.clone()],
                Part::Body(body) => body.as_ref(),
            })
            .collect();
        self.active.file().write_all_at(self.run_start, &slices).map_err(write_failed)?;
        self.parts.clear();
        self.staging.clear();
        self.run_start = self.position;
        Ok(())
    }

    /// Encodes a checkpoint of `streams` (the state after every committed record) and hands
    /// it to the housekeeper; with `wait`, returns once it is durable.
    fn write_checkpoint(&mut self, state: ShardCheckpoint) {
        if self.files.root.known_lost() {
            // Nowhere to write it (and the log it covers is gone with the directory).
            return;
        }
        let ShardCheckpoint { streams, stream_id_next, time_ms, kind } = state;
        let clean = kind == CheckpointKind::Clean;
        let checkpoint = Checkpoint {
            shard: self.files.shard,
            clean,
            // Every record before the next (none yet: 0, before the first).
            lsn: self.next_lsn.previous().unwrap_or_default(),
            resume_ordinal: self.active.ordinal(),
            resume_position: self.position,
            next_lsn: self.next_lsn,
            stream_id_next,
            written_ms: time_ms,
            ledger: self.ledger.snapshot(),
            streams,
        };
        let written = DurableCheckpoint::of(checkpoint.resume_ordinal, &checkpoint.ledger);
        self.housekeeper.send(Task::Checkpoint {
            dir: self.files.dir.clone(),
            bytes: checkpoint.encode(),
            table: Arc::clone(&self.table),
            ledger: Arc::clone(&self.ledger),
            written,
            durable: Arc::clone(&self.durable),
        });
        self.checkpoint_due = false;
        if clean {
            self.housekeeper.flush();
        }
    }
}

impl Persist for WalWriter {
    fn prepare_append(
        &mut self,
        stream: StreamId,
        _name: &str,
        chain_tail: Location,
    ) -> Result<(), Unprepared> {
        self.load_levels(stream, chain_tail).map_err(Unprepared::from)
    }

    /// The batch's records are written as runs (`write_run`) and a full segment is sealed
    /// with a write: either failing is [`CommitError::Unwritten`] (marked `write_failed`).
    /// Everything else here — a seal's sync, a new segment, a sync of a long run or of new
    /// blocks — is a sync or includes one, and its failure is not.
    fn commit(&mut self, batch: Committing<'_>, places: &mut Vec<Place>) -> Result<(), CommitError> {
        debug_assert!(self.parts.is_empty() && self.staging.is_empty());
        assert!(self.in_flight.is_none(), "each commit is finished before the next");
        self.now_ms = batch.time_ms;
        if !batch.records.is_empty() || !batch.moves.is_empty() {
            // Only a batch that writes needs a segment that takes records (and a new one
            // may not be made: the data directory may be gone).
            self.leave_damaged_segment(batch.time_ms)?;
        }
        self.run_start = self.position;
        for record in batch.records {
            let place = self.stage(record, batch.time_ms)?;
            places.push(place);
            self.sync_run_when_long()?;
        }
        for stream_move in batch.moves {
            places.push(self.stage_move(stream_move, batch.time_ms)?);
            self.sync_run_when_long()?;
        }
        // A batch that wrote nothing (answers only: pins, refusals, duplicates) answers from
        // state earlier commits made durable: nothing to flush.
        self.write_run()?;
        if self.position > self.zeroed_to {
            // Past the zero-filled prefix (the batch outgrew its estimate): new blocks are
            // durable only through the file's own sync.
            self.active.file().sync_data()?;
            self.synced_to = self.position;
            self.zeroed_to = self.position;
        }
        if self.position != self.synced_to {
            let records = (batch.records.len() + batch.moves.len()) as u64;
            self.in_flight = Some(InFlight::Written { records });
        }
        Ok(())
    }

    fn start_flush(&mut self) -> io::Result<()> {
        self.enter_flush_round()
    }

    fn finish_commit(&mut self) -> io::Result<()> {
        self.wait_for_flush_round()?;
        self.request_spare_when_due();
        self.request_zero_ahead_when_due();
        self.ledger.record_batch(&self.added, &self.deleted);
        self.added.clear();
        for tail in self.deleted.drain(..) {
            let (source, ledger) = (self.source.clone(), Arc::clone(&self.ledger));
            self.housekeeper.send(Task::Reclaim { source, ledger, tail });
        }
        halve_when_over(&mut self.chains, CHAINS_CACHED_MAX);
        self.reset_plan();
        Ok(())
    }

    fn reserve(&mut self, bytes: u64, purpose: Purpose, now_ms: u64) -> Result<(), NoRoom> {
        WalWriter::reserve(self, bytes, purpose, now_ms)
    }

    fn maintenance(&mut self) -> Option<&mut dyn Maintenance> {
        Some(self)
    }

    fn directory_removed(&self) -> bool {
        self.files.root.look_now()
    }

    fn renewals(&mut self) -> Option<&mut dyn RenewalStore> {
        Some(self)
    }
}

impl Maintenance for WalWriter {
    fn checkpoint_due(&self) -> bool {
        self.checkpoint_due
    }

    fn checkpoint(&mut self, checkpoint: ShardCheckpoint) {
        self.write_checkpoint(checkpoint);
    }

    fn compaction_candidates(&mut self, idle: bool) -> Vec<Resident> {
        WalWriter::compaction_candidates(self, idle)
    }

    fn request(&mut self, upkeep: Upkeep) {
        match upkeep {
            Upkeep::Checkpoint => self.checkpoint_due = true,
            Upkeep::Compact => {
                self.compaction_due = true;
                self.compaction_forced = true;
            }
            Upkeep::Seal => self.seal_asked = true,
        }
    }

    fn seal_when_asked(&mut self, time_ms: u64) -> Result<(), CommitError> {
        match std::mem::take(&mut self.seal_asked) {
            true => Ok(self.seal_between_batches(time_ms)?),
            false => Ok(()),
        }
    }
}

impl RenewalStore for WalWriter {
    fn incarnation(&self, id: StreamId, _chain_tail: Location) -> u64 {
        id.raw()
    }

    /// The housekeeper saves them, off the shard thread.
    fn save(&mut self, renewals: Vec<Renewal>, wait: bool) {
        if self.files.root.known_lost() {
            // Saving would make the directory again, without the store's manifest.
            return;
        }
        let path = self.files.dir.join(RENEWALS_FILE);
        self.housekeeper.send(Task::SaveRenewals { path, renewals });
        if wait {
            self.housekeeper.flush();
        }
    }
}
