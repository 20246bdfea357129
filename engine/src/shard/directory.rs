//! A shard's name → stream map, as readers see it and as the shard sees it mid-batch.
//!
//! The [`Directory`] holds published streams only; readers look names up under its read lock.
//! While a batch is applied, creates and deletes go to an [`Overlay`] that the shard consults
//! first; the overlay is folded into the directory, under one write lock, only after the
//! batch is committed. A reader therefore never finds a stream whose create is not durable,
//! nor misses one whose delete is not.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::stream::Stream;

/// Published streams of one shard.
#[derive(Default)]
pub(crate) struct Directory {
    streams: RwLock<HashMap<Arc<str>, Arc<Stream>>>,
}

impl Directory {
    pub(crate) fn get(&self, name: &str) -> Option<Arc<Stream>> {
        self.streams.read().expect("directory lock").get(name).cloned()
    }

    pub(crate) fn len(&self) -> usize {
        self.streams.read().expect("directory lock").len()
    }

    /// Calls `visit` with every published stream (holds the read lock: keep it short).
    pub(crate) fn for_each(&self, mut visit: impl FnMut(&Arc<Stream>)) {
        for stream in self.streams.read().expect("directory lock").values() {
            visit(stream);
        }
    }

    /// Lets go of every stream, at the engine's end: a fork's stream holds its source's
    /// shard, and each shard holds its directory, so without this cut a stopped engine's
    /// shards (their logs, maps and streams) would hold one another forever.
    pub(crate) fn clear(&self) {
        let streams = std::mem::take(&mut *self.streams.write().expect("directory lock"));
        // Dropped outside the lock: a fork's drop reaches its source's shard.
        drop(streams);
    }

    /// Publishes a shard's recovered streams, at start, into its empty directory: room for
    /// all of them first, and each name hashed once (growing the map as they came, through a
    /// batch's overlay, hashed every name three times or more, a large share of a start's CPU
    /// with many streams; docs/performance/code-choices.md).
    pub(crate) fn install(&self, recovered: Vec<Arc<Stream>>) {
        let mut streams = self.streams.write().expect("directory lock");
        assert!(streams.is_empty(), "recovered streams go into an empty directory");
        streams.reserve(recovered.len());
        for stream in recovered {
            // Recovery gives each name once; were it not to, the later stream wins, as a
            // later create in one batch would.
            if let Some(before) = streams.insert(Arc::clone(&stream.name), stream) {
                tracing::warn!(stream = %before.name, "two recovered streams of one name: the later is kept");
            }
        }
    }

    /// Applies a committed batch's creates and deletes.
    pub(crate) fn apply(&self, overlay: &mut Overlay) {
        if overlay.changes.is_empty() {
            return;
        }
        let mut streams = self.streams.write().expect("directory lock");
        for (name, change) in overlay.changes.drain() {
            match change {
                Some(stream) => streams.insert(name, stream),
                None => streams.remove(&name),
            };
        }
    }
}

/// Creates (`Some`) and deletes (`None`) applied in the current batch, not yet published.
#[derive(Default)]
pub(crate) struct Overlay {
    changes: HashMap<Arc<str>, Option<Arc<Stream>>>,
}

impl Overlay {
    /// What the batch did to `name`: `Some(Some)` created, `Some(None)` deleted, `None` nothing.
    pub(crate) fn get(&self, name: &str) -> Option<Option<&Arc<Stream>>> {
        self.changes.get(name).map(Option::as_ref)
    }

    pub(crate) fn create(&mut self, stream: Arc<Stream>) {
        self.changes.insert(Arc::clone(&stream.name), Some(stream));
    }

    pub(crate) fn delete(&mut self, name: Arc<str>) {
        self.changes.insert(name, None);
    }
}
