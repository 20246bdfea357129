//! What the live readers of one stream share in the server — the last frame one of them
//! formatted, the stream's SSE fan-out — kept exactly while the stream has readers here.
//!
//! A reader joins with its stream's handle and holds a [`Member`]; the last member to go
//! removes the entry, so idle streams cost nothing. A stream is told apart from a later one
//! of the same name by its incarnation id. The map is split over [`SHARDS`] locks, taken
//! once when a reader joins and once when it leaves, never per event.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::{Arc, Mutex};

use ds_engine::{StreamHandle, StreamId};

/// Locks the registry is split over.
const SHARDS: usize = 16;

/// One stream incarnation: its id (unique in its shard) and name (unique across shards).
type Key = (StreamId, Box<str>);

/// Per-stream shared values of type `T`, made with `T::default()` on first join.
pub(crate) struct PerStream<T> {
    shards: [Mutex<HashMap<Key, Entry<T>>>; SHARDS],
}

struct Entry<T> {
    shared: Arc<T>,
    members: usize,
}

/// A reader's share of its stream's `T`; leaving (dropping it) may remove the entry.
pub(crate) struct Member<T> {
    shared: Arc<T>,
    registry: Arc<PerStream<T>>,
    key: Key,
}

impl<T> Default for PerStream<T> {
    fn default() -> Self {
        PerStream { shards: std::array::from_fn(|_| Mutex::new(HashMap::new())) }
    }
}

impl<T: Default> PerStream<T> {
    /// Joins the readers of `handle`'s stream.
    pub(crate) fn join(self: &Arc<Self>, handle: &StreamHandle) -> Member<T> {
        let key: Key = (handle.id(), handle.name().into());
        let shared = {
            let mut shard = self.shard(&key).lock().expect("per-stream lock");
            let entry =
                shard.entry(key.clone()).or_insert_with(|| Entry { shared: Arc::default(), members: 0 });
            entry.members += 1;
            Arc::clone(&entry.shared)
        };
        Member { shared, registry: Arc::clone(self), key }
    }
}

impl<T> PerStream<T> {
    /// Streams with at least one member.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.lock().expect("per-stream lock").len()).sum()
    }

    fn shard(&self, key: &Key) -> &Mutex<HashMap<Key, Entry<T>>> {
        let mut hasher = DefaultHasher::new();
        key.hash(&mut hasher);
        &self.shards[hasher.finish() as usize % SHARDS]
    }

    fn leave(&self, key: &Key) {
        let mut shard = self.shard(key).lock().expect("per-stream lock");
        let entry = shard.get_mut(key).expect("a member's entry exists");
        assert!(entry.members > 0, "members are counted");
        entry.members -= 1;
        if entry.members == 0 {
            shard.remove(key);
        }
    }
}

impl<T> Deref for Member<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.shared
    }
}

impl<T> Drop for Member<T> {
    fn drop(&mut self) {
        self.registry.leave(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ds_engine::{ContentType, CreateRequest, Engine, EngineConfig, StreamConfig, StreamName};

    async fn create(engine: &Engine, name: &str) -> StreamHandle {
        let config =
            StreamConfig { content_type: ContentType::default_type(), ttl_secs: None, expires_at_ms: None };
        let name = StreamName::new(name).unwrap();
        let request = CreateRequest { name: name.clone(), config, initial: None, closed: false };
        engine.create(request).await.unwrap();
        engine.open(&name).unwrap()
    }

    #[tokio::test]
    async fn members_of_one_stream_share_and_the_last_one_out_removes_it() {
        let engine = Engine::start(EngineConfig { shard_count: 1, ..EngineConfig::default() }).unwrap();
        let registry: Arc<PerStream<std::sync::atomic::AtomicU64>> = Arc::default();
        let (a, b) = (create(&engine, "a").await, create(&engine, "b").await);
        let first = registry.join(&a);
        let second = registry.join(&a);
        let other = registry.join(&b);
        assert!(std::ptr::eq(&*first, &*second), "one value per stream");
        assert!(!std::ptr::eq(&*first, &*other));
        assert_eq!(registry.len(), 2);
        drop((first, other));
        assert_eq!(registry.len(), 1, "a stream stays while it has a member");
        drop(second);
        assert_eq!(registry.len(), 0);
        // A stream created again under the same name is another incarnation.
        let kept = registry.join(&a);
        engine.delete(StreamName::new("a").unwrap()).await.unwrap();
        let again = registry.join(&create(&engine, "a").await);
        assert!(!std::ptr::eq(&*kept, &*again));
        engine.shutdown();
    }
}
