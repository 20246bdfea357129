//! A fixed-bucket histogram of power-of-two bounds, counted with relaxed atomics.
//!
//! Shards record into it once per batch (ops per batch, commit time); the server's metrics
//! endpoint reads snapshots. It never allocates and never locks, so it can sit on the
//! commit path. Bucket `i` counts values up to `2^i`; the last bucket counts everything
//! larger.

use std::sync::atomic::{AtomicU64, Ordering};

/// Number of buckets: bounds 1, 2, 4, … 2^22, then everything larger.
pub(crate) const BUCKETS: usize = 24;

#[derive(Default)]
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))] // (the `testing` front door exports it)
pub struct Histogram {
    counts: [AtomicU64; BUCKETS],
    sum: AtomicU64,
}

/// A copy of a histogram's counts at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistogramSnapshot {
    pub counts: [u64; BUCKETS],
    pub sum: u64,
}

impl Histogram {
    #[cfg_attr(not(feature = "testing"), allow(unreachable_pub))] // (the `testing` front door exports it)
    pub fn record(&self, value: u64) {
        self.counts[bucket_of(value)].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    #[cfg_attr(not(feature = "testing"), allow(unreachable_pub))] // (the `testing` front door exports it)
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut snapshot = HistogramSnapshot { sum: self.sum.load(Ordering::Relaxed), ..Default::default() };
        for (count, bucket) in snapshot.counts.iter_mut().zip(&self.counts) {
            *count = bucket.load(Ordering::Relaxed);
        }
        snapshot
    }
}

impl HistogramSnapshot {
    /// The inclusive upper bound of bucket `index`; `None` for the last (unbounded) one.
    pub fn bound(index: usize) -> Option<u64> {
        (index + 1 < BUCKETS).then(|| 1u64 << index)
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Adds `other`'s counts into this one (to sum shards).
    pub fn merge(&mut self, other: &HistogramSnapshot) {
        for (count, more) in self.counts.iter_mut().zip(&other.counts) {
            *count += more;
        }
        self.sum += other.sum;
    }
}

/// The smallest bucket whose bound holds `value`.
fn bucket_of(value: u64) -> usize {
    if value <= 1 {
        return 0;
    }
    let bits = (64 - (value - 1).leading_zeros()) as usize;
    bits.min(BUCKETS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_land_in_the_smallest_bucket_that_holds_them() {
        let cases = [(0, 0), (1, 0), (2, 1), (3, 2), (4, 2), (5, 3), (1024, 10), (1025, 11)];
        for (value, bucket) in cases {
            assert_eq!(bucket_of(value), bucket, "value {value}");
            let bound = HistogramSnapshot::bound(bucket).unwrap();
            assert!(value <= bound, "{value} fits under {bound}");
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert_eq!(HistogramSnapshot::bound(BUCKETS - 1), None);
    }

    #[test]
    fn snapshots_count_sum_and_merge() {
        let histogram = Histogram::default();
        for value in [1, 3, 3, 100] {
            histogram.record(value);
        }
        let mut snapshot = histogram.snapshot();
        assert_eq!(snapshot.count(), 4);
        assert_eq!(snapshot.sum, 107);
        assert_eq!(snapshot.counts[2], 2);
        snapshot.merge(&histogram.snapshot());
        assert_eq!(snapshot.count(), 8);
        assert_eq!(snapshot.sum, 214);
    }
}
