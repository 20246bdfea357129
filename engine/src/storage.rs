//! How a shard makes a batch of records durable: the only step that differs between modes.
//!
//! Memory mode has nothing to do: records were applied to memory before the commit, and the
//! mode promises nothing across restarts. The disk modes implement [`Persist`] by encoding
//! the records, writing them with one vectored write and syncing as their mode demands.

use crate::record::Record;

/// Step 3 of the shard loop.
pub(crate) trait Persist: Send {
    /// Makes `records` durable in the mode's sense. An error is fatal to the process.
    fn commit(&mut self, records: &[Record]) -> std::io::Result<()>;
}

/// Memory mode: nothing survives a restart, so there is nothing to write.
pub(crate) struct MemoryPersist;

impl Persist for MemoryPersist {
    fn commit(&mut self, _records: &[Record]) -> std::io::Result<()> {
        Ok(())
    }
}
