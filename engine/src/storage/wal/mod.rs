//! acid mode: one write-ahead log per shard, which is also where stream bytes live.
//!
//! - `segment`: fixed-size, preallocated, mapped segment files.
//! - `writer`: the shard's commit step — one vectored write per batch and the device flush
//!   that covers it (`storage::flush`), sealing and rotating segments, chaining each
//!   stream's records.
//! - `source`: reading records and stream data straight from the mapped segments (`run`:
//!   a forward read's run of plain records, checked and copied in one pass).
//! - `recovery`: rebuilding a shard from its checkpoint and the records after it (`replay`
//!   checks and applies each record, into `snapshots`: the streams, side by side).
//! - `writer::compact`: moving live streams out of mostly-dead segments.
//! - `lost`: parts of the log that are gone, and the streams that had records there.
//! - `salvage`: which ordinal a segment with a damaged header had, so its records are read.
//! - `checkpoint`: a shard's state at an LSN.
//! - `ledger`: live bytes per segment, for removing dead ones.
//! - `housekeeper`: a background thread that prepares segments, writes checkpoints,
//!   reclaims deleted streams' space and removes dead segments.
//! - `zero_waits`: how long shards waited for zeros (the zero-fill ahead of the records).
//!
//! A record's location is `ordinal << 32 | position` within its segment. Readers' TTL
//! renewals are saved next to the segments, in [`RENEWALS_FILE`], keyed by stream id.

pub(crate) mod checkpoint;
pub(crate) mod housekeeper;
pub(crate) mod ledger;
pub(crate) mod lost;
pub(crate) mod recovery;
mod replay;
mod run;
mod salvage;
pub(crate) mod segment;
mod snapshots;
pub(crate) mod source;
pub(crate) mod writer;
pub(crate) mod zero_waits;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use crate::ids::{Location, Lsn};
use crate::storage::flush::FlushGroup;
use crate::storage::root_watch::RootWatch;
use crate::storage::vfs::Vfs;
use segment::Segment;
use zero_waits::ZeroWaits;

/// The file in a shard's directory that holds its readers' TTL renewals.
pub(crate) const RENEWALS_FILE: &str = "renewals.bin";

/// Where one shard's log lives and how its segments are sized.
#[derive(Clone)]
pub(crate) struct ShardFiles {
    pub vfs: Arc<dyn Vfs>,
    pub dir: PathBuf,
    pub shard: u32,
    pub segment_bytes: u64,
    /// How a commit's write becomes durable: its own fdatasync or a shared device flush.
    pub flush: Arc<FlushGroup>,
    /// Whether the data directory is still there (no writes once it is not).
    pub root: Arc<RootWatch>,
    /// Where waits for zeros are counted (shared by the engine's shards).
    pub zero_waits: Arc<ZeroWaits>,
}

/// Where a shard's log continues.
pub(crate) struct WalPosition {
    pub active: Arc<Segment>,
    pub position: u64,
    pub next_lsn: Lsn,
    /// The active segment is already sealed (recovery could not start a new one: the disk
    /// is full): nothing is written before a new segment is prepared.
    pub sealed: bool,
    /// Where the active segment's zero-filled (durably written) prefix ends: records up to
    /// there need no new block.
    pub zeroed_to: u64,
}

/// The location of the record at `position` in segment `ordinal`.
pub(crate) fn location(ordinal: u32, position: u64) -> Location {
    assert!(position < 1 << 32, "segments are smaller than 4 GiB");
    Location::from_raw(u64::from(ordinal) << 32 | position)
}

/// The segment ordinal and position of a location.
pub(crate) fn split_location(location: Location) -> (u32, u64) {
    let raw = location.raw();
    ((raw >> 32) as u32, raw & 0xffff_ffff)
}

/// The segments of one shard that readers can reach, by ordinal.
#[derive(Default)]
pub struct SegmentTable {
    segments: RwLock<BTreeMap<u32, Arc<Segment>>>,
}

impl SegmentTable {
    pub fn get(&self, ordinal: u32) -> Option<Arc<Segment>> {
        self.segments.read().expect("segment table lock").get(&ordinal).cloned()
    }

    pub fn insert(&self, segment: Arc<Segment>) {
        self.segments.write().expect("segment table lock").insert(segment.ordinal(), segment);
    }

    pub fn remove(&self, ordinal: u32) -> Option<Arc<Segment>> {
        self.segments.write().expect("segment table lock").remove(&ordinal)
    }

    /// Every segment, oldest first.
    pub fn all(&self) -> Vec<Arc<Segment>> {
        self.segments.read().expect("segment table lock").values().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.segments.read().expect("segment table lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_split_back() {
        assert_eq!(split_location(location(7, 4096)), (7, 4096));
        assert_eq!(split_location(location(u32::MAX, (1 << 32) - 1)), (u32::MAX, (1 << 32) - 1));
    }
}
