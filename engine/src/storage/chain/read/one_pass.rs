//! Reading a run of a stream's records in one pass over the log, in the log's order.
//!
//! A read otherwise walks its records back from the last one (one dependent header read
//! each, every header on a page of its own for messages of a few KiB) and then reads their
//! data forward: the log is touched twice, the first time out of order. Where the records
//! lie one right after another in the log — a stream written in a run, or moved in one
//! piece — this reads each record's data (checked against its crc, copied into the answer)
//! and then the header right behind it, so the log is read once, front to back, and each
//! header arrives with the data before it.
//!
//! It serves only the plain case and leaves the rest to the chain walk: every record small
//! enough to copy ([`super::COPY_BELOW_BYTES`]), the copy budget granted, none cut by the
//! read's end, and each next record found right behind the one before
//! ([`NodeSource::next_in_log`]) and naming it as its predecessor ([`follows`]). The run
//! must end exactly at the last record the chain found, so the records served are the
//! chain's own; anything else — damage included — falls back with nothing served.

use bytes::BytesMut;

use crate::offset::Offset;
use crate::storage::chain::{follows, Node, NodeSource};
use crate::storage::chunk::Chunk;

use super::copies::Copies;
use super::{Bounds, LogRead, RecordSource, COPY_BELOW_BYTES};

/// The answer of a read from `from` over `bounds` in one forward pass, or `None` where
/// the read is not the plain case (the caller walks the chain instead).
pub(super) fn chunk<S: RecordSource>(read: &LogRead<'_, S>, from: Offset, bounds: &Bounds) -> Option<Chunk> {
    let Bounds { first, last, skip_bytes, .. } = bounds;
    if last.end > read.until || !adjacent_after(read.source, first, last) {
        return None;
    }
    let spanned = last.end.bytes - first.start.bytes;
    let mut copies = Copies::new(spanned);
    if !copies.allowed() {
        return None;
    }
    let mut copied = BytesMut::with_capacity(spanned as usize);
    let mut node = first.clone();
    let mut skip = *skip_bytes;
    loop {
        if node.end.bytes - node.start.bytes >= COPY_BELOW_BYTES {
            return None;
        }
        if node.start != node.end {
            read.source.copy_data(&node, skip, &mut copied).ok()?;
        }
        skip = 0;
        if node.n == last.n {
            break;
        }
        node = next_of_run(read.source, &node, last)?;
    }
    // The run ends at the chain's last record, with exactly the bytes its offsets promise.
    if node != *last || copied.len() as u64 != last.end.bytes - from.bytes {
        return None;
    }
    let next = last.end;
    debug_assert!(next > from, "a read that returns covers at least one record");
    let slices = if copied.is_empty() { Vec::new() } else { vec![copies.seal(copied.freeze())] };
    Some(Chunk { next, messages: next.messages - from.messages, slices })
}

/// Whether the log can tell, right after `first`, the record that follows it in its stream
/// (asked before any data is copied, so a log that cannot costs nothing).
fn adjacent_after<S: NodeSource>(source: &S, first: &Node, last: &Node) -> bool {
    first.n == last.n || next_of_run(source, first, last).is_some()
}

/// The record right behind `node` in the log, if it is the next one of its stream (and not
/// past `last`).
fn next_of_run<S: NodeSource>(source: &S, node: &Node, last: &Node) -> Option<Node> {
    source.next_in_log(node, last.location).filter(|next| follows(node, next) && next.n <= last.n)
}
