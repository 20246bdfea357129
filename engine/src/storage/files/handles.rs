//! The open files of a shard's streams, shared by its writer and its readers, bounded.
//!
//! A stream's file is opened when it is first written or read and kept open while it is
//! used; past the bound, the least recently used eighth is closed at once (a reader or
//! writer still holding one keeps it open until it is done). A million idle streams hold no
//! file descriptors.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};

use crate::ids::StreamId;
use crate::storage::vfs::VfsFile;

/// Open files by stream id.
pub(crate) struct Handles {
    capacity: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    tick: u64,
    open: HashMap<StreamId, (Arc<dyn VfsFile>, u64)>,
}

impl Handles {
    /// Files open now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.state.lock().expect("handle cache lock").open.len()
    }

    pub(crate) fn new(capacity: usize) -> Handles {
        assert!(capacity > 0, "a handle cache holds at least one file");
        Handles { capacity, state: Mutex::new(State::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("handle cache lock")
    }

    /// The open file of `stream`, opened with `open` if it is not (outside the lock).
    pub(crate) fn get_or_open(
        &self,
        stream: StreamId,
        open: impl FnOnce() -> io::Result<Arc<dyn VfsFile>>,
    ) -> io::Result<Arc<dyn VfsFile>> {
        if let Some(file) = self.get(stream) {
            return Ok(file);
        }
        let file = open()?;
        Ok(self.insert(stream, file))
    }

    pub(crate) fn get(&self, stream: StreamId) -> Option<Arc<dyn VfsFile>> {
        let mut state = self.lock();
        state.tick += 1;
        let tick = state.tick;
        state.open.get_mut(&stream).map(|(file, used)| {
            *used = tick;
            Arc::clone(file)
        })
    }

    /// Caches `file` for `stream` (keeping one opened meanwhile by another thread).
    pub(crate) fn insert(&self, stream: StreamId, file: Arc<dyn VfsFile>) -> Arc<dyn VfsFile> {
        let mut state = self.lock();
        state.tick += 1;
        let tick = state.tick;
        let file = Arc::clone(&state.open.entry(stream).or_insert((file, tick)).0);
        if state.open.len() > self.capacity {
            evict_oldest(&mut state.open, self.capacity);
        }
        file
    }

    /// Makes `file` the one of `stream` (its old file was deleted and written again):
    /// readers from now on use it; one already reading keeps the old until it is done.
    pub(crate) fn replace(&self, stream: StreamId, file: Arc<dyn VfsFile>) {
        let mut state = self.lock();
        state.tick += 1;
        let tick = state.tick;
        state.open.insert(stream, (file, tick));
        if state.open.len() > self.capacity {
            evict_oldest(&mut state.open, self.capacity);
        }
    }

    /// Forgets `stream`'s file (its stream is gone).
    pub(crate) fn remove(&self, stream: StreamId) {
        self.lock().open.remove(&stream);
    }

    /// Most files the cache keeps open.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }
}

/// Closes the least recently used files until an eighth of `capacity` is free.
fn evict_oldest(open: &mut HashMap<StreamId, (Arc<dyn VfsFile>, u64)>, capacity: usize) {
    let keep = capacity - capacity / 8;
    let mut ticks: Vec<u64> = open.values().map(|(_, used)| *used).collect();
    let cut = ticks.len() - keep;
    let (_, threshold, _) = ticks.select_nth_unstable(cut - 1);
    let threshold = *threshold;
    open.retain(|_, (_, used)| *used > threshold);
    debug_assert!(open.len() <= keep, "eviction makes room");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::vfs::sim::SimVfs;
    use crate::storage::vfs::Vfs;
    use std::path::Path;

    #[test]
    fn the_cache_stays_bounded_and_keeps_recent_files() {
        let vfs = SimVfs::new();
        vfs.create_dir_all(Path::new("/d")).unwrap();
        let handles = Handles::new(16);
        for stream in 0..100u64 {
            let path = format!("/d/{stream}");
            handles.get_or_open(StreamId::from_raw(stream), || vfs.create_new(Path::new(&path))).unwrap();
            handles.get(StreamId::from_raw(0));
            assert!(handles.len() <= 16);
        }
        assert!(handles.get(StreamId::from_raw(0)).is_some(), "a file in use stays open");
        assert!(handles.get(StreamId::from_raw(99)).is_some());
        assert!(handles.get(StreamId::from_raw(50)).is_none());
        handles.remove(StreamId::from_raw(0));
        assert!(handles.get(StreamId::from_raw(0)).is_none());
    }
}
