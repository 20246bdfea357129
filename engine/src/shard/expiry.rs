//! The shard's queue of streams that can expire, earliest deadline first.
//!
//! Expiry is decided lazily on access, but memory must come back even for streams nobody
//! touches again, so each shard also keeps a heap of (deadline, stream) for streams with a
//! TTL or an absolute expiry. Deadlines slide when reads renew a TTL without telling the
//! shard; a popped entry whose stream is not due yet is simply pushed back with its real
//! deadline. Entries of deleted streams are dropped when popped.

use crate::ids::StreamId;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

/// Most expiries handled in one pass (the rest wait for the next pass).
pub(super) const EXPIRIES_PER_PASS_MAX: usize = 1024;

#[derive(Default)]
pub(super) struct ExpiryQueue {
    heap: BinaryHeap<Reverse<(u64, StreamId, Arc<str>)>>,
}

/// A stream whose deadline has come, to be checked against the directory.
pub(super) struct Due {
    pub id: StreamId,
    pub name: Arc<str>,
}

impl ExpiryQueue {
    pub(super) fn push(&mut self, deadline_ms: u64, id: StreamId, name: Arc<str>) {
        self.heap.push(Reverse((deadline_ms, id, name)));
    }

    /// Milliseconds until the earliest deadline (`None` when nothing can expire).
    pub(super) fn wait_ms(&self, now_ms: u64) -> Option<u64> {
        self.heap.peek().map(|Reverse((deadline, _, _))| deadline.saturating_sub(now_ms))
    }

    /// Removes and returns up to [`EXPIRIES_PER_PASS_MAX`] entries due at `now_ms`.
    pub(super) fn pop_due(&mut self, now_ms: u64) -> Vec<Due> {
        let mut due = Vec::new();
        while due.len() < EXPIRIES_PER_PASS_MAX {
            match self.heap.peek() {
                Some(Reverse((deadline, _, _))) if *deadline <= now_ms => {}
                _ => break,
            }
            let Reverse((_, id, name)) = self.heap.pop().expect("peeked");
            due.push(Due { id, name });
        }
        due
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.heap.len()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_due_entries_in_deadline_order() {
        let mut queue = ExpiryQueue::default();
        queue.push(300, StreamId::from_raw(3), "c".into());
        queue.push(100, StreamId::from_raw(1), "a".into());
        queue.push(200, StreamId::from_raw(2), "b".into());
        assert_eq!(queue.wait_ms(50), Some(50));
        let due: Vec<u64> = queue.pop_due(250).into_iter().map(|d| d.id.raw()).collect();
        assert_eq!(due, [1, 2]);
        assert_eq!(queue.wait_ms(250), Some(50));
        assert_eq!(queue.pop_due(1000).len(), 1);
        assert!(queue.is_empty());
        assert_eq!(queue.wait_ms(0), None);
    }

    #[test]
    fn a_pass_is_bounded() {
        let mut queue = ExpiryQueue::default();
        for id in 0..(EXPIRIES_PER_PASS_MAX as u64 + 5) {
            queue.push(1, StreamId::from_raw(id), "s".into());
        }
        assert_eq!(queue.pop_due(1).len(), EXPIRIES_PER_PASS_MAX);
        assert_eq!(queue.len(), 5);
    }
}
