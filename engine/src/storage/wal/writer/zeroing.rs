//! The zero-filled prefix of the active segment and of the spares (acid).
//!
//! A record is only written where its segment was zero-filled and synced before (the blocks
//! written, their allocation durable), so a device flush alone makes it durable (the shared
//! flush relies on it) and each fdatasync stays cheap. The housekeeper zero-fills the active
//! segment a few steps ahead of its records ([`WalWriter::request_zero_ahead_when_due`]); the
//! shard fills on its own thread only when its records catch up ([`WalWriter::zero_ahead`]),
//! and a spare as far as a planned batch reaches into it ([`WalWriter::zero_spare`]). While
//! the housekeeper fills a range the shard writes nothing there: records stay below
//! `zeroed_to`, and a write that could reach past it (a batch that outgrew its plan, a
//! seal) first waits for the fill. Each time a shard waits for zeros (for the housekeeper's
//! fill, or filling on its own thread) it is counted (`crate::storage::wal::zero_waits`).

use std::io;
use std::sync::Arc;

use crossbeam_channel::{Receiver, TryRecvError};

use super::WalWriter;
use crate::storage::wal::segment;
use crate::storage::NoRoom;

/// How many steps of zeros the housekeeper keeps ahead of a shard's records. It runs at
/// the lowest priority, on the core's idle moments, and on a busy core it waits for the CPU
/// most of the time. A lead of one step then leaves shards waiting for their zeros. A lead
/// of three steps gives the housekeeper time to catch up, so shards do not wait for it
/// (docs/performance/code-choices.md). A shard holds at most one step more than this of
/// zeros past its records, idle or not.
const ZERO_LEAD_STEPS: u64 = 3;

/// A zero-fill of the active segment the housekeeper was asked for.
pub(super) struct Zeroing {
    /// The segment it fills, and where the fill ends.
    ordinal: u32,
    to: u64,
    done: Receiver<io::Result<()>>,
}

impl WalWriter {
    /// Makes sure the active segment is zero-filled up to `needed` (waiting for the
    /// housekeeper's fill, then filling a step past it here); refuses while that fails.
    pub(super) fn zero_ahead(&mut self, needed: u64) -> Result<(), NoRoom> {
        if needed <= self.zeroed_to {
            return Ok(());
        }
        self.collect_zeroing(true);
        if needed <= self.zeroed_to {
            return Ok(());
        }
        self.refused_while_failing()?;
        assert!(needed <= self.active.size(), "room is sought inside the segment");
        assert!(self.in_flight.is_none(), "each commit is finished before room is sought");
        if self.run_start > self.zeroed_to {
            // Records written past the prefix (a batch that outgrew its plan) are made
            // durable by their own sync at the end of the commit; nothing more goes there.
            return Err(NoRoom::Unavailable);
        }
        // Records written so far end before the prefix does; staged ones are written after
        // these zeros.
        let from = self.zeroed_to;
        let to = self.step_past(needed, self.active.size());
        let file = self.active.file();
        match self.files.zero_waits.time(|| segment::zero_fill(file.as_ref(), from, to)) {
            Ok(()) => {
                self.zeroed_to = to;
                Ok(())
            }
            Err(error) => Err(self.room_failed(&error, "cannot zero-fill the active segment")),
        }
    }

    /// Makes sure spare `index` is zero-filled up to `needed`; refuses while that fails.
    pub(super) fn zero_spare(&mut self, index: usize, needed: u64) -> Result<(), NoRoom> {
        let zeroed_to = self.spares.ready[index].zeroed_to;
        if needed <= zeroed_to {
            return Ok(());
        }
        self.refused_while_failing()?;
        let to = self.step_past(needed, self.files.segment_bytes);
        let (vfs, path) = (&self.files.vfs, &self.spares.ready[index].path);
        let fill = || vfs.open(path).and_then(|file| segment::zero_fill(file.as_ref(), zeroed_to, to));
        match self.files.zero_waits.time(fill) {
            Ok(()) => {
                self.spares.ready[index].zeroed_to = to;
                Ok(())
            }
            Err(error) => Err(self.room_failed(&error, "cannot zero-fill a prepared segment")),
        }
    }

    /// A step past `needed`, on a step boundary, within `size`.
    fn step_past(&self, needed: u64, size: u64) -> u64 {
        let step = segment::zero_step_bytes(self.files.segment_bytes);
        (needed.div_ceil(step) * step + step).min(size)
    }

    /// Asks the housekeeper to zero-fill the next step of the active segment once less than
    /// [`ZERO_LEAD_STEPS`] steps are left before the records reach the end of the filled
    /// prefix.
    pub(super) fn request_zero_ahead_when_due(&mut self) {
        self.collect_zeroing(false);
        let (step, size) = (segment::zero_step_bytes(self.files.segment_bytes), self.active.size());
        let from = self.zeroed_to.max(self.position);
        let due = !self.sealed && from < size && self.position + ZERO_LEAD_STEPS * step > self.zeroed_to;
        if !due || self.zeroing.is_some() || self.refused_while_failing().is_err() {
            return;
        }
        let to = (from + step).min(size);
        let done = self.housekeeper.zero_fill(Arc::clone(self.active.file()), from, to);
        self.zeroing = Some(Zeroing { ordinal: self.active.ordinal(), to, done });
        // An inline housekeeper is done already.
        self.collect_zeroing(false);
    }

    /// Takes the housekeeper's fill if it is done (waiting for it with `wait`, counted as a
    /// wait for zeros when it was not done yet).
    pub(super) fn collect_zeroing(&mut self, wait: bool) {
        let Some(zeroing) = &self.zeroing else { return };
        let answer = match (wait, zeroing.done.try_recv()) {
            (true, Err(TryRecvError::Empty)) => {
                self.files.zero_waits.time(|| zeroing.done.recv().map_err(|_| TryRecvError::Disconnected))
            }
            (_, answer) => answer,
        };
        let filled = match answer {
            Ok(filled) => filled,
            Err(TryRecvError::Empty) => return,
            Err(TryRecvError::Disconnected) => Err(io::Error::other("the housekeeper is gone")),
        };
        let Zeroing { ordinal, to, .. } = self.zeroing.take().expect("a fill was asked for");
        match filled {
            Ok(()) if ordinal == self.active.ordinal() => self.zeroed_to = self.zeroed_to.max(to),
            Ok(()) => {}
            Err(error) => {
                self.room_failed(&error, "cannot zero-fill the active segment");
            }
        }
    }
}
