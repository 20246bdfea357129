//! How shard threads and the threads that read share a core.
//!
//! Shard threads wait for ops under `SCHED_BATCH` ([`batch_scheduling`]): woken by an op, a
//! shard does not preempt the thread that woke it, so the front finishes its turn and the
//! shard drains a batch. A shard thread about to block on a device flush switches to the
//! normal policy first ([`prompt_scheduling`]): the flush's completion then preempts the
//! front at once and the batch is answered, instead of waiting for the front's turn to end.
//! On a shared core that raises the append rate and lowers tail latency
//! (docs/performance/code-choices.md). Either way a shard thread
//! asks for a short time slice ([`SHARD_SLICE_US`]), so that once woken it is picked before
//! a front thread that has run for a while. The policy is cached per thread, so a switch
//! costs syscalls only when the policy changes. The other side of the bargain: a front
//! thread kept busy by readers would hold the core until the scheduler's tick, and every
//! step of a write with it, so reads offer the core now and then ([`offer_core`]). Leaf
//! module: it touches only the calling thread.

use std::cell::Cell;
use std::time::Instant;

/// The scheduling policies a shard thread switches between.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Policy {
    /// `SCHED_BATCH`: a wake-up never preempts the running thread.
    Batch,
    /// `SCHED_OTHER`: a wake-up may preempt it.
    Normal,
}

thread_local! {
    /// The policy this thread last asked for (`None`: it never asked).
    static POLICY: Cell<Option<Policy>> = const { Cell::new(None) };
    /// This thread's nice value, read at its first policy switch and kept through the
    /// switches after it (`None`: not read yet).
    static NICE: Cell<Option<i32>> = const { Cell::new(None) };
}

/// Before a shard thread waits for ops: `SCHED_BATCH`.
///
/// A shard is woken by the front for each op; with wakeup preemption on a busy core every op
/// would cost two context switches. `SCHED_BATCH` lets the waker finish its turn, so ops
/// queue up and the shard drains them as one batch; on a host with idle cores nothing
/// changes. Failure is harmless (the thread keeps the normal policy).
pub(crate) fn batch_scheduling() {
    set_policy(Policy::Batch);
}

/// Before a thread blocks on a device flush (or on the round another thread flushes): the
/// normal policy, so that the wake-up when it completes preempts the front and the
/// committed batch is published and answered at once.
pub(crate) fn prompt_scheduling() {
    set_policy(Policy::Normal);
}

/// The time slice a shard thread asks for, in microseconds: Linux's EEVDF scheduler (6.12
/// and later) gives a thread woken with a shorter slice an earlier deadline, so a shard back
/// from its flush runs before the front thread it shares a core with has used up its own
/// slice (the default grows with the CPU count: 1.4 ms on two CPUs). A slice below the
/// default raises the append rate and lowers tail latency on a shared core. A much shorter
/// slice costs more than it gains, because the shards then preempt the front for every
/// small step (docs/performance/code-choices.md). Older kernels ignore the request.
const SHARD_SLICE_US: u64 = 700;

fn set_policy(policy: Policy) {
    if POLICY.with(Cell::get) == Some(policy) {
        return;
    }
    // Remembered even when refused: a refusal would only repeat.
    POLICY.with(|current| current.set(Some(policy)));
    #[cfg(target_os = "linux")]
    {
        let raw = match policy {
            Policy::Batch => libc::SCHED_BATCH,
            Policy::Normal => libc::SCHED_OTHER,
        };
        let mut result = with_slice(raw as u32);
        if result != 0 {
            // A kernel that refuses the slice still takes the policy alone.
            let parameters = libc::sched_param { sched_priority: 0 };
            // SAFETY: plain syscall on the calling thread (pid 0) with a valid parameter block.
            result = libc::c_long::from(unsafe { libc::sched_setscheduler(0, raw, &parameters) });
        }
        if result != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), ?policy, "scheduling policy unavailable");
        }
    }
}

/// Sets the calling thread's policy to `policy` with the shard slice, keeping its nice
/// value (the operator's, if the process was started under `nice`; read once per thread);
/// 0 when done.
#[cfg(target_os = "linux")]
fn with_slice(policy: u32) -> libc::c_long {
    let Some(nice) = NICE.with(Cell::get).or_else(thread_nice) else { return -1 };
    NICE.with(|known| known.set(Some(nice)));
    let attributes = sched_attributes(policy, nice, SHARD_SLICE_US * 1000);
    // SAFETY: plain syscall on the calling thread (pid 0) with an attribute block of the
    // size it states, and no flags.
    unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attributes, 0) }
}

/// The calling thread's nice value, as the scheduler holds it.
#[cfg(target_os = "linux")]
fn thread_nice() -> Option<i32> {
    let mut attributes = sched_attributes(0, 0, 0);
    let size = attributes.size;
    // SAFETY: plain syscall on the calling thread (pid 0) with an attribute block of the
    // size it is told, and no flags.
    let result = unsafe { libc::syscall(libc::SYS_sched_getattr, 0, &mut attributes, size, 0) };
    (result == 0).then_some(attributes.sched_nice)
}

/// A `sched_attr` of the normal policies: `policy`, `nice`, a slice of `runtime_ns`.
#[cfg(target_os = "linux")]
fn sched_attributes(policy: u32, nice: i32, runtime_ns: u64) -> libc::sched_attr {
    libc::sched_attr {
        size: std::mem::size_of::<libc::sched_attr>() as u32,
        sched_policy: policy,
        sched_flags: 0,
        sched_nice: nice,
        sched_priority: 0,
        sched_runtime: runtime_ns,
        sched_deadline: 0,
        sched_period: 0,
    }
}

/// Nice value of threads doing background work: the lowest priority of the normal policy.
const BACKGROUND_NICE: i32 = 19;

/// For a thread of background work (the WAL's housekeeper: zero-filling segments ahead,
/// checkpoints): the lowest priority of the normal policy. Its work comes in bursts of
/// milliseconds that otherwise land in the middle of requests on a busy core and lengthen
/// their tail latency (docs/performance/code-choices.md). At nice 19
/// it still gets a share of a saturated core (weight 15 against 1,024 per busy thread), so
/// it is never starved, and all of an idle one. Failure is harmless (the thread keeps its
/// priority).
pub(crate) fn background_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain syscalls on the calling thread: on Linux a thread id names one
        // thread for PRIO_PROCESS, and the nice value is per thread.
        let result = unsafe {
            let thread = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, thread, BACKGROUND_NICE)
        };
        if result != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "background priority unavailable");
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
/// turn, the return from its flush. A few catch-up readers on a shared core then bring
/// appends almost to a stop (docs/performance/code-choices.md). A read costs tens to
/// hundreds of microseconds, so this bounds a waiting shard's
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

    /// The calling thread's nice value, read the other way (`getpriority`).
    #[cfg(target_os = "linux")]
    fn nice_by_getpriority() -> i32 {
        // SAFETY: plain syscalls reading the calling thread's nice value.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::syscall(libc::SYS_gettid) as libc::id_t) }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_background_thread_runs_at_the_lowest_normal_priority_and_alone() {
        let before = nice_by_getpriority();
        let background = std::thread::spawn(|| {
            background_priority();
            nice_by_getpriority()
        });
        assert_eq!(background.join().unwrap(), BACKGROUND_NICE);
        assert_eq!(nice_by_getpriority(), before, "only the calling thread changes");
    }

    #[test]
    fn a_thread_switches_policy_only_when_it_changes() {
        std::thread::spawn(|| {
            assert_eq!(POLICY.with(Cell::get), None);
            prompt_scheduling();
            assert_eq!(POLICY.with(Cell::get), Some(Policy::Normal));
            batch_scheduling();
            batch_scheduling();
            assert_eq!(POLICY.with(Cell::get), Some(Policy::Batch));
            #[cfg(target_os = "linux")]
            {
                // SAFETY: plain syscall reading the calling thread's policy.
                let raw = unsafe { libc::sched_getscheduler(0) };
                assert_eq!(raw, libc::SCHED_BATCH, "the kernel holds the policy asked for last");
            }
            prompt_scheduling();
            #[cfg(target_os = "linux")]
            {
                // SAFETY: as above.
                assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_OTHER);
            }
        })
        .join()
        .unwrap();
    }
}
