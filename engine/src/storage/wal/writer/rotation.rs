//! Moving on to the next segment of an acid shard's log: when a record does not fit the
//! active one, and when the active one was damaged or deleted under the process.
//!
//! The active segment is sealed (a seal record, then its own sync) and the spare the
//! housekeeper prepared becomes active; the sealed one is read through its map alone from
//! then on. Owns no state of its own: it moves `WalWriter`'s active segment, position and
//! sync marks together, so that they always describe one segment.

use std::io;
use std::sync::Arc;

use super::{WalWriter, LINKED_CHECK_MS};
use crate::storage::record::codec::{Header, HEADER_BYTES};
use crate::storage::wal::segment::{self, Segment, SegmentHeader};
use crate::storage::write_failed;

impl WalWriter {
    /// Moves on to the next segment when the active one no longer reads as written (its
    /// file cut short or overwritten under the process, a page the device cannot read) or
    /// was deleted under the process (asked at most every [`LINKED_CHECK_MS`]): what is
    /// committed from now on must land where recovery and readers find it.
    pub(super) fn leave_damaged_segment(&mut self, time_ms: u64) -> io::Result<()> {
        if self.sealed {
            return Ok(());
        }
        // The clock is the system's: a step back must not pause the checks.
        let check_link = time_ms.abs_diff(self.linked_checked_ms) >= LINKED_CHECK_MS;
        if check_link {
            self.linked_checked_ms = time_ms;
        }
        let deleted = check_link && self.active.deleted();
        if !deleted && self.active.intact() {
            return Ok(());
        }
        if deleted && self.files.root.look_now() {
            // The whole data directory went, not the segment alone: no new segment can be
            // made, and nothing written now would be found. The batch is not acknowledged
            // (its shard takes no more writes; the other shards refuse theirs, the directory
            // seen gone).
            let gone =
                io::Error::new(io::ErrorKind::NotFound, "the data directory was removed under the server");
            return Err(write_failed(gone));
        }
        let what = if deleted { "deleted" } else { "damaged" };
        tracing::error!(
            segment = %self.active.path.display(),
            "the active log segment was {what} under the server; later records go to a new segment"
        );
        if deleted {
            // Its map still reads as written: its streams are moved out once the shard idles.
            self.salvage = Some(self.active.ordinal());
        }
        self.seal(time_ms)?;
        self.sealed = true;
        self.rotate(time_ms)
    }

    /// Makes sure `record_len` more bytes and a seal fit in the active segment. A segment
    /// whose map could not read a page (its file cut short, a device error: `fault_guard`)
    /// takes no more records: they go to the next segment, where readers see them.
    pub(super) fn ensure_room(&mut self, record_len: usize, time_ms: u64) -> io::Result<()> {
        let needed = self.position + record_len as u64 + HEADER_BYTES as u64;
        if needed <= self.active.size() && !self.active.map.faulted() {
            return Ok(());
        }
        if Segment::records_start() + record_len as u64 + HEADER_BYTES as u64 > self.files.segment_bytes {
            return Err(io::Error::other("a record is larger than a segment can hold"));
        }
        self.write_run()?;
        if !self.sealed {
            self.seal(time_ms)?;
            self.sealed = true;
        }
        self.rotate(time_ms)
    }

    /// Seals the active segment between batches and moves on to the next, unless nothing
    /// was written in it or no next one can be had now (it then stays active).
    pub(super) fn seal_between_batches(&mut self, time_ms: u64) -> io::Result<()> {
        assert!(self.in_flight.is_none() && self.parts.is_empty(), "no batch is under way");
        self.now_ms = time_ms;
        if self.sealed || self.position == Segment::records_start() || self.have_spares(1).is_err() {
            return Ok(());
        }
        self.seal(time_ms)?;
        self.sealed = true;
        self.rotate(time_ms)?;
        self.reset_plan();
        self.request_spare_when_due();
        self.request_zero_ahead_when_due();
        Ok(())
    }

    /// Whether a record of `record_len` bytes fits the active segment without a rotation.
    pub(super) fn fits_active(&self, record_len: usize) -> bool {
        !self.sealed
            && !self.active.map.faulted()
            && self.position + record_len as u64 + HEADER_BYTES as u64 <= self.active.size()
    }

    /// Ends the active segment with a seal record and syncs it.
    fn seal(&mut self, time_ms: u64) -> io::Result<()> {
        assert!(self.parts.is_empty(), "the run is written before the seal");
        self.collect_zeroing(true);
        assert!(self.position + HEADER_BYTES as u64 <= self.active.size(), "the seal fits");
        let header = Header::seal(self.next_lsn, time_ms);
        self.active.file().write_all_at(self.position, &[&header.encode()]).map_err(write_failed)?;
        self.active.file().sync_data()?;
        self.next_lsn = self.next_lsn.next();
        Ok(())
    }

    /// Makes the prepared segment active (preparing one now if it is not ready).
    fn rotate(&mut self, time_ms: u64) -> io::Result<()> {
        let ordinal = self.active.ordinal() + 1;
        let prepared = self.take_spare()?;
        assert!(self.sealed, "a segment is sealed before the next one starts");
        assert!(self.zeroing.is_none(), "the sealed segment's fill is over");
        let header = SegmentHeader {
            shard: self.files.shard,
            ordinal,
            first_lsn: self.next_lsn,
            size: self.files.segment_bytes,
            created_ms: time_ms,
        };
        let active =
            Arc::new(segment::activate(self.files.vfs.as_ref(), &prepared.path, &self.files.dir, header)?);
        self.table.insert(Arc::clone(&active));
        // The sealed one is read through its map alone from now on: its file closes.
        self.table.insert(Arc::new(self.active.sealed()));
        self.ledger.track(ordinal);
        self.active = active;
        self.position = Segment::records_start();
        self.run_start = self.position;
        self.synced_to = self.position;
        self.zeroed_to = prepared.zeroed_to;
        self.sealed = false;
        self.checkpoint_due = true;
        self.compaction_due = true;
        Ok(())
    }
}
