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
//! A source may take a stretch of plain records at once (`RecordSource::copy_run`: acid
//! checks and copies them straight from the segment's bytes); it stops before the first
//! record that is not, which the pass then takes as below.
//!
//! The forward pass follows the run as far as it goes: each next record must lie right
//! behind the one before ([`NodeSource::next_in_log`]) and name it as its predecessor
//! ([`follows`]). Records linked that way are the chain's own once they are tied to a
//! record the chain found: the run must end exactly at the read's last record, or, where
//! it breaks off before it, the caller walks the chain back from the last record to where
//! the run ended and takes the rest from there. Anything else — damage included — hands
//! the read back to the chain walk with nothing served.

use crate::offset::Offset;
use crate::storage::chain::{follows, Node, NodeSource};

use super::answer::Answer;
use super::{Bounds, LogRead, RecordSource};

/// What a forward pass made of a read.
pub(super) enum Pass {
    /// Every record up to the read's last, which the run ended on.
    Done(Answer),
    /// The records of the run up to the one it broke off after (not yet tied to the chain).
    Broke(Answer, Node),
    /// Not a run, or damage: nothing served.
    Declined,
}

/// Reads `bounds` from `from` forward, as far as its records form a run.
pub(super) fn read<S: RecordSource>(read: &LogRead<'_, S>, from: Offset, bounds: &Bounds) -> Pass {
    let Bounds { first, last, skip } = bounds;
    if !adjacent_after(read.source, first, last) {
        return Pass::Declined;
    }
    let mut answer = Answer::new(from, first, last);
    let mut node = first.clone();
    let mut skip = skip.bytes;
    loop {
        if answer.take(read, &node, skip).is_err() {
            return Pass::Declined;
        }
        skip = 0;
        if let Some(taken) = answer.take_run(read, &node, last) {
            node = taken;
        }
        if node.n == last.n {
            break;
        }
        match next_of_run(read.source, &node, last) {
            Some(next) => node = next,
            None => return Pass::Broke(answer, node),
        }
    }
    // The run ends at the chain's last record, with exactly the bytes its offsets promise.
    if node != *last || !answer.holds_bytes_since(from) {
        return Pass::Declined;
    }
    Pass::Done(answer)
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
