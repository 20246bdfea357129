//! Segments whose header is damaged, read by their records' own checks.
//!
//! A segment's 64-byte header names its shard, ordinal and first sequence number. When it
//! fails its checks (a flipped bit, a bad first sector), the records after it may be whole,
//! and each carries its own checksum and sequence number: setting the whole file aside
//! would lose every other stream's records in it for a few damaged bytes. The first
//! sequence number is in the file's name; the ordinal — which every record location
//! holds, so it must be exact — is inferred from the segments around it and the
//! checkpoint's ledger ([`infer_ordinal`]). Where it cannot be told, the file is set aside
//! as before. [`infer_ordinal`] is pure; [`open_headerless`] opens the files it places
//! (for `recovery::open_segments`).

use std::collections::BTreeMap;
use std::io;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::Arc;

use super::segment::{Segment, SegmentHeader};
use crate::ids::Lsn;
use crate::storage::vfs::Vfs;

/// Where a readable segment stands: its ordinal and first sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Placed {
    pub ordinal: u32,
    pub first_lsn: Lsn,
}

/// The ordinal of a segment whose header is damaged and whose name says it starts at
/// `first_lsn`, among `placed` (the readable ones, by ordinal), or `None` when it cannot
/// be told for certain. `known`: the ordinals the checkpoint's ledger counts live bytes in
/// (a segment with none is one a shard may already have removed).
pub(super) fn infer_ordinal(first_lsn: Lsn, placed: &BTreeMap<u32, Placed>, known: &[u32]) -> Option<u32> {
    let before = placed.values().filter(|p| p.first_lsn < first_lsn).map(|p| p.ordinal).max();
    let after = placed.values().filter(|p| p.first_lsn > first_lsn).map(|p| p.ordinal).min();
    let room = open_range(before, after)?;
    let mut candidates = known.iter().copied().filter(|o| room.contains(o) && !placed.contains_key(o));
    if let (Some(only), None) = (candidates.next(), candidates.next()) {
        return Some(only);
    }
    // Ordinals grow by one per rotation: the one between two segments one apart, or the
    // one after the last (the segment a shard moved on to). Nothing else is certain.
    match (before, after) {
        (Some(before), Some(after)) if after - before == 2 => Some(before + 1),
        (Some(before), None) => before.checked_add(1),
        _ => None,
    }
}

/// The ordinals strictly between `before` and `after` (a shard's first segment is 0), if
/// any.
fn open_range(before: Option<u32>, after: Option<u32>) -> Option<RangeInclusive<u32>> {
    let low = before.map_or(Some(0), |b| b.checked_add(1))?;
    let high = after.map_or(Some(u32::MAX), |a| a.checked_sub(1))?;
    (low <= high).then_some(low..=high)
}

/// Opens each segment whose header failed its checks under the ordinal [`infer_ordinal`]
/// gives (in sequence order, so one salvaged places the next); one it cannot place, or
/// holding no more than a header, is a stray.
pub(super) fn open_headerless(
    vfs: &dyn Vfs,
    headerless: Vec<(Lsn, PathBuf, io::Error)>,
    shard: u32,
    known: &[u32],
    by_ordinal: &mut BTreeMap<u32, Arc<Segment>>,
    strays: &mut Vec<(PathBuf, String)>,
) -> io::Result<Vec<(PathBuf, String)>> {
    let mut salvaged = Vec::new();
    for (first_lsn, path, error) in headerless {
        let placed = by_ordinal
            .values()
            .map(|s| (s.ordinal(), Placed { ordinal: s.ordinal(), first_lsn: s.header.first_lsn }))
            .collect();
        let Some(ordinal) = infer_ordinal(first_lsn, &placed, known) else {
            strays.push((path, format!("not a readable segment: {error}")));
            continue;
        };
        let header_of = |size| SegmentHeader { shard, ordinal, first_lsn, size, created_ms: 0 };
        let Some(segment) = Segment::open_salvaged(vfs, &path, header_of)? else {
            strays.push((path, format!("not a readable segment: {error}")));
            continue;
        };
        let why = format!(
            "segment header damaged ({error}); its records are read by their own checks as segment {ordinal}"
        );
        salvaged.push((path, why));
        by_ordinal.insert(ordinal, Arc::new(segment));
    }
    Ok(salvaged)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed(pairs: &[(u32, u64)]) -> BTreeMap<u32, Placed> {
        pairs
            .iter()
            .map(|&(ordinal, lsn)| (ordinal, Placed { ordinal, first_lsn: Lsn::from_raw(lsn) }))
            .collect()
    }

    #[test]
    fn between_neighbours_one_apart_it_is_the_one_between() {
        let around = placed(&[(3, 100), (5, 300)]);
        assert_eq!(infer_ordinal(Lsn::from_raw(200), &around, &[]), Some(4));
        assert_eq!(infer_ordinal(Lsn::from_raw(200), &around, &[3, 4, 5]), Some(4));
    }

    #[test]
    fn the_last_one_follows_the_one_before() {
        assert_eq!(infer_ordinal(Lsn::from_raw(400), &placed(&[(3, 100), (5, 300)]), &[]), Some(6));
    }

    #[test]
    fn across_a_gap_only_the_ledger_can_tell() {
        let around = placed(&[(3, 100), (9, 300)]);
        assert_eq!(infer_ordinal(Lsn::from_raw(200), &around, &[]), None, "4 to 8: unknown");
        assert_eq!(infer_ordinal(Lsn::from_raw(200), &around, &[3, 7, 9]), Some(7));
        assert_eq!(infer_ordinal(Lsn::from_raw(200), &around, &[6, 7]), None, "two candidates");
    }

    #[test]
    fn alone_or_first_it_needs_the_ledger() {
        assert_eq!(infer_ordinal(Lsn::from_raw(1), &placed(&[]), &[]), None);
        assert_eq!(infer_ordinal(Lsn::from_raw(1), &placed(&[]), &[2]), Some(2));
        assert_eq!(infer_ordinal(Lsn::from_raw(1), &placed(&[(5, 300)]), &[]), None);
        assert_eq!(infer_ordinal(Lsn::from_raw(1), &placed(&[(1, 300)]), &[0, 1]), Some(0), "the first is 0");
        assert_eq!(infer_ordinal(Lsn::from_raw(1), &placed(&[(0, 300)]), &[0]), None, "no room before 0");
    }
}
