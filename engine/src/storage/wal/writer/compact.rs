//! Compaction (acid): moving live streams out of mostly-dead segments.
//!
//! A segment holding a single live record cannot be removed. After each rotation, once the
//! shard is idle, the writer picks the older segment with the smallest live share under a
//! quarter, and the housekeeper lists the streams with records in it. The shard then moves
//! them, one per batch: the writer copies every record of the stream, in order, to the head
//! of the log as a new chain (each copy flagged `MOVED`, the last one also `MOVE_END`), and
//! the old chain is reclaimed like a deleted stream's. Once the segment holds no live record,
//! a later checkpoint removes it. Recovery applies a move only when it reaches its
//! `MOVE_END`, so a move cut short by a crash leaves the old chain in place.
//!
//! Salvage: a segment whose file was deleted under the process still reads as written
//! through its map, and its streams moved are where a restart finds them. Such a segment is
//! the victim first, whatever its live share, and surveyed once (a stream that cannot be
//! moved must not hold compaction on it). The active segment is asked before each commit
//! (`WalWriter::leave_damaged_segment`), the sealed ones at most once a second when the
//! shard idles (`WalWriter::look_for_deleted_segments`).
//!
//! Costs: a move writes the stream once more (at most the stream byte limit) and frees at
//! least three quarters of a segment; copies share the mapped bytes of the originals, so
//! nothing is copied in memory on the way to the write.
//!
//! The pieces, all driven from here: the choice of segment and the staging of a move (this
//! file), the survey of a segment's streams (`WalSource::streams_in`, run by the
//! housekeeper), and the shard's side, which turns each [`Resident`] into a [`Move`] after
//! its batch's records (`storage::maintenance`).

use std::collections::BTreeMap;
use std::io;

use crossbeam_channel::TryRecvError;

use super::{Part, WalWriter, SYNC_RUN_BYTES_MAX};
use crate::ids::{ChainIndex, Location, StreamId};
use crate::storage::chain::Chain;
use crate::storage::chain::{find_index, hop, Levels, Node, NodeSource};
use crate::storage::maintenance::{Move, Resident};
use crate::storage::record::codec::{self, flags, Header, MetaRef, HEADER_BYTES};
use crate::storage::wal::housekeeper::Task;
use crate::storage::wal::{location, split_location};
use crate::storage::Place;

/// A segment is compacted when less than this share of it (percent) is live.
const LIVE_SHARE_MAX_PERCENT: u64 = 25;
/// Least time between two looks for sealed segments deleted under the process (clock ms).
const DELETED_CHECK_MS: u64 = 1000;

impl WalWriter {
    /// Copies the chain of the stream (ending at `chain_tail`, or later in this batch) to
    /// the head of the log, unless its record `witness_n` is no longer at `witness`.
    pub(super) fn stage_move(&mut self, stream_move: &Move, time_ms: u64) -> io::Result<Place> {
        let Move { stream, chain_tail, witness, witness_n } = *stream_move;
        let witness = (witness, witness_n);
        // Records staged earlier in this batch must be readable from the map to be copied.
        self.write_run()?;
        let tail_location = self.chains.get(&stream).map_or(chain_tail, Levels::last);
        let Some((tail, locations)) = self.chain_to_move(stream, tail_location, witness) else {
            // Not the stream compaction found (moved since), or damaged: it stays where it is.
            return Ok(Place { location: tail_location, n: ChainIndex::CREATE });
        };
        let mut levels = Levels::default();
        let last = locations.len() - 1;
        let mut copied: BTreeMap<u32, u64> = BTreeMap::new();
        for (index, original) in locations.into_iter().enumerate() {
            let Some((at, len)) = self.stage_copy(original, &levels, index == last, time_ms)? else {
                // No room for the rest (the disk is full): the copies so far are dead bytes
                // (no MOVE_END), and the stream stays where it was.
                for (ordinal, bytes) in copied {
                    if let Some(added) = self.added.get_mut(&ordinal) {
                        *added -= bytes;
                    }
                }
                return Ok(Place { location: tail_location, n: tail.n });
            };
            *copied.entry(split_location(at).0).or_default() += len;
            if self.position - self.synced_to >= SYNC_RUN_BYTES_MAX {
                self.sync_run()?;
            }
            if index == 0 {
                levels = Levels::started_at(at);
            } else {
                levels.push(at);
            }
        }
        let place = Place { location: levels.last(), n: tail.n };
        self.chains.insert(stream, levels);
        self.deleted.push(tail_location);
        Ok(place)
    }

    /// The chain ending at `tail_location` (its last record, and every record's location in
    /// order), if its record `witness.1` is still at `witness.0` and every record of it passes
    /// its checks (a move never copies damage, and never stops half-way).
    fn chain_to_move(
        &self,
        stream: StreamId,
        tail_location: Location,
        witness: (Location, ChainIndex),
    ) -> Option<(Node, Vec<Location>)> {
        let source = &self.source.reader();
        let tail = source.node(tail_location).ok().filter(|tail| tail.stream == stream)?;
        if witness.1 > tail.n || find_index(source, &tail, witness.1).ok()?.location != witness.0 {
            return None;
        }
        let mut locations = vec![tail.location];
        let mut node = tail.clone();
        while !node.n.is_create() {
            node = match hop(source, &node, 0) {
                Ok(node) => node,
                Err(error) => {
                    tracing::warn!(?stream, %error, "a stream with a damaged chain is not compacted");
                    return None;
                }
            };
            locations.push(node.location);
        }
        if let Some(damaged) = locations.iter().find(|location| source.record(**location).is_err()) {
            tracing::warn!(?stream, location = ?damaged, "a stream with a damaged record is not compacted");
            return None;
        }
        locations.reverse();
        Some((tail, locations))
    }

    /// Stages a copy of the record at `original` as the next record of the chain `levels`:
    /// its location and length, or `None` when it needs a new segment that cannot be
    /// prepared (a move is the last thing in its batch, so nothing planned needs the room).
    fn stage_copy(
        &mut self,
        original: Location,
        levels: &Levels,
        last: bool,
        time_ms: u64,
    ) -> io::Result<Option<(Location, u64)>> {
        let (header, meta, data) = self
            .source
            .record(original)
            .map_err(|e| io::Error::other(format!("reading a record to move: {e}")))?;
        let chain = if header.kind == codec::Kind::Create {
            Chain { n: ChainIndex::CREATE, jumps: Vec::new() }
        } else {
            levels.next_chain()
        };
        let meta_ref = MetaRef {
            chain: Some(&chain),
            create: meta.create.as_ref().map(|create| (&*create.name, &create.config)),
            fork: meta.create.as_ref().and_then(|create| create.fork.as_ref()),
            producer: meta.producer.as_ref(),
            stream_seq: meta.stream_seq.as_deref(),
        };
        self.meta.clear();
        codec::encode_meta(header.kind, meta_ref, &mut self.meta);
        let record_len = codec::align(HEADER_BYTES + self.meta.len() + data.len());
        let room = match self.fits_active(record_len) {
            true => self.zero_ahead(self.position + (record_len + HEADER_BYTES) as u64),
            false => self.have_spares(1),
        };
        if room.is_err() {
            return Ok(None);
        }
        self.ensure_room(record_len, time_ms)?;
        let at = location(self.active.ordinal(), self.position);
        // The original may itself be a copy (the stream moved before): its move's marks are
        // not this move's, and a MOVE_END kept from it would end this move where it ended.
        let own_flags = header.flags & !(flags::MOVED | flags::MOVE_END);
        let copy = Header {
            flags: own_flags | flags::MOVED | if last { flags::MOVE_END } else { 0 },
            meta_len: self.meta.len() as u16,
            payload_len: (self.meta.len() + data.len()) as u32,
            payload_crc: codec::payload_crc(&self.meta, &[&data]),
            lsn: self.next_lsn,
            // Every record of a batch carries the batch's time: recovery tells a torn end
            // from damage by the times after a failed record (a copy is only ever read as
            // a stream's bytes, never for when the original was written).
            time_ms,
            ..header
        };
        let from = self.staging.len();
        self.staging.extend_from_slice(&copy.encode());
        self.staging.extend_from_slice(&self.meta);
        self.parts.push(Part::Staged(from..self.staging.len()));
        if !data.is_empty() {
            self.parts.push(Part::Body(data));
        }
        let padding_from = self.staging.len();
        self.staging.extend_from_slice(codec::padding(HEADER_BYTES + copy.payload_len as usize));
        self.parts.push(Part::Staged(padding_from..self.staging.len()));
        self.next_lsn = self.next_lsn.next();
        self.position += record_len as u64;
        *self.added.entry(self.active.ordinal()).or_default() += record_len as u64;
        Ok(Some((at, record_len as u64)))
    }

    /// Streams to move out of a mostly-dead segment, once the housekeeper has listed them;
    /// starts a new listing after a rotation when the shard is `idle`.
    pub(super) fn compaction_candidates(&mut self, idle: bool) -> Vec<Resident> {
        if let Some(survey) = &self.survey {
            match survey.try_recv() {
                Ok(residents) => {
                    self.survey = None;
                    return residents;
                }
                Err(TryRecvError::Empty) => return Vec::new(),
                Err(TryRecvError::Disconnected) => self.survey = None,
            }
        }
        if idle {
            self.look_for_deleted_segments();
        }
        if idle && self.compaction_due {
            self.compaction_due = false;
            // A deleted segment is surveyed once: a stream that cannot be moved (damaged)
            // must not keep compaction on it.
            let salvage = self.salvage.take();
            self.salvaged.extend(salvage);
            if let Some(ordinal) = self.victim(salvage) {
                let (reply, answer) = crossbeam_channel::bounded(1);
                self.housekeeper.send(Task::Survey { source: self.source.clone(), ordinal, reply });
                self.survey = Some(answer);
            }
        }
        Vec::new()
    }

    /// Notes a sealed segment whose file was deleted under the process while it still holds
    /// live records (asked at most every [`DELETED_CHECK_MS`], when the shard idles), so
    /// that its streams are moved out of its map next (the active segment's deletion is
    /// seen before each commit).
    fn look_for_deleted_segments(&mut self) {
        if self.now_ms.abs_diff(self.deleted_checked_ms) < DELETED_CHECK_MS {
            return;
        }
        self.deleted_checked_ms = self.now_ms;
        if self.salvage.is_some() {
            return;
        }
        let live = self.ledger.snapshot().live;
        self.salvaged.retain(|ordinal| live.contains_key(ordinal));
        let active = self.active.ordinal();
        let vfs = self.files.vfs.as_ref();
        let deleted = self.table.all().into_iter().find(|segment| {
            let ordinal = segment.ordinal();
            ordinal < active
                && live.get(&ordinal).is_some_and(|l| *l > 0)
                && !self.salvaged.contains(&ordinal)
                && !vfs.exists(&segment.path)
        });
        if let Some(segment) = deleted {
            tracing::error!(
                segment = %segment.path.display(),
                "a log segment was deleted under the server; its streams are moved out of it"
            );
            self.salvage = Some(segment.ordinal());
            self.compaction_due = true;
        }
    }

    /// `salvage`, a segment deleted under the process, while it still holds live records;
    /// else the older segment with the smallest live share under the threshold (any share,
    /// when compaction was asked for), if any.
    fn victim(&mut self, salvage: Option<u32>) -> Option<u32> {
        let active = self.active.ordinal();
        let size = self.files.segment_bytes;
        let forced = std::mem::take(&mut self.compaction_forced);
        let live = self.ledger.snapshot().live;
        let salvage =
            salvage.filter(|ordinal| *ordinal < active && live.get(ordinal).is_some_and(|l| *l > 0));
        salvage.or_else(|| {
            live.into_iter()
                .filter(|(ordinal, live)| {
                    let mostly_dead = live * 100 < size * LIVE_SHARE_MAX_PERCENT;
                    *ordinal < active && *live > 0 && (forced || mostly_dead)
                })
                .min_by_key(|(_, live)| *live)
                .map(|(ordinal, _)| ordinal)
        })
    }
}
