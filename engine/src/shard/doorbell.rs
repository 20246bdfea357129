//! Waking a parked shard without spinning.
//!
//! A shard's queue is a bounded crossbeam channel, but its blocking receive spins and yields
//! before it sleeps, which on a busy core steals time from the threads that feed it. The
//! shard instead drains with `try_recv` and, when the queue is empty, parks on this
//! doorbell: it announces that it is going to sleep, looks at the queue once more, then
//! parks. A sender that finds the shard asleep after enqueueing unparks it. The two
//! fences make "enqueue, then look at the flag" and "raise the flag, then look at the
//! queue" impossible to both miss each other (the classic eventcount), so no op waits for
//! a timeout to be noticed.

use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::OnceLock;
use std::thread::Thread;
use std::time::Duration;

#[derive(Default)]
pub(crate) struct Doorbell {
    asleep: AtomicBool,
    shard: OnceLock<Thread>,
}

impl Doorbell {
    /// Binds the doorbell to the calling thread (the shard's own thread).
    pub(crate) fn bind_to_current_thread(&self) {
        let _ = self.shard.set(std::thread::current());
    }

    /// Whether a shard thread has bound itself to the doorbell.
    #[cfg(test)]
    pub(crate) fn is_bound(&self) -> bool {
        self.shard.get().is_some()
    }

    /// Sender side, after an op was enqueued.
    pub(crate) fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.asleep.load(Ordering::Relaxed) {
            if let Some(shard) = self.shard.get() {
                shard.unpark();
            }
        }
    }

    /// Shard side: sleeps up to `timeout` unless `queue_is_empty` turns false after the
    /// shard announced it was going to sleep.
    pub(crate) fn sleep(&self, timeout: Duration, queue_is_empty: impl FnOnce() -> bool) {
        self.asleep.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if queue_is_empty() {
            std::thread::park_timeout(timeout);
        }
        self.asleep.store(false, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_ring_after_enqueue_is_never_lost() {
        let doorbell = Arc::new(Doorbell::default());
        let queued = Arc::new(AtomicUsize::new(0));
        let (bell, queue) = (Arc::clone(&doorbell), Arc::clone(&queued));
        let shard = std::thread::spawn(move || {
            bell.bind_to_current_thread();
            let start = Instant::now();
            let mut seen = 0;
            while seen < 1000 {
                let available = queue.load(Ordering::SeqCst);
                if available > seen {
                    seen = available;
                    continue;
                }
                // A long timeout: a lost wake would make this test take minutes.
                bell.sleep(Duration::from_secs(60), || queue.load(Ordering::SeqCst) == seen);
            }
            start.elapsed()
        });
        while !doorbell.is_bound() {
            std::thread::yield_now();
        }
        for _ in 0..1000 {
            queued.fetch_add(1, Ordering::SeqCst);
            doorbell.ring();
            std::thread::yield_now();
        }
        let elapsed = shard.join().unwrap();
        assert!(elapsed < Duration::from_secs(30), "a wake was lost ({elapsed:?})");
    }
}
