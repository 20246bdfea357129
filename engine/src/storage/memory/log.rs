//! One stream's bytes in memory mode: a list of blocks and the message boundaries in each.
//!
//! Appends go to the last block; a message never spans blocks, and block capacities double
//! from [`BLOCK_BYTES_MIN`] up to [`BLOCK_BYTES_MAX`] (a larger message gets a block of its own
//! size), so a small stream costs little and a large one has few blocks. Each block keeps the
//! end of every message in it (4 bytes per message), which is what lets a read check that an
//! offset is a message boundary and cut partial reads and SSE events at boundaries.
//!
//! The shard writes through [`MemLog::append`]; readers hold the stream's read lock while they
//! call [`MemLog::read`] or [`MemLog::read_messages`] with the published tail as their limit,
//! and leave with `Bytes` views that stay valid after the lock is gone.

use std::sync::Arc;

use super::block::Block;
use crate::offset::Offset;
use crate::payload::Payload;
use crate::storage::chunk::{Chunk, Message, ReadError};

/// Capacity of a stream's first block.
pub(super) const BLOCK_BYTES_MIN: usize = 64;
/// Capacity blocks grow to (larger single messages get a block of their own size).
pub(super) const BLOCK_BYTES_MAX: usize = 64 * 1024;

/// The blocks of one stream.
#[derive(Default)]
pub(crate) struct MemLog {
    blocks: Vec<MemBlock>,
    /// Where the log's first message starts (a fork's own messages follow its inherited ones).
    base: Offset,
}

struct MemBlock {
    data: Arc<Block>,
    /// Stream offset of the block's first byte and message.
    start: Offset,
    /// End (exclusive, relative to the block) of each message in the block.
    ends: Vec<u32>,
}

impl MemBlock {
    fn written(&self) -> usize {
        self.ends.last().map_or(0, |end| *end as usize)
    }

    fn message_start(&self, index: usize) -> usize {
        if index == 0 {
            0
        } else {
            self.ends[index - 1] as usize
        }
    }

    /// Messages of this block that lie before `until`.
    fn messages_before(&self, until: Offset) -> usize {
        let limit = until.messages.saturating_sub(self.start.messages);
        self.ends.len().min(limit as usize)
    }
}

/// A position inside the log: the next message to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Position {
    block: usize,
    message: usize,
}

impl MemLog {
    /// An empty log whose first message will start at `base`.
    pub(crate) fn starting_at(base: Offset) -> MemLog {
        MemLog { blocks: Vec::new(), base }
    }

    /// Where the log's first message starts.
    pub(crate) fn base(&self) -> Offset {
        self.base
    }

    /// Stores `payload` after `tail` (the writer's tail) and returns the new tail. The bytes
    /// stay invisible to readers until the caller publishes the new tail.
    pub(crate) fn append(&mut self, tail: Offset, payload: &Payload) -> Offset {
        let needed = payload.stored_len() as usize;
        if needed == 0 {
            return tail;
        }
        self.reserve(tail, needed);
        let block = self.blocks.last_mut().expect("reserve made a block");
        let mut at = block.written();
        payload.for_each_message(|text, separator| {
            // SAFETY: the shard owning this stream is the block's only writer, and `at` only
            // moves forward from the block's written length, which readers never pass.
            unsafe {
                block.data.write_at(at, text);
                block.data.write_at(at + text.len(), separator);
            }
            at += text.len() + separator.len();
            block.ends.push(at as u32);
        });
        debug_assert_eq!(at - (block.written() - needed), needed);
        tail.advance(payload.message_count(), needed as u64)
    }

    /// Makes sure the last block has room for `needed` more bytes.
    fn reserve(&mut self, tail: Offset, needed: usize) {
        let (room, previous_capacity) = match self.blocks.last() {
            Some(block) => (block.data.capacity() - block.written(), block.data.capacity()),
            None => (0, BLOCK_BYTES_MIN / 2),
        };
        if room >= needed {
            return;
        }
        let capacity = needed.max((previous_capacity * 2).min(BLOCK_BYTES_MAX));
        debug_assert!(self
            .blocks
            .last()
            .is_none_or(|b| b.start.advance(b.ends.len() as u64, b.written() as u64) == tail));
        self.blocks.push(MemBlock { data: Block::new(capacity), start: tail, ends: Vec::new() });
    }

    /// Reads whole messages from `from` up to `until` (a published tail), stopping before
    /// `bytes_max` is exceeded but always returning at least one message when there is one.
    pub(crate) fn read(&self, from: Offset, until: Offset, bytes_max: usize) -> Result<Chunk, ReadError> {
        let mut position = self.locate(from, until)?;
        let mut chunk = Chunk { next: from, messages: 0, slices: Vec::new(), copied: false };
        let mut budget = bytes_max;
        while let Some(block) = self.blocks.get(position.block) {
            let available = block.messages_before(until);
            if position.message >= available {
                if available < block.ends.len() {
                    break;
                }
                position = Position { block: position.block + 1, message: 0 };
                continue;
            }
            let start = block.message_start(position.message);
            let mut end_message =
                fitting_end(&block.ends, position.message, available, start.saturating_add(budget));
            if end_message == position.message {
                if chunk.messages > 0 {
                    break;
                }
                end_message = position.message + 1;
            }
            let end = block.ends[end_message - 1] as usize;
            // SAFETY: every message before `until` was published by the shard.
            chunk.slices.push(unsafe { block.data.slice(start, end) });
            let taken = (end_message - position.message) as u64;
            chunk.messages += taken;
            chunk.next = chunk.next.advance(taken, (end - start) as u64);
            budget = budget.saturating_sub(end - start);
            position.message = end_message;
            if budget == 0 {
                break;
            }
        }
        debug_assert!(chunk.next <= until, "reads never pass the published tail");
        Ok(chunk)
    }

    /// Reads messages one by one (for SSE), with the same limits as [`MemLog::read`].
    pub(crate) fn read_messages(
        &self,
        from: Offset,
        until: Offset,
        bytes_max: usize,
    ) -> Result<Vec<Message>, ReadError> {
        let mut position = self.locate(from, until)?;
        let mut messages = Vec::new();
        let mut next = from;
        let mut taken_bytes = 0usize;
        while let Some(block) = self.blocks.get(position.block) {
            let available = block.messages_before(until);
            if position.message >= available {
                if available < block.ends.len() {
                    break;
                }
                position = Position { block: position.block + 1, message: 0 };
                continue;
            }
            let start = block.message_start(position.message);
            let end = block.ends[position.message] as usize;
            if !messages.is_empty() && taken_bytes + (end - start) > bytes_max {
                break;
            }
            next = next.advance(1, (end - start) as u64);
            // SAFETY: every message before `until` was published by the shard.
            messages.push(Message { stored: unsafe { block.data.slice(start, end) }, next });
            taken_bytes += end - start;
            position.message += 1;
        }
        Ok(messages)
    }

    /// Finds the message that starts at `at`, which must be a boundary no later than `until`.
    fn locate(&self, at: Offset, until: Offset) -> Result<Position, ReadError> {
        if at.messages > until.messages || at.bytes > until.bytes {
            return Err(ReadError::NotBoundary);
        }
        if at.bytes < self.base.bytes || at.messages < self.base.messages {
            return Err(ReadError::NotBoundary);
        }
        if self.blocks.is_empty() {
            return if at == self.base {
                Ok(Position { block: 0, message: 0 })
            } else {
                Err(ReadError::NotBoundary)
            };
        }
        let index = self.blocks.partition_point(|b| b.start.bytes <= at.bytes).saturating_sub(1);
        let block = &self.blocks[index];
        let relative = at.bytes - block.start.bytes;
        let message = if relative == 0 {
            0
        } else {
            let found = block.ends.binary_search(&(relative.min(u64::from(u32::MAX)) as u32));
            found.map(|i| i + 1).map_err(|_| ReadError::NotBoundary)?
        };
        if block.start.messages + message as u64 != at.messages {
            return Err(ReadError::NotBoundary);
        }
        Ok(Position { block: index, message })
    }
}

/// The largest message count `end` in `first..=available` whose bytes end at or before
/// `limit` (returns `first` when even one message does not fit).
fn fitting_end(ends: &[u32], first: usize, available: usize, limit: usize) -> usize {
    let candidates = &ends[first..available];
    first + candidates.partition_point(|end| (*end as usize) <= limit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn raw(text: &str) -> Payload {
        Payload::raw(Bytes::copy_from_slice(text.as_bytes()))
    }

    fn text(chunk: &Chunk) -> String {
        chunk.slices.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect()
    }

    /// A log holding `messages`, and the offset after each.
    fn log_of(messages: &[&str]) -> (MemLog, Vec<Offset>) {
        let mut log = MemLog::default();
        let mut tail = Offset::ZERO;
        let mut offsets = vec![tail];
        for message in messages {
            tail = log.append(tail, &raw(message));
            offsets.push(tail);
        }
        (log, offsets)
    }

    #[test]
    fn reads_everything_or_from_any_boundary() {
        let (log, offsets) = log_of(&["a", "bb", "ccc"]);
        let tail = *offsets.last().unwrap();
        assert_eq!(tail, Offset { messages: 3, bytes: 6 });
        for (index, from) in offsets.iter().enumerate() {
            let chunk = log.read(*from, tail, 1 << 20).unwrap();
            assert_eq!(text(&chunk), ["a", "bb", "ccc"][index..].concat());
            assert_eq!(chunk.next, tail);
        }
    }

    #[test]
    fn rejects_offsets_that_are_not_boundaries() {
        let (log, offsets) = log_of(&["a", "bb", "ccc"]);
        let tail = *offsets.last().unwrap();
        for bad in [
            Offset { messages: 1, bytes: 2 },
            Offset { messages: 2, bytes: 1 },
            Offset { messages: 3, bytes: 7 },
            Offset { messages: 4, bytes: 6 },
            Offset { messages: 0, bytes: 1 },
        ] {
            assert_eq!(log.read(bad, tail, 100).err(), Some(ReadError::NotBoundary), "{bad:?}");
        }
        let empty = MemLog::default();
        assert!(empty.read(Offset::ZERO, Offset::ZERO, 10).unwrap().is_empty());
        assert_eq!(
            empty.read(Offset { messages: 1, bytes: 1 }, Offset::ZERO, 10).err(),
            Some(ReadError::NotBoundary)
        );
    }

    #[test]
    fn unpublished_messages_stay_invisible() {
        let (mut log, offsets) = log_of(&["seen"]);
        let published = offsets[1];
        let unpublished = log.append(published, &raw("hidden"));
        assert_eq!(text(&log.read(Offset::ZERO, published, 100).unwrap()), "seen");
        assert!(log.read(published, published, 100).unwrap().is_empty());
        assert_eq!(log.read(unpublished, published, 100).err(), Some(ReadError::NotBoundary));
        assert_eq!(log.read_messages(Offset::ZERO, published, 100).unwrap().len(), 1);
    }

    #[test]
    fn partial_reads_stop_at_boundaries_and_make_progress() {
        let (log, offsets) = log_of(&["aaaa", "bbbb", "cccc"]);
        let tail = *offsets.last().unwrap();
        let chunk = log.read(Offset::ZERO, tail, 9).unwrap();
        assert_eq!((text(&chunk), chunk.next), ("aaaabbbb".to_string(), offsets[2]));
        let chunk = log.read(Offset::ZERO, tail, 1).unwrap();
        assert_eq!((text(&chunk), chunk.next), ("aaaa".to_string(), offsets[1]), "one message at least");
    }

    #[test]
    fn blocks_grow_and_large_messages_get_their_own() {
        let mut log = MemLog::default();
        let mut tail = Offset::ZERO;
        let mut expected = String::new();
        for index in 0..2000 {
            let message = format!("message-{index};");
            tail = log.append(tail, &raw(&message));
            expected.push_str(&message);
        }
        let big = "x".repeat(3 * BLOCK_BYTES_MAX);
        tail = log.append(tail, &raw(&big));
        expected.push_str(&big);
        assert!(log.blocks.len() > 3 && log.blocks.len() < 20, "{} blocks", log.blocks.len());
        let mut from = Offset::ZERO;
        let mut collected = String::new();
        while from < tail {
            let chunk = log.read(from, tail, 10_000).unwrap();
            assert!(chunk.messages > 0);
            collected.push_str(&text(&chunk));
            from = chunk.next;
        }
        assert_eq!(collected, expected);
        let singles = log.read_messages(Offset::ZERO, tail, usize::MAX).unwrap();
        assert_eq!(singles.len(), 2001);
        assert_eq!(&singles[3].stored[..], b"message-3;");
        assert_eq!(singles.last().unwrap().next, tail);
    }

    #[test]
    fn json_messages_are_individually_addressable() {
        let mut log = MemLog::default();
        let payload = Payload::json(Bytes::from_static(b"[1, {\"a\":[2]}, \"x\"]"), false).unwrap();
        let tail = log.append(Offset::ZERO, &payload);
        assert_eq!(tail, Offset { messages: 3, bytes: 16 });
        let messages = log.read_messages(Offset::ZERO, tail, 100).unwrap();
        let texts: Vec<_> = messages.iter().map(|m| String::from_utf8(m.stored.to_vec()).unwrap()).collect();
        assert_eq!(texts, ["1,", "{\"a\":[2]},", "\"x\","]);
        let middle = log.read(messages[0].next, tail, 100).unwrap();
        assert_eq!(text(&middle), "{\"a\":[2]},\"x\",");
    }
}
