//! Where a new fork starts: the fork point a client asks for, checked against the source's
//! published data (offset within the tail and a message boundary, sub-offset within the
//! data that follows, chain depth within [`FORK_DEPTH_MAX`]).
//!
//! It runs on the caller's task before the shards are asked anything, reading the source
//! like any reader; the source's shard then counts the fork only if the source is still the
//! same incarnation and not deleted.

use crate::offset::Offset;
use crate::op::{ForkPointError, OpError};
use crate::storage::chunk::ReadError;
use std::sync::Arc;

use crate::meta::{ForkOrigin, ForkRef};
use crate::stream::fork::{ForkBase, ForkSource, FORK_DEPTH_MAX};
use crate::stream::handle::StreamHandle;

/// Bytes read at a time while counting a JSON sub-offset's messages.
const COUNT_READ_BYTES: usize = 64 * 1024;

/// The fork point of a new fork of `source` at `offset` (its tail when `None`) plus
/// `sub_offset` units, checked against the source's published data.
pub(crate) fn resolve(
    source: &StreamHandle,
    offset: Option<Offset>,
    sub_offset: u64,
) -> Result<ForkBase, OpError> {
    let published = source.status().ok_or(OpError::NotFound)?;
    if published.deleted {
        return Err(OpError::SourceDeleted);
    }
    let depth = source.fork().map_or(0, |fork| fork.depth) + 1;
    if depth > FORK_DEPTH_MAX {
        return Err(OpError::ForkPoint(ForkPointError::TooDeep));
    }
    let tail = published.tail;
    let anchor = offset.unwrap_or(tail);
    if anchor.messages > tail.messages || anchor.bytes > tail.bytes {
        return Err(OpError::ForkPoint(ForkPointError::PastTail));
    }
    let origin = ForkOrigin { source: source.name().into(), offset: anchor, sub_offset };
    let reader: Arc<dyn ForkSource> = Arc::new(source.clone());
    let base = |until: Offset, partial_bytes: u64| ForkBase {
        source: Arc::clone(&reader),
        reference: ForkRef { origin: origin.clone(), source_id: source.id(), until, partial_bytes },
        depth,
    };
    // A read of nothing checks that the anchor is a boundary.
    source.read_below(anchor, tail, 0).map_err(|e| point_error(e, anchor))?;
    if sub_offset == 0 {
        return Ok(base(anchor, 0));
    }
    if source.config().content_type.is_json() {
        return Ok(base(json_messages_after(source, anchor, tail, sub_offset)?, 0));
    }
    let next = source.messages_below(anchor, tail, 1).map_err(|e| point_error(e, anchor))?;
    let message = next.first().ok_or(OpError::ForkPoint(ForkPointError::SubOffsetPastData))?;
    let length = message.stored.len() as u64;
    match sub_offset {
        n if n > length => Err(OpError::ForkPoint(ForkPointError::SubOffsetPastData)),
        n if n == length => Ok(base(message.next, 0)),
        n => Ok(base(anchor, n)),
    }
}

/// The offset `count` messages after `anchor`, which must all be before `tail`.
fn json_messages_after(
    source: &StreamHandle,
    anchor: Offset,
    tail: Offset,
    count: u64,
) -> Result<Offset, OpError> {
    let mut at = anchor;
    let mut left = count;
    while left > 0 {
        let messages = source.messages_below(at, tail, COUNT_READ_BYTES).map_err(|e| point_error(e, at))?;
        if messages.is_empty() {
            return Err(OpError::ForkPoint(ForkPointError::SubOffsetPastData));
        }
        let taken = (messages.len() as u64).min(left);
        at = messages[taken as usize - 1].next;
        left -= taken;
    }
    Ok(at)
}

fn point_error(error: ReadError, at: Offset) -> OpError {
    match error {
        ReadError::NotBoundary => OpError::ForkPoint(ForkPointError::NotBoundary),
        ReadError::Damaged => OpError::StreamDamaged { at },
        ReadError::Storage => OpError::Unavailable,
    }
}
