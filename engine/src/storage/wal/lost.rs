//! Parts of a shard's log that are gone, and the streams that had records there.
//!
//! A segment the checkpoint says holds live records, the checkpoint's own segment, or one
//! between it and the newest can be missing (deleted, or set aside because its header is
//! unreadable); a segment file can be shorter than its header says (cut). Each is a
//! [`Lost`] range of locations. A stream is damaged when its chain has a record in one:
//! chain locations only grow, so the record after the last one before the range is the
//! one to look at, and it is found with checked jumps that never read inside the range.
//! Such a stream is marked where its intact data ends.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::checkpoint::Checkpoint;
use super::segment::Segment;
use super::snapshots::Snapshots;
use super::source::{WalReader, WalSource};
use super::{location, split_location};
use crate::ids::{ChainIndex, Location};
use crate::meta::StreamSnapshot;
use crate::offset::Offset;
use crate::storage::chain::read::{RecordSource, SCAN_BYTES_MAX};
use crate::storage::chain::{find_index, find_last_tolerant, Blocked, NodeSource};
use crate::storage::replay::mark_damaged;
use crate::storage::Damage;

/// A range of locations `from..to` whose records are gone, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lost {
    pub from: Location,
    pub to: Location,
    pub what: String,
    /// The segment file, when it is there (cut short).
    pub file: Option<PathBuf>,
}

impl Lost {
    /// The damage report of this part, in the shard directory `dir`.
    pub fn damage(&self, dir: &Path) -> Damage {
        let (ordinal, position) = split_location(self.from);
        // Segment files are named by their first sequence number, which a missing one no
        // longer tells: the report names it by its ordinal.
        let file = self.file.clone().unwrap_or_else(|| dir.join(format!("(missing segment {ordinal})")));
        Damage::new(file, position, self.what.clone())
    }
}

/// The lost parts of a log of `segments` (in order) recovered from `checkpoint`.
pub(super) fn lost_parts(segments: &[Arc<Segment>], checkpoint: Option<&Checkpoint>) -> Vec<Lost> {
    let present: BTreeMap<u32, &Arc<Segment>> = segments.iter().map(|s| (s.ordinal(), s)).collect();
    let mut expected: BTreeMap<u32, &str> = BTreeMap::new();
    if let Some(checkpoint) = checkpoint {
        for (ordinal, live) in &checkpoint.ledger.live {
            if *live > 0 {
                expected.insert(*ordinal, "the checkpoint counts live records in it");
            }
        }
        expected.insert(checkpoint.resume_ordinal, "the checkpoint resumes in it");
    }
    let replayed_from = checkpoint.map(|c| c.resume_ordinal).or(present.keys().next().copied());
    if let (Some(from), Some(newest)) = (replayed_from, present.keys().next_back().copied()) {
        for ordinal in from..newest {
            expected.entry(ordinal).or_insert("later segments are there");
        }
    }
    let mut lost = Vec::new();
    for (ordinal, why) in expected {
        if !present.contains_key(&ordinal) {
            let what = format!("segment {ordinal} is missing ({why})");
            lost.push(Lost { from: location(ordinal, 0), to: location(ordinal + 1, 0), what, file: None });
        }
    }
    for segment in segments.iter().filter(|s| s.readable_len() < s.size()) {
        let what = format!(
            "segment {} is truncated: {} of its {} bytes are there",
            segment.ordinal(),
            segment.readable_len(),
            segment.size()
        );
        let (from, to) =
            (location(segment.ordinal(), segment.readable_len()), location(segment.ordinal() + 1, 0));
        lost.push(Lost { from, to, what, file: Some(segment.path.clone()) });
    }
    lost.sort_by_key(|part| part.from);
    lost
}

/// Marks every stream of `streams` with a record in a `lost` part; returns how many.
pub(super) fn mark_streams(source: &WalSource, streams: &mut Snapshots, lost: &[Lost]) -> usize {
    let source = &source.reader();
    let mut marked = 0;
    for stream in streams.values_mut() {
        let found = lost.iter().find_map(|part| intact_before(source, stream, part).map(|at| (at, part)));
        if let Some((at, part)) = found {
            marked += usize::from(stream.damage.is_none());
            mark_damaged(stream, at, format!("records of it were lost: {}", part.what));
        }
    }
    marked
}

/// Where the stream's intact data ends if it has a record in `part` (`None` if it has none).
fn intact_before(source: &WalReader<'_>, stream: &StreamSnapshot, part: &Lost) -> Option<Offset> {
    if stream.chain_tail < part.from {
        return None;
    }
    let Ok(tail) = source.node(stream.chain_tail) else {
        // The last record is in the lost part itself: the chain cannot be walked from it.
        return Some(last_end_before_by_scan(source, stream, part));
    };
    match find_last_tolerant(source, &tail, |node| node.location < part.from) {
        // The record after the last one before the part is in it unless it reads.
        Ok(before) => match find_index(source, &tail, before.n.next()) {
            Ok(after) if after.location >= part.to => None,
            _ => Some(before.end),
        },
        // Not even the first record is before the part: damaged if that one is in it.
        Err(Blocked { below: None }) => match find_index(source, &tail, ChainIndex::CREATE) {
            Ok(first) if first.location >= part.to => None,
            _ => Some(Offset::ZERO),
        },
        Err(Blocked { below: Some(below) }) => Some(below.end),
    }
}

/// Where the stream's last record before `part` ends, found by reading the log forward
/// from its first record (bounded by [`SCAN_BYTES_MAX`]; the start of the stream if that
/// does not find it).
fn last_end_before_by_scan(source: &WalReader<'_>, stream: &StreamSnapshot, part: &Lost) -> Offset {
    let mut scan_bytes = SCAN_BYTES_MAX;
    let Ok(Some(mut node)) = source.first_record(stream.id, part.from, &mut scan_bytes) else {
        return Offset::ZERO;
    };
    while let Ok(Some(next)) = source.successor(&node, part.from, &mut scan_bytes) {
        node = next;
    }
    node.end
}
