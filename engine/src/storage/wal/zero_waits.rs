//! How long shards waited for zeros: the one cost of zero-filling ahead that lands on a
//! commit.
//!
//! A record is written only where its segment was zero-filled and synced before
//! (`writer::zeroing`). The housekeeper fills a few steps ahead of the records, but when a
//! shard's records catch up with its zeroed prefix (a burst, a slow disk, a housekeeper
//! starved of the CPU at its low priority), the shard waits for the fill in flight or fills
//! on its own thread — and every shard of its worker waits with it. That shows in a
//! commit's tail latency and nowhere else, so it is counted here: one set of counters per
//! engine, shared by the shards' writers (relaxed atomics, touched only on those slow paths).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::histogram::{Histogram, HistogramSnapshot};

/// The counters the writers share.
#[derive(Default)]
pub(crate) struct ZeroWaits {
    waits: AtomicU64,
    wait_us: Histogram,
}

/// What waiting for zeros cost the shards since start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZeroWaitStats {
    /// Times a shard waited for zeros before it could write.
    pub waits: u64,
    /// Microseconds each of those waits took.
    pub wait_us: HistogramSnapshot,
}

impl ZeroWaits {
    /// Runs `wait` (a wait for zeros) and counts it with its time.
    pub(crate) fn time<T>(&self, wait: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let result = wait();
        self.record(started.elapsed());
        result
    }

    /// Counts one wait of `waited`.
    fn record(&self, waited: Duration) {
        self.waits.fetch_add(1, Ordering::Relaxed);
        self.wait_us.record(waited.as_micros() as u64);
    }

    pub(crate) fn stats(&self) -> ZeroWaitStats {
        ZeroWaitStats { waits: self.waits.load(Ordering::Relaxed), wait_us: self.wait_us.snapshot() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_wait_is_counted_with_its_time() {
        let waits = ZeroWaits::default();
        assert_eq!(waits.stats(), ZeroWaitStats::default());
        waits.record(Duration::from_micros(3));
        waits.record(Duration::from_millis(2));
        let stats = waits.stats();
        assert_eq!((stats.waits, stats.wait_us.count(), stats.wait_us.sum), (2, 2, 2_003));
        assert_eq!(waits.time(|| 7), 7, "a timed wait gives its result back");
        assert_eq!(waits.stats().waits, 3, "and is counted");
    }
}
