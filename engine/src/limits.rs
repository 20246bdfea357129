//! Limits on what clients can make the server hold, and the bound on cache maps.
//!
//! Every shard charges what a stream costs to one shared [`ByteBudget`] and gives it back
//! when the stream is deleted or expires: the stream itself ([`STREAM_CHARGE_BYTES`] plus its
//! name and content type), each append ([`APPEND_CHARGE_BYTES`] plus its data, producer id
//! and `Stream-Seq`, which every disk mode writes into the append's record), and each
//! producer it tracks ([`crate::producer::PRODUCER_CHARGE_BYTES`] plus its id). So the
//! memory and log bytes a client can make the server hold stay within a small factor of
//! `DS_LIMITS__MAX_MEMORY_BYTES`, however small its appends. A restart charges each stream
//! again exactly (its snapshot keeps the tag bytes its appends carried); only producers
//! forgotten meanwhile are not. The number of streams has its own cap. Charging is one atomic compare-and-swap loop, not a lock, and it happens on the
//! shard thread before anything is written, so a refused op stores nothing.

use std::sync::atomic::{AtomicU64, Ordering};

/// The spec's default cap on bytes stored across all streams.
pub(crate) const TOTAL_BYTES_MAX_DEFAULT: u64 = 104_857_600;
/// The spec's default cap on bytes stored in one stream.
pub const STREAM_BYTES_MAX_DEFAULT: u64 = 10_485_760;
/// Default cap on the data of one append (or a create's initial data): a request body and
/// a log record hold at most this (lower when the stream limit is lower).
pub const APPEND_BYTES_MAX_DEFAULT: u64 = 10_485_760;
/// Longest accepted `Stream-Seq` value, in bytes.
pub const STREAM_SEQ_BYTES_MAX: usize = 256;
/// Default cap on the number of streams.
pub(crate) const STREAMS_MAX_DEFAULT: u64 = 1_000_000;
/// What a stream costs besides its name, its content type and its appends: its state in
/// memory and in checkpoints, and its create record.
pub(crate) const STREAM_CHARGE_BYTES: u64 = 512;
/// What an append costs besides its data, its producer id and its `Stream-Seq`: its record's
/// header and chain in the disk modes, its message boundaries in memory.
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))] // (the `testing` front door exports it)
pub const APPEND_CHARGE_BYTES: u64 = 64;

/// The limits of an engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// What all streams may cost together, in bytes (their data and the charges above).
    pub total_bytes_max: u64,
    /// Message bytes one stream may hold (any size: a stream spans records and segments).
    pub stream_bytes_max: u64,
    /// Message bytes one append (or a create's initial data) may carry: the largest record.
    pub append_bytes_max: u64,
    /// Streams that may exist at once.
    pub streams_max: u64,
}

impl Limits {
    /// The most data one record holds: an append passing either limit is refused.
    pub fn record_bytes_max(&self) -> u64 {
        self.append_bytes_max.min(self.stream_bytes_max)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            total_bytes_max: TOTAL_BYTES_MAX_DEFAULT,
            stream_bytes_max: STREAM_BYTES_MAX_DEFAULT,
            append_bytes_max: APPEND_BYTES_MAX_DEFAULT,
            streams_max: STREAMS_MAX_DEFAULT,
        }
    }
}

/// The bytes an append's producer tag (of id `producer_id`) and `Stream-Seq` add to its
/// record; charged like data, and summed per stream so recovery charges them again.
pub(crate) fn tag_bytes(producer_id: Option<&str>, stream_seq: Option<&str>) -> u64 {
    let producer = producer_id.map_or(0, |id| 2 + id.len() as u64 + 16);
    producer + stream_seq.map_or(0, |seq| 2 + seq.len() as u64)
}

/// What a stream called `name` of `content_type` costs before any append.
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))] // (the `testing` front door exports it)
pub fn stream_charge(name: &str, content_type: &str) -> u64 {
    STREAM_CHARGE_BYTES + name.len() as u64 + content_type.len() as u64
}

/// What streams cost across all shards, charged against a maximum, and how many there are.
#[derive(Debug)]
pub(crate) struct ByteBudget {
    used: AtomicU64,
    max: u64,
    /// Message bytes stored (a part of `used`).
    stored: AtomicU64,
    streams: AtomicU64,
    streams_max: u64,
}

impl ByteBudget {
    pub(crate) const fn new(max: u64, streams_max: u64) -> ByteBudget {
        ByteBudget {
            used: AtomicU64::new(0),
            max,
            stored: AtomicU64::new(0),
            streams: AtomicU64::new(0),
            streams_max,
        }
    }

    /// Counts one more stream; refuses when there are as many as may be.
    pub(crate) fn try_add_stream(&self) -> bool {
        self.streams
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |count| {
                (count < self.streams_max).then_some(count + 1)
            })
            .is_ok()
    }

    /// Counts a stream that exists whatever the cap (recovered).
    pub(crate) fn add_stream_unchecked(&self) {
        self.streams.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn remove_stream(&self) {
        let before = self.streams.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "removed more streams than were counted");
    }

    /// Notes message bytes stored (`true`) or dropped (`false`); they are charged apart.
    pub(crate) fn note_stored(&self, bytes: u64, stored: bool) {
        match stored {
            true => self.stored.fetch_add(bytes, Ordering::Relaxed),
            false => self.stored.fetch_sub(bytes, Ordering::Relaxed),
        };
    }

    /// Message bytes stored across all streams.
    pub(crate) fn stored(&self) -> u64 {
        self.stored.load(Ordering::Relaxed)
    }

    /// Charges `bytes`; refuses (charging nothing) when the total would pass the maximum.
    pub(crate) fn try_charge(&self, bytes: u64) -> bool {
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
    pub(crate) fn charge_unchecked(&self, bytes: u64) {
        self.used.fetch_add(bytes, Ordering::AcqRel);
    }

    /// Gives back bytes of deleted or expired streams.
    pub(crate) fn release(&self, bytes: u64) {
        let before = self.used.fetch_sub(bytes, Ordering::AcqRel);
        debug_assert!(before >= bytes, "released more bytes than were charged");
    }

    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }
}

/// Keeps a cache map within `max` entries: past it, drops every other entry (in no
/// particular order). Cheap, bounded, and good enough for caches that rebuild on a miss.
pub(crate) fn halve_when_over<K, V>(map: &mut std::collections::HashMap<K, V>, max: usize) {
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
        let budget = ByteBudget::new(100, u64::MAX);
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
        let budget = std::sync::Arc::new(ByteBudget::new(10_000, u64::MAX));
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
