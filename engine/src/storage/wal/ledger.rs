//! Which segments still hold live records: the basis for removing dead segments.
//!
//! A segment's live bytes are the bytes of records in the chains of live streams. The shard
//! adds each batch's chain records; deleting a stream puts its chain on the pending list, and
//! the housekeeper walks the chain off the shard thread and subtracts it in one step. Both go
//! through one lock, and a checkpoint copies both under it, so a checkpoint's accounting
//! always matches its LSN: no reclaim is counted twice or lost across a crash. A segment may
//! be removed only when it has no live bytes and the checkpoint no longer needs it for replay.
//! Nor while a checkpoint a restart may read still counts live records in it: a restart
//! from that one would report the segment missing ([`DurableCheckpoint`]).

use crate::ids::Location;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

#[derive(Default)]
pub(crate) struct Ledger {
    inner: Mutex<LedgerState>,
}

/// A durable checkpoint as segment removal sees it: where its replay resumes, and the
/// segments its ledger counts no live byte in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct DurableCheckpoint {
    pub resume: u32,
    pub dead: BTreeSet<u32>,
}

impl DurableCheckpoint {
    /// Where a checkpoint with `ledger` resumes (`resume`), as removal sees it.
    pub(crate) fn of(resume: u32, ledger: &LedgerState) -> DurableCheckpoint {
        let dead = ledger.live.iter().filter(|(_, live)| **live == 0).map(|(ordinal, _)| *ordinal).collect();
        DurableCheckpoint { resume, dead }
    }

    /// Whether segment `ordinal` may go while this is the oldest checkpoint a restart may
    /// read: replay from it starts past the segment, and it counts no live record there.
    pub(crate) fn lets_go(&self, ordinal: u32) -> bool {
        ordinal < self.resume && self.dead.contains(&ordinal)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LedgerState {
    /// Live bytes per segment ordinal.
    pub live: BTreeMap<u32, u64>,
    /// Chain tails of deleted streams whose records are not yet subtracted.
    pub pending: BTreeSet<Location>,
}

impl Ledger {
    pub(crate) fn from_state(state: LedgerState) -> Ledger {
        Ledger { inner: Mutex::new(state) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LedgerState> {
        self.inner.lock().expect("ledger lock")
    }

    /// Adds one batch's live bytes and pending reclaims.
    pub(crate) fn record_batch(&self, added: &BTreeMap<u32, u64>, deleted_tails: &[Location]) {
        if added.is_empty() && deleted_tails.is_empty() {
            return;
        }
        let mut state = self.lock();
        for (ordinal, bytes) in added {
            *state.live.entry(*ordinal).or_default() += bytes;
        }
        state.pending.extend(deleted_tails.iter().copied());
    }

    /// Subtracts a reclaimed chain (bytes per segment) and takes it off the pending list.
    pub(crate) fn reclaimed(&self, tail: Location, removed: &BTreeMap<u32, u64>) {
        let mut state = self.lock();
        if !state.pending.remove(&tail) {
            return;
        }
        for (ordinal, bytes) in removed {
            let live = state.live.entry(*ordinal).or_default();
            debug_assert!(*live >= *bytes, "segment {ordinal} would go below zero live bytes");
            *live = live.saturating_sub(*bytes);
        }
    }

    /// Starts accounting for a segment (so one that never holds a live record can be removed).
    pub(crate) fn track(&self, ordinal: u32) {
        self.lock().live.entry(ordinal).or_default();
    }

    /// Forgets a removed segment.
    pub(crate) fn forget(&self, ordinal: u32) {
        self.lock().live.remove(&ordinal);
    }

    pub(crate) fn snapshot(&self) -> LedgerState {
        self.lock().clone()
    }

    /// Ordinals below `below` with no live bytes.
    pub(crate) fn dead_below(&self, below: u32) -> Vec<u32> {
        self.lock().live.range(..below).filter(|(_, live)| **live == 0).map(|(ordinal, _)| *ordinal).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reclaims_are_counted_once() {
        let ledger = Ledger::default();
        ledger.record_batch(&BTreeMap::from([(1, 100), (2, 50)]), &[]);
        let tail = Location::from_raw(7);
        ledger.record_batch(&BTreeMap::from([(2, 10)]), &[tail]);
        assert_eq!(ledger.snapshot().pending, BTreeSet::from([tail]));
        ledger.reclaimed(tail, &BTreeMap::from([(1, 100), (2, 10)]));
        ledger.reclaimed(tail, &BTreeMap::from([(1, 100), (2, 10)]));
        let state = ledger.snapshot();
        assert_eq!(state.live, BTreeMap::from([(1, 0), (2, 50)]), "a second report changes nothing");
        assert!(state.pending.is_empty());
        assert_eq!(ledger.dead_below(3), vec![1]);
        assert!(ledger.dead_below(1).is_empty());
        ledger.forget(1);
        assert!(ledger.dead_below(3).is_empty());
    }
}
