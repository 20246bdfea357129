//! How shard threads and the threads that read share a core.
//!
//! Shard threads run `SCHED_BATCH` ([`batch_scheduling`]): woken by an op, a shard does not
//! preempt the thread that woke it, so the front finishes its turn and the shard drains a
//! batch. The other side of that bargain: a front thread kept busy by readers would hold
//! the core until the scheduler's tick, and every step of a write with it, so reads offer
//! the core now and then ([`offer_core`]). Leaf module: it touches only the calling thread.

use std::cell::Cell;
use std::time::Instant;

/// Asks the kernel not to let a shard thread preempt the thread that just woke it.
///
/// A shard is woken by the front for each op; with wakeup preemption on a busy core every op
/// would cost two context switches. `SCHED_BATCH` lets the waker finish its turn, so ops
/// queue up and the shard drains them as one batch; on a host with idle cores nothing
/// changes. Failure is harmless (the thread keeps the normal policy).
pub(crate) fn batch_scheduling() {
    #[cfg(target_os = "linux")]
    {
        let parameters = libc::sched_param { sched_priority: 0 };
        // SAFETY: plain syscall on the calling thread (pid 0) with a valid parameter block.
        let result = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &parameters) };
        if result != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "SCHED_BATCH unavailable for a shard thread");
        }
    }
}

/// A thread that reads offers the core to other threads at least this often (microseconds).
const OFFER_CORE_EVERY_US: u64 = 200;

thread_local! {
    /// When this thread last offered the core.
    static OFFERED_AT: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// After a read: offers the core to other runnable threads (`sched_yield`) when this thread
/// last did so [`OFFER_CORE_EVERY_US`] ago or more.
///
/// Without it a front thread kept busy by catch-up readers holds the core until the
/// scheduler's tick (milliseconds), and each step of a write waits for one — the shard's
/// turn, the return from its flush: on one core, acid appends fell to about a thousand a
/// second (16 ms p50) under eight catch-up readers, and to half their rate in memory
/// mode. A read costs tens to hundreds of microseconds, so this bounds a waiting shard's
/// wait by about that, for a syscall that returns at once when nothing else is runnable,
/// at most 5,000 a second per thread.
pub(crate) fn offer_core() {
    let now = Instant::now();
    let due = OFFERED_AT.with(|offered| {
        let due = offer_due(offered.get(), now);
        if due {
            offered.set(Some(now));
        }
        due
    });
    if due {
        std::thread::yield_now();
    }
}

/// Whether a thread that last offered the core at `offered` should offer it at `now`.
fn offer_due(offered: Option<Instant>, now: Instant) -> bool {
    offered.is_none_or(|at| now.saturating_duration_since(at).as_micros() >= u128::from(OFFER_CORE_EVERY_US))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_core_is_offered_at_first_and_then_once_per_interval() {
        let start = Instant::now();
        assert!(offer_due(None, start), "a thread that never offered it does");
        assert!(!offer_due(Some(start), start));
        assert!(!offer_due(Some(start), start + Duration::from_micros(OFFER_CORE_EVERY_US - 1)));
        assert!(offer_due(Some(start), start + Duration::from_micros(OFFER_CORE_EVERY_US)));
        assert!(!offer_due(Some(start + Duration::from_secs(1)), start), "a clock that went back waits");
    }
}
