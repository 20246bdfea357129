//! Gather buffers: a catch-up answer of many small stored messages is copied into one
//! contiguous buffer and written with one plain `write` per buffer.
//!
//! In acid mode each message is its own slice of a segment map, cut apart by record
//! headers, so a 1 MiB run of 4 KiB messages is 256 slices: a `writev` of them costs the
//! kernel more than one user-space copy into a warm buffer followed by one `write`. Where the
//! slices are heap buffers (memory mode) the copy costs more than it saves
//! (docs/performance/code-choices.md), so the
//! app turns gathering on for acid mode only (`App::gather_reads`); large messages are
//! never copied. (Since the engine copies a read's records under 64 KiB into one buffer
//! itself, an acid answer reaches this point as many slices only when the process-wide
//! read-copies budget is spent.)
//!
//! The buffers hold [`BUFFER_BYTES`] of messages after a response head of up to
//! [`HEAD_ROOM_BYTES`] (so a 1 MiB answer goes out in one `write`, not a second one for the
//! head's worth of bytes it displaced), and at most [`BUFFERS_MAX`] exist in the process
//! at once (a global count, charged when one is made, released when it is freed); a writer
//! that finds none free sends its slices as they are, so the budget never blocks a reader.
//! A freed buffer stays on its worker thread's short idle list (no lock, pages stay mapped)
//! for the next answer.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;

/// Message bytes one gather buffer holds after the head: a default-sized read answer (4 MiB)
/// is four writes.
pub(super) const BUFFER_BYTES: usize = 1 << 20;
/// Room kept before the messages for a response head (read answers' heads are a few hundred
/// bytes); a larger head takes its room from the messages.
pub(super) const HEAD_ROOM_BYTES: usize = 4 << 10;
/// Capacity of one gather buffer.
const CAPACITY_BYTES: usize = BUFFER_BYTES + HEAD_ROOM_BYTES;
/// Most gather buffers in the process, in use or idle: 32 MiB.
pub(super) const BUFFERS_MAX: usize = 32;
/// Most idle buffers one worker thread keeps for reuse.
const IDLE_PER_THREAD_MAX: usize = 4;
/// Messages at least this large (on average) are written from the map without a copy.
pub(super) const SLICE_BYTES_MAX: usize = 64 << 10;

/// Buffers that exist (in use or idle), never more than [`BUFFERS_MAX`].
static BUFFERS_LIVE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static IDLE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// Whether `slices` are worth gathering: several of them, small on average.
pub(super) fn worth_gathering(slices: &VecDeque<Bytes>, bytes: u64) -> bool {
    slices.len() > 1 && bytes / (slices.len() as u64) < SLICE_BYTES_MAX as u64
}

/// One gather buffer, held while its bytes are written; back to the idle list on drop.
pub(super) struct Buffer {
    bytes: Vec<u8>,
}

impl Buffer {
    /// An empty buffer (room for a head and [`BUFFER_BYTES`] of messages), or `None` when
    /// the budget is spent.
    pub(super) fn take() -> Option<Buffer> {
        if let Some(bytes) = IDLE.with(|idle| idle.borrow_mut().pop()) {
            debug_assert!(bytes.is_empty() && bytes.capacity() >= CAPACITY_BYTES);
            return Some(Buffer { bytes });
        }
        let charged = BUFFERS_LIVE.fetch_update(Ordering::AcqRel, Ordering::Acquire, |live| {
            (live < BUFFERS_MAX).then_some(live + 1)
        });
        charged.ok().map(|_| Buffer { bytes: Vec::with_capacity(CAPACITY_BYTES) })
    }

    /// Appends `head` and then as much of `slices` as fits (up to [`BUFFER_BYTES`] of them
    /// after a head within its room), splitting the last slice taken when it does not fit
    /// whole. Returns the bytes taken from `slices`.
    pub(super) fn fill(&mut self, head: &[u8], slices: &mut VecDeque<Bytes>) -> u64 {
        assert!(self.bytes.is_empty(), "a gather buffer is filled once per write");
        assert!(head.len() <= CAPACITY_BYTES, "a head fits a gather buffer");
        self.bytes.extend_from_slice(head);
        let end = (head.len() + BUFFER_BYTES).min(CAPACITY_BYTES);
        let mut taken = 0u64;
        while let Some(front) = slices.front_mut() {
            let room = end - self.bytes.len();
            if room == 0 {
                break;
            }
            if front.len() <= room {
                self.bytes.extend_from_slice(front);
                taken += front.len() as u64;
                slices.pop_front();
            } else {
                self.bytes.extend_from_slice(&front.split_to(room));
                taken += room as u64;
            }
        }
        assert!(self.bytes.len() <= CAPACITY_BYTES && taken as usize <= BUFFER_BYTES);
        taken
    }

    pub(super) fn as_slice(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let mut bytes = std::mem::take(&mut self.bytes);
        bytes.clear();
        let kept = IDLE.with(|idle| {
            let mut idle = idle.borrow_mut();
            if idle.len() < IDLE_PER_THREAD_MAX {
                idle.push(bytes);
                true
            } else {
                false
            }
        });
        if !kept {
            let before = BUFFERS_LIVE.fetch_sub(1, Ordering::AcqRel);
            assert!(before > 0, "a freed gather buffer was counted");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The budget is the process's: a test that takes every buffer runs alone, not beside
    /// one that needs a buffer (tests run on parallel threads).
    static BUDGET: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn alone() -> std::sync::MutexGuard<'static, ()> {
        BUDGET.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn slices(lengths: &[usize]) -> VecDeque<Bytes> {
        lengths.iter().enumerate().map(|(i, &n)| Bytes::from(vec![i as u8; n])).collect()
    }

    #[test]
    fn fill_takes_whole_slices_then_splits_the_one_that_does_not_fit() {
        let _alone = alone();
        let mut buffer = Buffer::take().expect("a buffer");
        let mut input = slices(&[100, BUFFER_BYTES, 7]);
        let taken = buffer.fill(b"HEAD", &mut input);
        assert_eq!(taken as usize, BUFFER_BYTES, "a head within its room displaces no message bytes");
        assert_eq!(&buffer.as_slice()[..4], b"HEAD");
        assert_eq!(buffer.as_slice()[4..104], [0u8; 100]);
        assert!(buffer.as_slice()[104..].iter().all(|&b| b == 1));
        assert_eq!(input.iter().map(Bytes::len).collect::<Vec<_>>(), [100, 7]);
    }

    #[test]
    fn a_head_larger_than_its_room_takes_the_rest_from_the_messages() {
        let _alone = alone();
        let mut buffer = Buffer::take().expect("a buffer");
        let head = vec![b'h'; HEAD_ROOM_BYTES + 10];
        let mut input = slices(&[BUFFER_BYTES]);
        let taken = buffer.fill(&head, &mut input);
        assert_eq!(taken as usize, BUFFER_BYTES - 10);
        assert_eq!(buffer.as_slice().len(), CAPACITY_BYTES);
        assert_eq!(input.iter().map(Bytes::len).collect::<Vec<_>>(), [10]);
    }

    #[test]
    fn only_many_small_slices_are_gathered() {
        assert!(!worth_gathering(&slices(&[4096]), 4096));
        assert!(worth_gathering(&slices(&[4096; 3]), 3 * 4096));
        let big = slices(&[SLICE_BYTES_MAX; 2]);
        assert!(!worth_gathering(&big, 2 * SLICE_BYTES_MAX as u64));
    }

    #[test]
    fn buffers_are_reused_and_the_budget_is_never_exceeded() {
        let _alone = alone();
        let held: Vec<Buffer> = std::iter::from_fn(Buffer::take).take(BUFFERS_MAX + 1).collect();
        assert!(held.len() <= BUFFERS_MAX);
        assert!(BUFFERS_LIVE.load(Ordering::Acquire) <= BUFFERS_MAX);
        drop(held);
        let again = Buffer::take().expect("an idle or new buffer after the drop");
        assert!(again.as_slice().is_empty());
    }
}
