//! Step 2 of the shard loop for the ops that end a stream or move it: deletes (hard, or
//! soft while forks still read the stream), expiry, the release of a fork's source, and
//! compaction's moves. The rules for creates and appends are in `apply`.

use std::sync::{Arc, RwLockWriteGuard};

use crate::op::OpError;
use crate::storage::maintenance::{Move, Resident};
use crate::storage::record::codec::HEADER_BYTES;
use crate::storage::record::Record;
use crate::storage::Purpose;
use crate::stream::cascade::Release;
use crate::stream::{Stream, StreamState};

use super::apply::mark_touched;
use super::{Batch, Shard};

impl Shard {
    /// One fork fewer reads a stream; a deleted stream that no fork reads any more goes
    /// for good (and gives back its own source's count: the cascade). A delete's answer
    /// that came with the release goes on with the cascade; where the cascade stops, it is
    /// answered (dropped) here.
    pub(super) fn apply_release(&mut self, batch: &mut Batch, release: Release) {
        let Release { name, id, answer } = release;
        let Some(stream) = self.lookup(batch, &name).filter(|s| s.id == id) else {
            debug_assert!(false, "a stream with forks stays in its directory");
            return;
        };
        let mut state = stream.write_state();
        assert!(state.writer.forks > 0, "a fork is released once");
        state.writer.forks -= 1;
        let remove = state.writer.forks == 0 && state.writer.deleted;
        drop(state);
        // Memory needs no room; in the disk modes a full disk leaves it soft-deleted.
        if remove && self.remove(batch, &stream, false).is_ok() {
            if let Some(answer) = answer {
                batch.hold_for_cascade(&stream, answer);
            }
        }
    }

    /// Compaction: moves a stream found in a mostly-dead segment (if it is still the stream
    /// that was found there) to the head of the log. Nothing readers see changes.
    pub(super) fn apply_move(&mut self, batch: &mut Batch, resident: Resident) {
        let Some(stream) = self.live_stream(batch, &resident.name).filter(|s| s.id == resident.stream) else {
            return;
        };
        let mut state = stream.write_state();
        mark_touched(batch, &stream, &mut state);
        let chain_tail = state.data.chain().0;
        drop(state);
        batch.moves.push(Move {
            stream: stream.id,
            chain_tail,
            witness: resident.witness,
            witness_n: resident.witness_n,
        });
        batch.move_owners.push(stream);
    }

    /// Deletes a stream: its bytes go back to the budget, its name becomes free. Refused
    /// only when not even a delete fits in the log (the disk is full).
    /// A stream that forks still read is only soft-deleted: it keeps its bytes and its name
    /// until the last fork goes.
    pub(super) fn remove(
        &mut self,
        batch: &mut Batch,
        stream: &Arc<Stream>,
        expired: bool,
    ) -> Result<(), OpError> {
        let soft_deleted = {
            let state = stream.read_state();
            state.writer.forks > 0 && state.writer.deleted
        };
        if soft_deleted {
            return Ok(());
        }
        self.room(batch, HEADER_BYTES as u64, Purpose::Delete)?;
        // Soft or hard is decided under the lock new forks are counted under.
        let mut state = stream.write_state();
        if state.writer.forks > 0 {
            soft_delete(batch, stream, state, expired);
            return Ok(());
        }
        debug_assert!(!state.writer.gone, "a stream is removed once");
        state.writer.gone = true;
        self.budget.release(state.writer.charged);
        self.budget.note_stored(stream.own_bytes(state.writer.tail), false);
        if stream.fork.is_some() {
            batch.released_forks.push((Arc::clone(stream), None));
        }
        self.budget.remove_stream();
        if stream.damage().is_some() {
            self.shared.counters.damage.damaged_streams.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
        batch.overlay.delete(Arc::clone(&stream.name));
        push_delete(batch, stream, state, expired, false);
        Ok(())
    }

    /// Removes streams whose deadline has passed; re-queues those whose TTL was renewed.
    pub(super) fn expire_due(&mut self, batch: &mut Batch) {
        for due in self.expiry.pop_due(batch.now_ms) {
            let Some(stream) = self.lookup(batch, &due.name).filter(|s| s.id == due.id) else {
                continue;
            };
            if !stream.is_expired(batch.now_ms) {
                if let Some(deadline) = stream.deadline_ms() {
                    self.expiry.push(deadline, due.id, due.name);
                }
            } else if self.remove(batch, &stream, true).is_err() {
                // No room for the delete now (the disk is full): look again in a second.
                self.expiry.push(batch.now_ms + 1000, due.id, due.name);
            }
        }
    }
}

/// Deletes a stream that forks still read (its room is reserved; `state` is its locked
/// state): clients see it gone, its bytes, charge and name stay until the last fork goes.
fn soft_delete(
    batch: &mut Batch,
    stream: &Arc<Stream>,
    mut state: RwLockWriteGuard<'_, StreamState>,
    expired: bool,
) {
    debug_assert!(state.writer.forks > 0 && !state.writer.deleted, "soft-deleted once, while forked");
    state.writer.deleted = true;
    push_delete(batch, stream, state, expired, true);
}

/// Marks `stream` (its state locked, its delete decided) touched and adds its delete record.
fn push_delete(
    batch: &mut Batch,
    stream: &Arc<Stream>,
    mut state: RwLockWriteGuard<'_, StreamState>,
    expired: bool,
    soft: bool,
) {
    mark_touched(batch, stream, &mut state);
    let chain_tail = state.data.chain().0;
    drop(state);
    let name = Arc::clone(&stream.name);
    batch.records.push(Record::Delete { stream: stream.id, name, expired, soft, chain_tail });
    batch.owners.push(Arc::clone(stream));
}
