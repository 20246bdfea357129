//! Room in the log (acid): where the next records go, and a full disk as a refusal.
//!
//! Records are written into space zero-filled ahead of time, so a write never needs a new
//! block (`zeroing`). A new segment is prepared before it is needed, zero-filled over its
//! first step: by the housekeeper once the active segment is half full ([`Spares`]), or on
//! the shard thread when more are needed at once. Before the shard accepts an op it asks
//! for room for the op's record ([`WalWriter::reserve`]): in the active segment's
//! zero-filled prefix, or in as many prepared segments as the batch needs (zero-filled as
//! far as it reaches into them). When zero-filling or preparing fails (the disk is full)
//! the op is refused, nothing else is affected, and neither is tried again for a second (by
//! the engine's clock), so writes resume by themselves when space comes back. A little
//! zero-filled room in each segment is kept for deletes, which free space.

use std::collections::VecDeque;
use std::io;
use std::path::PathBuf;

use crossbeam_channel::{Receiver, TryRecvError};

use super::WalWriter;
use crate::storage::record::codec::HEADER_BYTES;
use crate::storage::vfs::is_out_of_space;
use crate::storage::wal::segment::{self, Segment};
use crate::storage::{NoRoom, Purpose};

/// How long after a failed preparation none is tried again (clock milliseconds).
const RETRY_AFTER_MS: u64 = 1000;
/// Room kept free in each segment for deletes (at most an eighth of a segment).
const DELETE_ROOM_BYTES: u64 = 64 << 10;

/// Segments prepared ahead of need.
#[derive(Default)]
pub(super) struct Spares {
    /// Being prepared by the housekeeper.
    pending: Option<Receiver<io::Result<PathBuf>>>,
    /// Prepared, in the order they will be used.
    pub(super) ready: VecDeque<Spare>,
    /// Zero-filling or preparing failed: neither is tried again before this (clock
    /// milliseconds), and why.
    pub(super) failed: Option<(u64, NoRoom)>,
}

/// A prepared segment file, and how far it is zero-filled.
pub(super) struct Spare {
    pub(super) path: PathBuf,
    pub(super) zeroed_to: u64,
}

/// Where this batch's records will go, as far as the shard has accepted them.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Plan {
    /// The position after them in the segment they end in.
    position: u64,
    /// How many new segments they take.
    rotations: usize,
}

impl WalWriter {
    /// Starts planning a new batch at the log's position.
    pub(super) fn reset_plan(&mut self) {
        let position = if self.sealed { self.active.size() } else { self.position };
        self.plan = Plan { position, rotations: 0 };
    }

    /// Room for a record of at most `bytes`, or why there is none (at clock time `now_ms`).
    pub(super) fn reserve(&mut self, bytes: u64, purpose: Purpose, now_ms: u64) -> Result<(), NoRoom> {
        self.now_ms = now_ms;
        if self.files.root.lost(now_ms) {
            return Err(NoRoom::DirectoryRemoved);
        }
        let keep = match purpose {
            Purpose::Write => DELETE_ROOM_BYTES.min(self.files.segment_bytes / 8),
            Purpose::Delete => 0,
        };
        let size = if self.plan.rotations == 0 { self.active.size() } else { self.files.segment_bytes };
        let end = self.plan.position + bytes + HEADER_BYTES as u64;
        if end + keep <= size {
            self.zero_planned(self.plan.rotations, end + keep)?;
            self.plan.position += bytes;
            return Ok(());
        }
        let empty = Segment::records_start() + bytes + HEADER_BYTES as u64;
        debug_assert!(empty <= self.files.segment_bytes, "a record always fits an empty segment");
        self.have_spares(self.plan.rotations + 1)?;
        self.zero_planned(self.plan.rotations + 1, empty)?;
        self.plan = Plan { position: Segment::records_start() + bytes, rotations: self.plan.rotations + 1 };
        Ok(())
    }

    /// Zero-fills up to `needed` the segment a plan with `rotations` writes into: the active
    /// one, or the spare it rotates into.
    fn zero_planned(&mut self, rotations: usize, needed: u64) -> Result<(), NoRoom> {
        match rotations {
            0 => self.zero_ahead(needed),
            _ => self.zero_spare(rotations - 1, needed),
        }
    }

    /// Makes sure `count` prepared segments are there (waiting for the housekeeper's, then
    /// preparing more here); refuses while preparing fails.
    pub(super) fn have_spares(&mut self, count: usize) -> Result<(), NoRoom> {
        self.collect_spare(true);
        while self.spares.ready.len() < count {
            self.refused_while_failing()?;
            let ordinal = self.active.ordinal() + 1 + self.spares.ready.len() as u32;
            match self.prepare_spare(ordinal) {
                Ok(spare) => {
                    self.spares.ready.push_back(spare);
                    self.spares.failed = None;
                }
                Err(error) => {
                    self.room_failed(&error, "cannot prepare a new segment");
                }
            }
        }
        Ok(())
    }

    /// Takes the housekeeper's segment if it is done (waiting for it with `wait`).
    fn collect_spare(&mut self, wait: bool) {
        let Some(pending) = &self.spares.pending else { return };
        let answer = match wait {
            true => pending.recv().map_err(|_| TryRecvError::Disconnected),
            false => pending.try_recv(),
        };
        let prepared = match answer {
            Ok(prepared) => prepared,
            Err(TryRecvError::Empty) => return,
            Err(TryRecvError::Disconnected) => Err(io::Error::other("the housekeeper is gone")),
        };
        self.spares.pending = None;
        match prepared {
            Ok(path) => {
                self.spares.ready.push_back(self.spare_at(path));
                self.spares.failed = None;
            }
            Err(error) => {
                self.room_failed(&error, "cannot prepare a new segment");
            }
        }
    }

    /// Why room is refused while making room fails (until its retry is due).
    pub(super) fn refused_while_failing(&self) -> Result<(), NoRoom> {
        match self.spares.failed {
            Some((retry_at_ms, why)) if self.now_ms < retry_at_ms => Err(why),
            _ => Ok(()),
        }
    }

    /// Notes that making room failed (`what`): no more is tried for a while; why.
    pub(super) fn room_failed(&mut self, error: &io::Error, what: &str) -> NoRoom {
        let why = if is_out_of_space(error) { NoRoom::OutOfSpace } else { NoRoom::Unavailable };
        if self.spares.failed.is_none() {
            tracing::error!(%error, dir = %self.files.dir.display(), "{what}; writes that need room are refused");
        }
        self.spares.failed = Some((self.now_ms + RETRY_AFTER_MS, why));
        why
    }

    /// Asks the housekeeper for the next segment once the active one is half full (and
    /// none is there or on its way, and preparing is not failing).
    pub(super) fn request_spare_when_due(&mut self) {
        self.collect_spare(false);
        let waiting = self.refused_while_failing().is_err();
        let due = self.sealed || self.position > self.active.size() / 2;
        if due && !waiting && self.spares.pending.is_none() && self.spares.ready.is_empty() {
            let ordinal = self.active.ordinal() + 1;
            let dir = self.files.dir.clone();
            self.spares.pending = Some(self.housekeeper.prepare(dir, ordinal, self.files.segment_bytes));
        }
    }

    /// The prepared segment to rotate into (preparing one here if none is: the batch was
    /// planned, so this only happens when an estimate fell short, and failing is fatal).
    pub(super) fn take_spare(&mut self) -> io::Result<Spare> {
        self.collect_spare(true);
        if let Some(spare) = self.spares.ready.pop_front() {
            return Ok(spare);
        }
        self.prepare_spare(self.active.ordinal() + 1)
    }

    /// Prepares segment `ordinal` here, on the shard thread.
    fn prepare_spare(&self, ordinal: u32) -> io::Result<Spare> {
        let files = &self.files;
        segment::prepare(files.vfs.as_ref(), &files.dir, ordinal, files.segment_bytes)
            .map(|path| self.spare_at(path))
    }

    /// The spare just prepared at `path`: zero-filled over its first step.
    fn spare_at(&self, path: PathBuf) -> Spare {
        Spare { path, zeroed_to: segment::first_zeroed_bytes(self.files.segment_bytes) }
    }
}
