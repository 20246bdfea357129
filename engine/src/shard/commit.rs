//! Steps 3 and 4 of the shard loop: commit a batch, then publish it; and checkpoints (and,
//! now and then, readers' TTL renewals: `super::renewals`).
//!
//! Publishing applies each committed record's data to its stream (memory blocks, or the
//! stream's chain tail), then copies each touched stream's writer state to its published
//! view, folds creates and deletes into the directory, sends the replies and wakes live
//! readers. A failed commit publishes nothing and answers nothing.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{Batch, Shard};
use crate::meta::StreamSnapshot;
use crate::storage::record::Record;
use crate::stream::Published;

impl Shard {
    /// Steps 3 and 4: make the batch durable, then publish it.
    pub(super) fn commit(&mut self, mut batch: Batch) {
        if !batch.records.is_empty() || !batch.replies.is_empty() {
            batch.places.clear();
            let started = Instant::now();
            if let Err(error) = self.persist.commit(&batch.records, batch.now_ms, &mut batch.places) {
                self.settings.io_error_policy.fatal("commit", &error);
                self.failed = true;
                return;
            }
            self.shared.counters.commit_us.record(started.elapsed().as_micros() as u64);
            debug_assert_eq!(batch.places.len(), batch.records.len(), "one place per record");
            self.publish(&mut batch);
            if self.persist.checkpoint_due() {
                self.checkpoint(false);
            }
        }
        if self.moves.is_empty() && !self.failed {
            let idle = self.ops.is_empty();
            self.moves.extend(self.persist.compaction_candidates(idle));
        }
        self.save_renewals_when_due(batch.now_ms);
        batch.records.clear();
        batch.owners.clear();
        batch.touched.clear();
        self.recycled = Some(batch);
    }

    /// Step 4: readers see the batch, requesters get their answers, live readers wake.
    fn publish(&self, batch: &mut Batch) {
        for ((record, owner), place) in batch.records.iter().zip(&batch.owners).zip(&batch.places) {
            let mut state = owner.write_state();
            if matches!(record, Record::Move { .. }) && state.data.chain().0 != place.location {
                self.shared.counters.moves.fetch_add(1, Ordering::Relaxed);
            }
            state.data.apply(record, *place);
        }
        for stream in &batch.touched {
            let mut state = stream.write_state();
            debug_assert!(state.published.tail <= state.writer.tail, "the published tail never moves back");
            state.data.publish();
            state.published =
                Published { tail: state.writer.tail, closed: state.writer.closed, gone: state.writer.gone };
            batch.published.push((stream.id, state.published));
        }
        self.shared.directory.apply(&mut batch.overlay);
        self.shared.counters.batches.fetch_add(1, Ordering::Relaxed);
        self.shared.counters.ops.fetch_add(batch.replies.len() as u64, Ordering::Relaxed);
        self.shared.counters.batch_ops.record(batch.replies.len() as u64);
        for reply in batch.replies.drain(..) {
            reply.send();
        }
        self.shared.live.wake(batch.published.drain(..));
    }

    /// Hands the shard's state to its storage as a checkpoint (acid); `clean` at shutdown,
    /// when it also waits until the checkpoint is durable.
    pub(super) fn checkpoint(&mut self, clean: bool) {
        let mut streams: Vec<StreamSnapshot> = Vec::with_capacity(self.shared.directory.len());
        self.shared.directory.for_each(|stream| streams.push(stream.snapshot()));
        let now_ms = self.settings.clock.now_ms();
        self.persist.checkpoint(streams, self.stream_id_next, now_ms, clean, clean);
    }
}
