//! Tail-advance notifications for live readers (long-poll and SSE).
//!
//! A stream has a live slot only while someone waits on it: subscribing creates the slot in
//! its shard's registry, dropping the last subscription removes it, so idle streams cost no
//! channel, task or timer. After each committed batch the shard records every touched
//! stream's published tail in its slot and wakes the slot once ([`LiveRegistry::wake`]).
//! Readers must enable their wait *before* they look at the tail, so an advance between the
//! look and the wait is never missed.
//!
//! A slot is all the engine keeps for live readers: what a front shares between the readers
//! of one stream (formatted events, a fan-out) is the front's own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::ids::StreamId;
use crate::stream::Published;

/// Live slots of one shard, keyed by stream id.
#[derive(Default)]
pub(crate) struct LiveRegistry {
    slots: Mutex<HashMap<StreamId, Registered>>,
}

struct Registered {
    slot: Arc<LiveSlot>,
    subscribers: usize,
}

/// What live readers of one stream share.
pub(crate) struct LiveSlot {
    notify: Arc<Notify>,
    /// The published tail as `messages << 2 | closed << 1 | gone`; it only grows.
    tail: AtomicU64,
}

/// The published tail as a live slot knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveTail {
    pub messages: u64,
    pub closed: bool,
    pub gone: bool,
}

fn encode(published: Published) -> u64 {
    published.tail.messages << 2 | u64::from(published.closed) << 1 | u64::from(published.gone)
}

impl LiveSlot {
    fn new() -> LiveSlot {
        LiveSlot { notify: Arc::new(Notify::new()), tail: AtomicU64::new(0) }
    }

    /// Records a published state (states only move forward, so the largest wins).
    fn observe(&self, published: Published) {
        self.tail.fetch_max(encode(published), Ordering::AcqRel);
    }
}

impl LiveRegistry {
    /// Registers interest in stream `id` until the returned subscription is dropped.
    /// `current` reads the stream's published state; it is called after the slot exists, so
    /// no publication can fall between the two.
    pub(crate) fn subscribe(
        self: &Arc<Self>,
        id: StreamId,
        current: impl FnOnce() -> Published,
    ) -> Subscription {
        let slot = {
            let mut slots = self.slots.lock().expect("live registry lock");
            let registered = slots
                .entry(id)
                .or_insert_with(|| Registered { slot: Arc::new(LiveSlot::new()), subscribers: 0 });
            registered.subscribers += 1;
            Arc::clone(&registered.slot)
        };
        slot.observe(current());
        Subscription { slot, registry: Arc::clone(self), id }
    }

    /// Records each stream's new published state and wakes its readers (once per stream).
    pub(crate) fn wake(&self, published: impl IntoIterator<Item = (StreamId, Published)>) {
        let slots = self.slots.lock().expect("live registry lock");
        if slots.is_empty() {
            return;
        }
        for (id, state) in published {
            if let Some(registered) = slots.get(&id) {
                registered.slot.observe(state);
                registered.slot.notify.notify_waiters();
            }
        }
    }

    /// Wakes every reader of the shard (shutdown).
    pub(crate) fn wake_all(&self) {
        let slots = self.slots.lock().expect("live registry lock");
        for registered in slots.values() {
            registered.slot.notify.notify_waiters();
        }
    }

    /// Streams with at least one live reader.
    pub(crate) fn len(&self) -> usize {
        self.slots.lock().expect("live registry lock").len()
    }

    fn unsubscribe(&self, id: StreamId) {
        let mut slots = self.slots.lock().expect("live registry lock");
        if let Some(registered) = slots.get_mut(&id) {
            registered.subscribers -= 1;
            if registered.subscribers == 0 {
                slots.remove(&id);
            }
        }
    }
}

/// Interest in one stream's tail; wakes come through [`Subscription::notify`].
pub struct Subscription {
    slot: Arc<LiveSlot>,
    registry: Arc<LiveRegistry>,
    id: StreamId,
}

impl Subscription {
    /// The notifier to wait on (`notified()` / `notified_owned()`, enabled before checking).
    pub fn notify(&self) -> &Arc<Notify> {
        &self.slot.notify
    }

    /// The stream's published tail as of its last commit (no stream lock taken).
    pub fn tail(&self) -> LiveTail {
        let state = self.slot.tail.load(Ordering::Acquire);
        LiveTail { messages: state >> 2, closed: state & 2 != 0, gone: state & 1 != 0 }
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
    use crate::offset::Offset;
    use std::future::Future;
    use std::pin::pin;

    fn published(messages: u64, closed: bool) -> Published {
        Published { tail: Offset { messages, bytes: messages * 10 }, closed, gone: false, deleted: false }
    }

    #[test]
    fn slots_exist_only_while_subscribed() {
        let registry = Arc::new(LiveRegistry::default());
        let first = registry.subscribe(StreamId::from_raw(7), || published(0, false));
        let second = registry.subscribe(StreamId::from_raw(7), || published(0, false));
        assert!(Arc::ptr_eq(first.notify(), second.notify()));
        assert_eq!(registry.len(), 1);
        drop(first);
        assert_eq!(registry.len(), 1);
        drop(second);
        assert_eq!(registry.len(), 0);
    }

    #[test]
    fn wake_reaches_enabled_waiters_of_that_stream_only_and_records_the_tail() {
        let registry = Arc::new(LiveRegistry::default());
        let mine = registry.subscribe(StreamId::from_raw(1), || published(3, false));
        let other = registry.subscribe(StreamId::from_raw(2), || published(0, false));
        assert_eq!(mine.tail(), LiveTail { messages: 3, closed: false, gone: false });
        let mut waiting = pin!(mine.notify().notified());
        assert!(!waiting.as_mut().enable(), "nothing has happened yet");
        let mut elsewhere = pin!(other.notify().notified());
        elsewhere.as_mut().enable();
        registry.wake([
            (StreamId::from_raw(1), published(5, true)),
            (StreamId::from_raw(3), published(1, false)),
        ]);
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(waiting.as_mut().poll(&mut context).is_ready());
        assert!(elsewhere.as_mut().poll(&mut context).is_pending());
        assert_eq!(mine.tail(), LiveTail { messages: 5, closed: true, gone: false });
        registry.wake([(StreamId::from_raw(1), published(4, false))]);
        assert_eq!(mine.tail().messages, 5, "a late, older state never moves the tail back");
    }
}
