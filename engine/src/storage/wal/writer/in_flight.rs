//! A commit on its way to the device: written, then handed to the flush group, then durable.
//!
//! `commit` writes a batch and leaves it [`InFlight::Written`]; `start_flush` starts its
//! write-back and enters the shared round ([`InFlight::Entered`]); `finish_commit` waits for
//! the round's flush. The middle step is its own so that a worker can let every one of its
//! shards write first and then start all their write-backs back to back, and the block layer
//! sends them to the device together. On a virtual machine each device notification is a
//! VM exit, so fewer notifications take less of the core. The block layer's dispatch
//! worker then sends them, not the shard threads (docs/performance/code-choices.md).

use std::io;

use super::WalWriter;
use crate::storage::flush::Ticket;

/// Where the last commit stands.
pub(super) enum InFlight {
    /// Written, its write-back not started: `records` records, the log's bytes from
    /// `synced_to` to `position`.
    Written { records: u64 },
    /// In a flush round: durable up to `durable_to` once `ticket` was waited for.
    Entered { ticket: Ticket, durable_to: u64 },
}

impl WalWriter {
    /// Starts the write-back of the last commit and enters its flush round, if it wrote
    /// anything and has not yet.
    pub(super) fn enter_flush_round(&mut self) -> io::Result<()> {
        let Some(InFlight::Written { records }) = self.in_flight else { return Ok(()) };
        assert!(self.synced_to < self.position, "a written commit ends past the durable log");
        let (from, len) = (self.synced_to, self.position - self.synced_to);
        let ticket = self.files.flush.enter(self.active.file(), from, len, records)?;
        self.in_flight = Some(InFlight::Entered { ticket, durable_to: self.position });
        Ok(())
    }

    /// Waits until the last commit is durable (entering its round first if it has not).
    pub(super) fn wait_for_flush_round(&mut self) -> io::Result<()> {
        self.enter_flush_round()?;
        let Some(InFlight::Entered { ticket, durable_to }) = self.in_flight.take() else {
            return Ok(());
        };
        self.files.flush.wait(ticket, self.active.file().as_ref())?;
        assert!(self.synced_to < durable_to && durable_to == self.position, "the flush covers the commit");
        self.synced_to = durable_to;
        Ok(())
    }
}
