//! Tail-advance notifications for live readers (long-poll and SSE).
//!
//! A stream has a live slot only while someone waits on it: subscribing creates the slot in
//! its shard's registry, dropping the last subscription removes it, so idle streams cost no
//! channel, task or timer. After each committed batch the shard wakes every touched stream's
//! slot once ([`LiveRegistry::wake`]). Readers must enable their wait *before* they look at
//! the tail, so an advance between the look and the wait is never missed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Live slots of one shard, keyed by stream id.
#[derive(Default)]
pub struct LiveRegistry {
    slots: Mutex<HashMap<u64, Slot>>,
}

struct Slot {
    notify: Arc<Notify>,
    subscribers: usize,
}

impl LiveRegistry {
    /// Registers interest in stream `id` until the returned subscription is dropped.
    pub fn subscribe(self: &Arc<Self>, id: u64) -> Subscription {
        let mut slots = self.slots.lock().expect("live registry lock");
        let slot =
            slots.entry(id).or_insert_with(|| Slot { notify: Arc::new(Notify::new()), subscribers: 0 });
        slot.subscribers += 1;
        Subscription { notify: Arc::clone(&slot.notify), registry: Arc::clone(self), id }
    }

    /// Wakes every reader waiting on any of `ids` (each id once).
    pub fn wake(&self, ids: impl IntoIterator<Item = u64>) {
        let slots = self.slots.lock().expect("live registry lock");
        if slots.is_empty() {
            return;
        }
        for id in ids {
            if let Some(slot) = slots.get(&id) {
                slot.notify.notify_waiters();
            }
        }
    }

    /// Wakes every reader of the shard (shutdown).
    pub fn wake_all(&self) {
        let slots = self.slots.lock().expect("live registry lock");
        for slot in slots.values() {
            slot.notify.notify_waiters();
        }
    }

    /// Streams with at least one live reader.
    pub fn len(&self) -> usize {
        self.slots.lock().expect("live registry lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn unsubscribe(&self, id: u64) {
        let mut slots = self.slots.lock().expect("live registry lock");
        if let Some(slot) = slots.get_mut(&id) {
            slot.subscribers -= 1;
            if slot.subscribers == 0 {
                slots.remove(&id);
            }
        }
    }
}

/// Interest in one stream's tail; wakes come through [`Subscription::notify`].
pub struct Subscription {
    notify: Arc<Notify>,
    registry: Arc<LiveRegistry>,
    id: u64,
}

impl Subscription {
    /// The notifier to wait on (`notified()` / `notified_owned()`, enabled before checking).
    pub fn notify(&self) -> &Arc<Notify> {
        &self.notify
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.registry.unsubscribe(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::pin;

    #[test]
    fn slots_exist_only_while_subscribed() {
        let registry = Arc::new(LiveRegistry::default());
        let first = registry.subscribe(7);
        let second = registry.subscribe(7);
        assert!(Arc::ptr_eq(first.notify(), second.notify()));
        assert_eq!(registry.len(), 1);
        drop(first);
        assert_eq!(registry.len(), 1);
        drop(second);
        assert!(registry.is_empty());
    }

    #[test]
    fn wake_reaches_enabled_waiters_of_that_stream_only() {
        let registry = Arc::new(LiveRegistry::default());
        let mine = registry.subscribe(1);
        let other = registry.subscribe(2);
        let mut waiting = pin!(mine.notify().notified());
        assert!(!waiting.as_mut().enable(), "nothing has happened yet");
        let mut elsewhere = pin!(other.notify().notified());
        elsewhere.as_mut().enable();
        registry.wake([1, 1, 3]);
        let waker = std::task::Waker::noop();
        let mut context = std::task::Context::from_waker(waker);
        assert!(waiting.as_mut().poll(&mut context).is_ready());
        assert!(elsewhere.as_mut().poll(&mut context).is_pending());
    }
}
