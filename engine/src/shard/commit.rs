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
use crate::storage::maintenance::{CheckpointKind, ShardCheckpoint};
use crate::storage::{CommitError, Committing};
use crate::stream::cascade::HeldAnswer;
use crate::stream::Published;

impl Shard {
    /// Steps 3 and 4 at once: make the batch durable, then publish it.
    #[cfg(test)]
    pub(super) fn commit(&mut self, batch: Batch) {
        if let Some(batch) = self.write(batch) {
            self.settle(batch);
        }
    }

    /// Step 3, first half: the batch's records are written (durable once `settle` has
    /// waited for the flush). `None` when the write failed: nothing is published.
    pub(super) fn write(&mut self, mut batch: Batch) -> Option<Batch> {
        if batch.records.is_empty() && batch.moves.is_empty() && batch.replies.is_empty() {
            debug_assert!(
                batch.released_forks.is_empty() && batch.held_answers.is_empty(),
                "each has a record"
            );
            return Some(batch);
        }
        batch.places.clear();
        batch.started = Some(Instant::now());
        let committing = Committing { records: &batch.records, moves: &batch.moves, time_ms: batch.now_ms };
        if let Err(error) = self.persist.commit(committing, &mut batch.places) {
            self.commit_failed("commit", error);
            return None;
        }
        assert_eq!(batch.places.len(), batch.records.len() + batch.moves.len(), "one place each");
        Some(batch)
    }

    /// Step 3, between its halves: the written batch starts for the device. `false` when
    /// that failed: nothing of it is published.
    pub(super) fn start_flush(&mut self) -> bool {
        match self.persist.start_flush() {
            Ok(()) => true,
            Err(error) => {
                self.fail("write-back", &error);
                false
            }
        }
    }

    /// Step 3, second half, and step 4: once the flush covers the batch, publish it; then
    /// checkpoint, compaction and renewals when due, and keep the batch's buffers.
    pub(super) fn settle(&mut self, mut batch: Batch) {
        if let Some(started) = batch.started.take() {
            if let Err(error) = self.persist.finish_commit() {
                self.fail("flush", &error);
                return;
            }
            self.shared.counters.commit_us.record(started.elapsed().as_micros() as u64);
            self.publish(&mut batch);
        }
        self.upkeep_between_batches(batch.now_ms);
        if self.moves.is_empty() && !self.failed() {
            let idle = self.ops.is_empty();
            if let Some(log) = self.persist.maintenance() {
                self.moves.extend(log.compaction_candidates(idle));
            }
        }
        self.save_renewals_when_due(batch.now_ms);
        batch.records.clear();
        batch.owners.clear();
        batch.moves.clear();
        batch.move_owners.clear();
        batch.touched.clear();
        self.recycled = Some(batch);
    }

    /// The log's upkeep that goes between batches: a seal asked for, then a checkpoint when
    /// one is due (after a rotation, or asked for, after a batch that may have written
    /// nothing).
    fn upkeep_between_batches(&mut self, now_ms: u64) {
        if self.failed() {
            return;
        }
        let Some(log) = self.persist.maintenance() else { return };
        if let Err(error) = log.seal_when_asked(now_ms) {
            self.commit_failed("seal", error);
            return;
        }
        if log.checkpoint_due() {
            self.checkpoint(CheckpointKind::Routine);
        }
    }

    /// A write of the log failed (`what`): its shard stops writing, or, when a sync failed,
    /// the process stops (under the policy).
    fn commit_failed(&self, what: &str, error: CommitError) {
        match error {
            CommitError::Unwritten(error) => self.stop_writing(&error),
            CommitError::Unsynced(error) => self.fail(what, &error),
        }
    }

    /// A sync failed: under the policy the process stops; otherwise this shard takes no
    /// more ops and answers nothing of the batch.
    fn fail(&self, what: &str, error: &std::io::Error) {
        self.settings.io_error_policy.fatal(what, error);
        self.shared.commit_failed.store(true, Ordering::Release);
    }

    /// The batch could not be written, but every sync so far succeeded, so what earlier
    /// commits made durable is durable: the process goes on. This shard takes no more ops
    /// (the batch's requesters, and later ones, are refused: `OpError::StorageFailed`), and
    /// its streams are read as they were last published, until a restart.
    fn stop_writing(&self, error: &std::io::Error) {
        if self.persist.directory_removed() {
            // Told as every other write is once the directory is gone.
            self.shared.directory_removed.store(true, Ordering::Release);
        }
        let streams = self.shared.directory.len();
        tracing::error!(
            %error,
            shard = self.settings.index,
            streams,
            "cannot write a shard's log: its streams take no more writes until a restart (reads go on); the batch was not acknowledged"
        );
        self.shared.commit_failed.store(true, Ordering::Release);
    }

    /// Step 4: readers see the batch, requesters get their answers, live readers wake.
    fn publish(&self, batch: &mut Batch) {
        let (record_places, move_places) = batch.places.split_at(batch.records.len());
        for ((record, owner), place) in batch.records.iter().zip(&batch.owners).zip(record_places) {
            owner.write_state().data.apply(record, *place);
        }
        for (owner, place) in batch.move_owners.iter().zip(move_places) {
            if owner.write_state().data.apply_move(*place) {
                self.shared.counters.moves.fetch_add(1, Ordering::Relaxed);
            }
        }
        for stream in &batch.touched {
            let mut state = stream.write_state();
            debug_assert!(state.published.tail <= state.writer.tail, "the published tail never moves back");
            state.data.publish();
            state.published = Published {
                tail: state.writer.tail,
                closed: state.writer.closed,
                gone: state.writer.gone,
                deleted: state.writer.deleted,
            };
            batch.published.push((stream.id, state.published));
        }
        self.shared.directory.apply(&mut batch.overlay);
        self.shared.counters.batches.fetch_add(1, Ordering::Relaxed);
        self.shared.counters.ops.fetch_add(batch.replies.len() as u64, Ordering::Relaxed);
        self.shared.counters.batch_ops.record(batch.replies.len() as u64);
        // A removed fork's source hears of it before anyone hears of the removal: a client
        // that deletes the source next finds it with one fork fewer (see `Shard::collect`).
        for (fork, answer) in batch.released_forks.drain(..) {
            let base = fork.fork.as_ref().expect("a released stream is a fork");
            base.source.release_fork(answer.map(HeldAnswer::committed));
        }
        for reply in batch.replies.drain(..) {
            reply.send();
        }
        // Cascades that ended in this batch: every stream they removed is gone now.
        for answer in batch.held_answers.drain(..) {
            drop(answer.committed());
        }
        self.shared.live.wake(batch.published.drain(..));
    }

    /// Hands the shard's state to its log as a checkpoint, if the log takes them (acid).
    pub(super) fn checkpoint(&mut self, kind: CheckpointKind) {
        let Some(log) = self.persist.maintenance() else {
            return;
        };
        let streams = snapshots(&self.shared.directory);
        let (stream_id_next, time_ms) = (self.stream_id_next, self.settings.clock.now_ms());
        log.checkpoint(ShardCheckpoint { streams, stream_id_next, time_ms, kind });
    }

    /// At a clean stop: where each stream's data ends, for a storage that saves it.
    pub(super) fn save_clean_ends(&mut self) {
        if !self.persist.saves_clean_ends() {
            return;
        }
        let streams = snapshots(&self.shared.directory);
        self.persist.stopped_cleanly(&streams);
    }
}

/// The state of every stream in `directory`.
fn snapshots(directory: &super::directory::Directory) -> Vec<StreamSnapshot> {
    let mut streams: Vec<StreamSnapshot> = Vec::with_capacity(directory.len());
    directory.for_each(|stream| streams.push(stream.snapshot()));
    streams
}
