//! An append-only byte block: one writer fills it, readers share its written prefix.
//!
//! Memory mode keeps a stream's bytes in blocks. The shard that owns the stream is the only
//! writer; it writes each byte once, below the block's capacity and above everything it wrote
//! before, and publishes the new length to readers through the stream's lock. Readers only
//! look at published bytes, which never change again, so they can be handed to the socket as
//! `Bytes` without copying ([`Block::slice`]). This is the engine's only `unsafe` code; the
//! contract of the two `unsafe fn`s is what keeps it sound.

use std::ptr::NonNull;
use std::sync::Arc;

use bytes::Bytes;

/// A fixed-capacity buffer whose bytes are written once and then only read.
pub(super) struct Block {
    start: NonNull<u8>,
    capacity: usize,
}

// SAFETY: the block owns its allocation. Writes happen only through `write_at`, whose contract
// restricts them to ranges no reader can see yet; published ranges are immutable, so shared
// references to them may cross threads.
unsafe impl Send for Block {}
// SAFETY: see `Send`; concurrent readers only read published, immutable ranges.
unsafe impl Sync for Block {}

impl Block {
    /// Allocates a block of exactly `capacity` bytes (at least one).
    pub(super) fn new(capacity: usize) -> Arc<Block> {
        assert!(capacity > 0, "blocks are never empty");
        let mut storage = std::mem::ManuallyDrop::new(Vec::<u8>::with_capacity(capacity));
        let capacity = storage.capacity();
        let start = NonNull::new(storage.as_mut_ptr()).expect("allocation is not null");
        Arc::new(Block { start, capacity })
    }

    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Copies `source` into the block at `at`.
    ///
    /// # Safety
    /// The caller is the block's only writer, `at + source.len()` is within the capacity, and
    /// no byte of `at..at + source.len()` has been written before or published to any reader.
    pub(super) unsafe fn write_at(&self, at: usize, source: &[u8]) {
        assert!(at + source.len() <= self.capacity, "write past the end of a block");
        // SAFETY: in bounds (checked above); the caller guarantees nobody reads or writes this
        // range concurrently, and `source` cannot overlap a range that was never handed out.
        unsafe {
            std::ptr::copy_nonoverlapping(source.as_ptr(), self.start.as_ptr().add(at), source.len());
        }
    }

    /// Borrows the published bytes `start..end`.
    ///
    /// # Safety
    /// Every byte of `start..end` was written and published (made visible through a
    /// release/acquire pair such as the stream's lock) before this call.
    pub(super) unsafe fn published(&self, start: usize, end: usize) -> &[u8] {
        assert!(start <= end && end <= self.capacity, "read outside a block");
        // SAFETY: in bounds; the caller guarantees the bytes are initialised and immutable.
        unsafe { std::slice::from_raw_parts(self.start.as_ptr().add(start), end - start) }
    }

    /// Shares the published bytes `start..end` without copying.
    ///
    /// # Safety
    /// As for [`Block::published`].
    pub(super) unsafe fn slice(self: &Arc<Block>, start: usize, end: usize) -> Bytes {
        // Check the range now; the owner re-borrows it later without the caller's context.
        // SAFETY: forwarded contract.
        let _ = unsafe { self.published(start, end) };
        Bytes::from_owner(PublishedRange { block: Arc::clone(self), start, end })
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: rebuilds the vector this block was made from, with its original capacity;
        // `u8` needs no drop, so a length of zero frees the allocation only.
        unsafe { drop(Vec::from_raw_parts(self.start.as_ptr(), 0, self.capacity)) };
    }
}

/// Keeps a block alive for as long as a `Bytes` view of its published range exists.
struct PublishedRange {
    block: Arc<Block>,
    start: usize,
    end: usize,
}

impl AsRef<[u8]> for PublishedRange {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `Block::slice` was called with a published range, and published bytes never
        // change while any reference to the block exists.
        unsafe { self.block.published(self.start, self.end) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_ranges_are_shared_without_copying() {
        let block = Block::new(16);
        assert!(block.capacity() >= 16);
        // SAFETY: single-threaded test: each range is written once, then read.
        let (first, second) = unsafe {
            block.write_at(0, b"hello");
            block.write_at(5, b" world");
            (block.slice(0, 5), block.slice(0, 11))
        };
        assert_eq!(&first[..], b"hello");
        assert_eq!(&second[..], b"hello world");
        assert_eq!(first.as_ptr(), second.as_ptr(), "views share the block");
        drop(block);
        assert_eq!(&second[..], b"hello world", "a view keeps its block alive");
    }

    #[test]
    #[should_panic(expected = "write past the end")]
    fn refuses_writes_past_capacity() {
        let block = Block::new(4);
        let capacity = block.capacity();
        // SAFETY: the call panics before writing anything.
        unsafe { block.write_at(capacity - 1, b"xy") };
    }
}
