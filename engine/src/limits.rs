//! Stored-byte limits (per stream and across all streams), and the bound on cache maps.
//!
//! Every shard charges the bytes it stores to one shared [`ByteBudget`] and gives them back
//! when a stream is deleted or expires. Charging is one atomic compare-and-swap loop, not a
//! lock, and it happens on the shard thread before anything is written, so a refused append
//! stores nothing.

use std::sync::atomic::{AtomicU64, Ordering};

/// The spec's default cap on bytes stored across all streams.
pub const TOTAL_BYTES_MAX_DEFAULT: u64 = 104_857_600;
/// The spec's default cap on bytes stored in one stream.
pub const STREAM_BYTES_MAX_DEFAULT: u64 = 10_485_760;

/// The byte limits of an engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub total_bytes_max: u64,
    pub stream_bytes_max: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { total_bytes_max: TOTAL_BYTES_MAX_DEFAULT, stream_bytes_max: STREAM_BYTES_MAX_DEFAULT }
    }
}

/// Bytes stored across all streams, charged against a maximum.
#[derive(Debug)]
pub struct ByteBudget {
    used: AtomicU64,
    max: u64,
}

impl ByteBudget {
    pub fn new(max: u64) -> ByteBudget {
        ByteBudget { used: AtomicU64::new(0), max }
    }

    /// Charges `bytes`; refuses (charging nothing) when the total would pass the maximum.
    pub fn try_charge(&self, bytes: u64) -> bool {
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let Some(next) = used.checked_add(bytes).filter(|next| *next <= self.max) else {
                return false;
            };
            match self.used.compare_exchange_weak(used, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(actual) => used = actual,
            }
        }
    }

    /// Charges `bytes` whatever the maximum (recovery of data already stored).
    pub fn charge_unchecked(&self, bytes: u64) {
        self.used.fetch_add(bytes, Ordering::AcqRel);
    }

    /// Gives back bytes of deleted or expired streams.
    pub fn release(&self, bytes: u64) {
        let before = self.used.fetch_sub(bytes, Ordering::AcqRel);
        debug_assert!(before >= bytes, "released more bytes than were charged");
    }

    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    pub fn max(&self) -> u64 {
        self.max
    }
}

/// Keeps a cache map within `max` entries: past it, drops every other entry (in no
/// particular order). Cheap, bounded, and good enough for caches that rebuild on a miss.
pub fn halve_when_over<K, V>(map: &mut std::collections::HashMap<K, V>, max: usize) {
    if map.len() > max {
        let mut keep = false;
        map.retain(|_, _| {
            keep = !keep;
            keep
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_up_to_the_maximum_and_no_further() {
        let budget = ByteBudget::new(100);
        assert!(budget.try_charge(60));
        assert!(!budget.try_charge(41), "would pass the maximum");
        assert_eq!(budget.used(), 60, "a refused charge takes nothing");
        assert!(budget.try_charge(40));
        assert!(!budget.try_charge(1));
        budget.release(50);
        assert!(budget.try_charge(50));
        assert!(!budget.try_charge(u64::MAX), "overflow is refused, not wrapped");
    }

    #[test]
    fn concurrent_charges_never_exceed_the_maximum() {
        let budget = std::sync::Arc::new(ByteBudget::new(10_000));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let budget = budget.clone();
                std::thread::spawn(move || (0..10_000).filter(|_| budget.try_charge(1)).count())
            })
            .collect();
        let granted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(granted, 10_000);
        assert_eq!(budget.used(), 10_000);
    }
}
