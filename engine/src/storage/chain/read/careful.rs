//! Reading a stream whose chain is damaged: around the damage, then forward.
//!
//! The chain is walked backwards only, so one unreadable record can hide every record that
//! only it leads to. When the checked walk of [`super::LogRead::chained_bounds`] and `collected` fails, this
//! finds the record holding the start offset with [`find_last_tolerant`], which steps
//! around unreadable records; where even that is blocked, it starts from the nearest record
//! it could reach (or the stream's first record, where the log knows it) and reads forward
//! with [`RecordSource::successor`]. The records of the read are then collected forward the
//! same way, up to the budget, the tail, or the first record that is not intact. Forward
//! reading in acid passes over other streams' records, so it is bounded by
//! [`super::SCAN_BYTES_MAX`] per read.

use crate::offset::Offset;
use crate::storage::chain::{find_last_tolerant, Blocked, Node};
use crate::storage::chunk::ReadError;

use super::{LogRead, RecordSource, Span, RECORDS_PER_READ_MAX, SCAN_BYTES_MAX};

/// The records to read from `from` (which is before the published tail).
pub(super) fn span<S: RecordSource>(
    read: &LogRead<'_, S>,
    from: Offset,
    bytes_max: usize,
) -> Result<Span, ReadError> {
    let mut scan_bytes = SCAN_BYTES_MAX;
    let first = locate(read, from, &mut scan_bytes)?;
    let skip = read.position_in(&first, from)?;
    let budget_end = read.budget_end(from, bytes_max);
    let mut nodes = vec![first];
    while (nodes.len() as u64) < RECORDS_PER_READ_MAX {
        let last = nodes.last().expect("the first record is there");
        if last.end >= read.until {
            break;
        }
        let Ok(Some(next)) = read.source.successor(last, read.tail_location, &mut scan_bytes) else {
            break;
        };
        if next.start.bytes >= budget_end || next.end.bytes > from.bytes.saturating_add(bytes_max as u64) {
            break;
        }
        nodes.push(next);
    }
    Ok(Span { nodes, skip })
}

/// The last record that starts at or before `from`, found around damage.
fn locate<S: RecordSource>(
    read: &LogRead<'_, S>,
    from: Offset,
    scan_bytes: &mut u64,
) -> Result<Node, ReadError> {
    let holds = |node: &Node| node.start.bytes <= from.bytes;
    let below = match read.tail() {
        Ok(tail) => match find_last_tolerant(read.source, &tail, holds) {
            Ok(node) => return Ok(node),
            Err(Blocked { below }) => below,
        },
        Err(_) => None,
    };
    let mut node = match below {
        Some(node) => node,
        None => first_record(read, scan_bytes)?,
    };
    loop {
        if node.end.bytes > from.bytes {
            return Ok(node);
        }
        match read.source.successor(&node, read.tail_location, scan_bytes)? {
            Some(next) if holds(&next) => node = next,
            Some(_) => return Ok(node),
            None => return Err(ReadError::Damaged),
        }
    }
}

/// The stream's first record, found without its chain.
fn first_record<S: RecordSource>(read: &LogRead<'_, S>, scan_bytes: &mut u64) -> Result<Node, ReadError> {
    let first =
        read.source.first_record(read.stream, read.tail_location, scan_bytes)?.ok_or(ReadError::Damaged)?;
    if first.stream != read.stream || !first.n.is_create() || first.start != read.start {
        return Err(ReadError::Damaged);
    }
    Ok(first)
}
