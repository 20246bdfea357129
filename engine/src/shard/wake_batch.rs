//! Ringing shards once per turn of the calling thread, for fronts that share one CPU with
//! the shards.
//!
//! When the front's worker thread and the shard threads share a single CPU, a shard woken
//! by the first op of a turn cannot run before the worker gives up the CPU anyway; waking
//! it early only lets the scheduler's tick cut the worker's turn short and run the shard
//! with half the ops it would have had. A thread that opts in ([`defer_on_this_thread`])
//! therefore notes which shards it sent ops to and rings them when it is about to go idle
//! ([`ring_deferred`]); the batches grow, and each op costs fewer context switches.
//!
//! The wait is bounded three ways: by the thread going idle, by [`DEFERRED_OPS_MAX`] ops,
//! and by [`DEFERRED_US_MAX`] microseconds, checked by [`ring_overdue`] (which a front
//! calls when it starts on a request, so a worker kept busy without ever going idle still
//! rings in time). A thread that never opted in rings at once, as before.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use super::doorbell::Doorbell;

/// Most ops a thread holds back before it rings their shards.
pub const DEFERRED_OPS_MAX: u32 = 64;
/// Longest a held-back ring waits, in microseconds, once [`ring_overdue`] gets to look.
pub const DEFERRED_US_MAX: u64 = 200;

#[derive(Default)]
struct Deferred {
    enabled: bool,
    /// Shards sent an op since the last ring, each once (ringing skips those awake).
    doorbells: Vec<Arc<Doorbell>>,
    ops: u32,
    since: Option<Instant>,
}

thread_local! {
    static DEFERRED: RefCell<Deferred> = RefCell::new(Deferred::default());
}

/// Holds back this thread's rings until [`ring_deferred`], within the bounds above.
pub fn defer_on_this_thread() {
    DEFERRED.with(|deferred| deferred.borrow_mut().enabled = true);
}

/// Rings every shard this thread held a ring back for.
pub fn ring_deferred() {
    DEFERRED.with(|deferred| {
        let mut deferred = deferred.borrow_mut();
        deferred.ops = 0;
        deferred.since = None;
        // `Doorbell::ring` wakes a sleeping shard (or does nothing); it never comes back here.
        for doorbell in deferred.doorbells.drain(..) {
            doorbell.ring();
        }
    });
}

/// Rings the held-back shards if the oldest ring has waited [`DEFERRED_US_MAX`].
pub fn ring_overdue() {
    let overdue = DEFERRED.with(|deferred| {
        let deferred = deferred.borrow();
        deferred.since.is_some_and(|since| since.elapsed().as_micros() as u64 >= DEFERRED_US_MAX)
    });
    if overdue {
        ring_deferred();
    }
}

/// Rings `doorbell` after an op was enqueued: now, or later if this thread defers.
pub(super) fn ring(doorbell: &Arc<Doorbell>) {
    let full = DEFERRED.with(|deferred| {
        let mut deferred = deferred.borrow_mut();
        if !deferred.enabled {
            return None;
        }
        if !deferred.doorbells.iter().any(|held| Arc::ptr_eq(held, doorbell)) {
            deferred.doorbells.push(Arc::clone(doorbell));
        }
        deferred.since.get_or_insert_with(Instant::now);
        deferred.ops += 1;
        Some(deferred.ops >= DEFERRED_OPS_MAX)
    });
    match full {
        None => doorbell.ring(),
        Some(true) => ring_deferred(),
        Some(false) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// A stand-in shard thread that sleeps on its doorbell until it has seen `ops` ops,
    /// then says so on the returned channel.
    fn sleeper(queued: Arc<AtomicUsize>, ops: usize) -> (Arc<Doorbell>, Shard) {
        let doorbell = Arc::new(Doorbell::default());
        let bell = Arc::clone(&doorbell);
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            bell.bind_to_current_thread();
            while queued.load(Ordering::SeqCst) < ops {
                // A sleep far longer than the test's patience: only a ring ends it in time.
                bell.sleep(Duration::from_secs(3600), || queued.load(Ordering::SeqCst) < ops);
            }
            done.send(()).unwrap();
        });
        while !doorbell.is_bound() {
            std::thread::yield_now();
        }
        (doorbell, Shard(finished))
    }

    struct Shard(std::sync::mpsc::Receiver<()>);

    impl Shard {
        fn join(self) {
            let woke = self.0.recv_timeout(Duration::from_secs(30));
            assert!(woke.is_ok(), "the shard was never rung");
        }
    }

    #[test]
    fn a_deferring_thread_holds_rings_until_it_rings_them() {
        let queued = Arc::new(AtomicUsize::new(0));
        let (doorbell, shard) = sleeper(Arc::clone(&queued), 3);
        defer_on_this_thread();
        for _ in 0..3 {
            queued.fetch_add(1, Ordering::SeqCst);
            ring(&doorbell);
        }
        let held = DEFERRED.with(|deferred| deferred.borrow().doorbells.len());
        assert_eq!(held, 1, "one held ring per shard, however many ops");
        ring_deferred();
        shard.join();
        assert!(DEFERRED.with(|deferred| deferred.borrow().doorbells.is_empty()));
    }

    #[test]
    fn the_op_bound_rings_without_going_idle() {
        let ops = DEFERRED_OPS_MAX as usize;
        let queued = Arc::new(AtomicUsize::new(0));
        let (doorbell, shard) = sleeper(Arc::clone(&queued), ops);
        defer_on_this_thread();
        for _ in 0..ops {
            queued.fetch_add(1, Ordering::SeqCst);
            ring(&doorbell);
        }
        // No ring_deferred: the last op reached the bound and rang.
        shard.join();
    }

    #[test]
    fn an_overdue_ring_is_rung_by_the_next_check() {
        let queued = Arc::new(AtomicUsize::new(0));
        let (doorbell, shard) = sleeper(Arc::clone(&queued), 1);
        defer_on_this_thread();
        queued.fetch_add(1, Ordering::SeqCst);
        ring(&doorbell);
        ring_overdue();
        let held = DEFERRED.with(|deferred| deferred.borrow().doorbells.len());
        if held == 1 {
            // Not yet due when checked: wait past the bound, and the next check rings it.
            std::thread::sleep(Duration::from_micros(DEFERRED_US_MAX * 2));
            ring_overdue();
        }
        shard.join();
    }

    #[test]
    fn a_thread_that_does_not_defer_rings_at_once() {
        let queued = Arc::new(AtomicUsize::new(0));
        let (doorbell, shard) = sleeper(Arc::clone(&queued), 1);
        queued.fetch_add(1, Ordering::SeqCst);
        ring(&doorbell);
        shard.join();
    }
}
