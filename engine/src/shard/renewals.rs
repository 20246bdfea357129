//! Saving readers' TTL renewals (disk modes): the shard's side of `crate::storage::renewals`.
//!
//! Readers renew a stream's TTL window without going through its shard, so they raise one
//! flag per shard instead ([`ShardShared::note_read_renewal`], only for streams with a
//! TTL). After a batch, at most every [`SAVE_INTERVAL_MS`], a shard that finds the flag
//! raised lowers it and hands its storage the renewal time of every stream with a TTL; at
//! a clean stop it does so at once. A shard nobody read from writes nothing.
//!
//! The renewal time, the flag and the shard's reads of both are all `SeqCst` (plain loads
//! and the locked instructions it needs anyway on x86): a reader that finds the flag still
//! raised skips raising it, so its renewal must be visible to the shard's swap that lowers
//! it, which only a single total order promises.

use std::sync::atomic::Ordering;

use super::{Shard, ShardShared};
use crate::storage::renewals::{Renewal, SAVE_INTERVAL_MS};

impl ShardShared {
    /// A reader renewed the window of one of this shard's streams with a TTL.
    pub(crate) fn note_read_renewal(&self) {
        // Load first: under steady reads the flag is already up and the line stays shared.
        if !self.renewed_by_read.load(Ordering::SeqCst) {
            self.renewed_by_read.store(true, Ordering::SeqCst);
        }
    }
}

impl Shard {
    /// Saves the renewals when readers renewed a window and the interval has passed.
    pub(super) fn save_renewals_when_due(&mut self, now_ms: u64) {
        if self.failed() || now_ms < self.renewals_due_ms {
            return;
        }
        self.renewals_due_ms = now_ms.saturating_add(SAVE_INTERVAL_MS);
        self.save_renewals_if_read(false);
    }

    /// Saves the renewals if readers renewed a window since the last save; with `wait`,
    /// returns once they are durable.
    pub(super) fn save_renewals_if_read(&mut self, wait: bool) {
        let Some(store) = self.persist.renewals() else {
            return;
        };
        // Every renewal ordered before this swap is seen by the loads below (module comment).
        if !self.shared.renewed_by_read.swap(false, Ordering::SeqCst) {
            return;
        }
        let mut renewals = Vec::new();
        self.shared.directory.for_each(|stream| {
            if stream.config.ttl_secs.is_some() {
                let (chain_tail, _) = stream.read_state().data.chain();
                renewals.push(Renewal {
                    name: std::sync::Arc::clone(&stream.name),
                    incarnation: store.incarnation(stream.id, chain_tail),
                    last_access_ms: stream.last_access_ms(),
                });
            }
        });
        store.save(renewals, wait);
    }
}
