//! The streams a replay builds: their snapshots kept side by side in one `Vec`, found by id
//! through a small map of positions.
//!
//! A start holds every stream's snapshot (288 bytes) until it is installed. Kept as the
//! values of a `HashMap` they cost a bucket each at about half load (600 bytes a stream, and
//! a second copy when recovery collected them into a list); here the snapshots are the list
//! recovery hands on, and the map holds 12 bytes a stream. A checkpoint's decoded streams
//! become the list as they are, without a copy. Owned by `replay`; read by `recovery` and
//! `lost`.

use std::collections::HashMap;

use crate::ids::StreamId;
use crate::meta::StreamSnapshot;

/// Stream snapshots by id, dense.
#[derive(Default)]
pub(super) struct Snapshots {
    dense: Vec<StreamSnapshot>,
    /// Where each stream's snapshot is in `dense`.
    slot_of: HashMap<StreamId, u32>,
}

impl Snapshots {
    /// The snapshots of `streams` (a checkpoint's), kept where they are. Their ids are
    /// distinct unless the checkpoint is wrong; then the last snapshot of an id wins, as a
    /// later record's would.
    pub(super) fn from_vec(streams: Vec<StreamSnapshot>) -> Snapshots {
        assert!(streams.len() <= u32::MAX as usize, "stream count fits a slot");
        let slot_of: HashMap<StreamId, u32> =
            streams.iter().enumerate().map(|(slot, stream)| (stream.id, slot as u32)).collect();
        if slot_of.len() == streams.len() {
            return Snapshots { dense: streams, slot_of };
        }
        tracing::warn!("a checkpoint names a stream twice: its last snapshot is kept");
        let mut table = Snapshots::default();
        for stream in streams {
            table.remove(stream.id);
            table.insert(stream);
        }
        table
    }

    pub(super) fn contains(&self, id: StreamId) -> bool {
        self.slot_of.contains_key(&id)
    }

    pub(super) fn get_mut(&mut self, id: StreamId) -> Option<&mut StreamSnapshot> {
        let slot = *self.slot_of.get(&id)?;
        Some(&mut self.dense[slot as usize])
    }

    /// Adds a stream not yet present.
    pub(super) fn insert(&mut self, snapshot: StreamSnapshot) {
        let slot = u32::try_from(self.dense.len()).expect("stream count fits a slot");
        let before = self.slot_of.insert(snapshot.id, slot);
        assert!(before.is_none(), "stream {} inserted twice", snapshot.id);
        self.dense.push(snapshot);
    }

    /// Removes a stream; the last snapshot takes its slot.
    pub(super) fn remove(&mut self, id: StreamId) -> Option<StreamSnapshot> {
        let slot = self.slot_of.remove(&id)? as usize;
        let removed = self.dense.swap_remove(slot);
        assert_eq!(removed.id, id);
        if let Some(moved) = self.dense.get(slot) {
            self.slot_of.insert(moved.id, slot as u32);
        }
        assert_eq!(self.slot_of.len(), self.dense.len());
        Some(removed)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &StreamSnapshot> {
        self.dense.iter()
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut StreamSnapshot> {
        self.dense.iter_mut()
    }

    /// Every snapshot, in no particular order; the map of slots is freed.
    pub(super) fn into_vec(self) -> Vec<StreamSnapshot> {
        self.dense
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::storage::vfs::sim::SimRng;

    fn snapshot(id: u64) -> StreamSnapshot {
        StreamSnapshot::for_tests(&format!("s{id}"), StreamId::from_raw(id))
    }

    /// Random inserts and removes against a `BTreeMap` model: the same streams are found,
    /// each under its own id.
    #[test]
    fn inserts_and_removes_agree_with_a_map() {
        for seed in 0..32 {
            let mut rng = SimRng::new(seed);
            let mut model: BTreeMap<u64, ()> = BTreeMap::new();
            let first: Vec<StreamSnapshot> = (1..=rng.below(20)).map(snapshot).collect();
            model.extend(first.iter().map(|s| (s.id.raw(), ())));
            let mut table = Snapshots::from_vec(first);
            for _ in 0..400 {
                let id = 1 + rng.below(60);
                if rng.below(2) == 0 {
                    if !table.contains(StreamId::from_raw(id)) {
                        table.insert(snapshot(id));
                        model.insert(id, ());
                    }
                } else {
                    let removed = table.remove(StreamId::from_raw(id));
                    assert_eq!(removed.map(|s| s.id.raw()), model.remove(&id).map(|()| id));
                }
                assert_eq!(table.values().count(), model.len());
                for id in model.keys() {
                    assert_eq!(table.get_mut(StreamId::from_raw(*id)).map(|s| s.id.raw()), Some(*id));
                }
            }
            let mut ids: Vec<u64> = table.into_vec().iter().map(|s| s.id.raw()).collect();
            ids.sort_unstable();
            assert_eq!(ids, model.keys().copied().collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_checkpoint_that_names_a_stream_twice_keeps_its_last_snapshot() {
        let twice = StreamSnapshot { last_access_ms: 7, ..snapshot(2) };
        let mut table = Snapshots::from_vec(vec![snapshot(1), snapshot(2), snapshot(3), twice]);
        assert_eq!(table.values().count(), 3);
        assert_eq!(table.get_mut(StreamId::from_raw(2)).map(|s| s.last_access_ms), Some(7));
        assert!(table.contains(StreamId::from_raw(1)) && table.contains(StreamId::from_raw(3)));
    }
}
