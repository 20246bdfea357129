//! Recent catch-up answers of a disk-mode stream, handed again to readers that ask for the
//! same start.
//!
//! Bytes at an offset never change (PROTOCOL §10: catch-up chunks, the tail's included, are
//! cacheable), so a crowd of readers catching up on one stream — clients reconnecting after
//! a deploy, many tabs loading one stream — need not each check and copy the same records
//! out of the log. The first read's answer (checked against its crcs and copied out of the
//! log by `storage::chain::read`) is kept, and the next reader that asks for the same start
//! with the same read size gets it, as long as it is still the answer a read would give: it
//! ended before the tail it was read against (a later read ends at the same place), or at
//! the tail, which has not moved since. A read of the log costs a crc pass and a copy of
//! every byte; a kept answer costs neither.
//!
//! Only answers made wholly of copies are kept ([`Chunk::copied`]): a kept slice of a segment
//! map would keep the map, and the disk space of a segment compaction deleted, alive. Forks'
//! answers, which join their source's bytes to their own, and memory mode's (slices of the
//! stream's own memory already) are not kept.
//!
//! Limits: an answer larger than [`KEPT_BYTES_MAX`] / [`KEPT_PER_STREAM_MAX`] (reads above
//! 6.4 MiB) is not kept; a stream remembers at most [`KEPT_PER_STREAM_MAX`] answers, weakly;
//! the process holds them, at most [`KEPT_BYTES_MAX`] and [`KEPT_ANSWERS_MAX`] answers in
//! all (so a crowd of tiny answers is bounded too) and none kept longer than
//! [`KEPT_MS_MAX`], dropping the oldest first whenever it keeps another, and the aged ones
//! at every shard worker's full turn ([`drop_expired`], once a second), so an idle process
//! lets go of them too. Kept bytes stay charged to the read-copies budget they
//! were copied under (`storage::chain::read::copies`), so kept answers and answers in flight
//! never hold more than that budget together; a dropped answer is freed once no response is
//! still sending it. Reads in flight come first: a read the budget cannot hold drops the
//! oldest kept answers before it reads ([`make_room`]), and nothing is kept while kept
//! answers and reads in flight together hold more than half the budget (many readers of
//! different data, whose reads would otherwise send slices of the log instead of copies).
//! Answers older than [`KEPT_MS_MAX`] are dropped first, so none stays for want of a later
//! keep. Kept answers make re-reading a stream faster. Without the two rules that put reads
//! in flight first, keeping answers would make many readers of different streams slower
//! instead (docs/performance/code-choices.md).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::offset::Offset;
use crate::storage::chain::read::{copies_held_bytes, COPIES_BYTES_MAX};
use crate::storage::chunk::Chunk;

/// Most answers one stream remembers: a 16 MiB catch-up in the default 4 MiB reads, and one.
pub(crate) const KEPT_PER_STREAM_MAX: usize = 5;
/// Most bytes of kept answers in the process: half the read-copies budget, so reads in
/// flight keep the other half.
pub(crate) const KEPT_BYTES_MAX: usize = 32 << 20;
/// Longest an answer is kept.
pub(crate) const KEPT_MS_MAX: u64 = 10_000;
/// Most answers the process holds: each holds a few hundred bytes besides its own (its
/// record, the answer's slices and their owner), which [`KEPT_BYTES_MAX`] does not count,
/// so a crowd of tiny answers holds at most about 1 MiB more. (Counting 256 bytes for each
/// against [`KEPT_BYTES_MAX`] instead would leave room for 7 answers of 4 MiB, not 8. Readers
/// of several 16 MiB streams would then find far fewer kept answers
/// (docs/performance/code-choices.md).)
pub(crate) const KEPT_ANSWERS_MAX: usize = 4096;

/// One kept answer and what it answered.
struct Kept {
    from: Offset,
    bytes_max: usize,
    /// The published tail the read was made against.
    tail: Offset,
    chunk: Chunk,
    kept_at: Instant,
}

/// The answers one stream remembers (weakly: the process holds them); made at the first
/// answer kept, so a stream never read costs 24 bytes (`Option<KeptAnswers>`).
#[derive(Default)]
pub(crate) struct KeptAnswers {
    answers: OnceLock<Box<Mutex<Vec<Weak<Kept>>>>>,
}

impl KeptAnswers {
    /// The kept answer to a read from `from` of `bytes_max` bytes, if one is still what a
    /// read would give with the published tail at `tail`.
    pub(crate) fn get(&self, from: Offset, bytes_max: usize, tail: Offset) -> Option<Chunk> {
        let answers = self.answers.get()?.lock().expect("kept answers lock");
        let found = answers.iter().filter_map(Weak::upgrade).find_map(|kept| {
            let same = kept.from == from && kept.bytes_max == bytes_max;
            let still = kept.chunk.next < kept.tail || kept.chunk.next == tail;
            (same && still).then(|| kept.chunk.clone())
        });
        if found.is_some() {
            HITS.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    /// Keeps `chunk`, a read from `from` of `bytes_max` bytes against the published tail
    /// `tail`, if it is made of copies and holds something.
    pub(crate) fn keep(&self, from: Offset, bytes_max: usize, tail: Offset, chunk: &Chunk) {
        if !chunk.copied || chunk.messages == 0 || chunk.len() > KEPT_BYTES_MAX / KEPT_PER_STREAM_MAX {
            return;
        }
        // Kept bytes hold their read-copies charge: while kept answers and reads in flight
        // together use more than half that budget (many readers of different data), keeping
        // more would leave the reads too little, and they would send slices of the log.
        // Answers past their age go first, so none stays for want of a later keep.
        drop_expired();
        if copies_held_bytes() > COPIES_BYTES_MAX / 2 {
            return;
        }
        assert!(chunk.next > from && chunk.next <= tail, "a kept answer lies between its start and its tail");
        let kept = Arc::new(Kept { from, bytes_max, tail, chunk: chunk.clone(), kept_at: Instant::now() });
        {
            let mut answers = self.answers.get_or_init(Box::default).lock().expect("kept answers lock");
            answers.retain(|weak| {
                weak.upgrade().is_some_and(|old| old.from != from || old.bytes_max != bytes_max)
            });
            if answers.len() >= KEPT_PER_STREAM_MAX {
                answers.remove(0);
            }
            answers.push(Arc::downgrade(&kept));
        }
        hold(kept);
    }
}

/// Every kept answer of the process, oldest first, and their bytes.
struct Held {
    answers: VecDeque<Arc<Kept>>,
    bytes: usize,
}

static HELD: Mutex<Held> = Mutex::new(Held { answers: VecDeque::new(), bytes: 0 });

/// Reads answered with a kept answer, since the start.
static HITS: AtomicU64 = AtomicU64::new(0);

impl Held {
    /// Takes out the oldest answers while they hold more than `bytes_max`, are more than
    /// [`KEPT_ANSWERS_MAX`], or were kept longer than [`KEPT_MS_MAX`] (returned, to be freed
    /// outside the lock).
    fn take_oldest(&mut self, bytes_max: usize) -> Vec<Arc<Kept>> {
        let too_old = |kept: &Kept| kept.kept_at.elapsed() > Duration::from_millis(KEPT_MS_MAX);
        let mut taken = Vec::new();
        while self.bytes > bytes_max
            || self.answers.len() > KEPT_ANSWERS_MAX
            || self.answers.front().is_some_and(|oldest| too_old(oldest))
        {
            taken.push(self.take_front().expect("bytes held are in some answer"));
        }
        assert!(self.bytes <= bytes_max, "the process holds no more than its limit");
        assert!(self.answers.len() <= KEPT_ANSWERS_MAX, "nor more answers");
        taken
    }

    /// Takes out the oldest answer, if any.
    fn take_front(&mut self) -> Option<Arc<Kept>> {
        let oldest = self.answers.pop_front()?;
        self.bytes -= oldest.chunk.len();
        Some(oldest)
    }
}

/// Holds `kept`, dropping the oldest answers past the process's limits.
fn hold(kept: Arc<Kept>) {
    let mut held = HELD.lock().expect("held answers lock");
    held.bytes += kept.chunk.len();
    held.answers.push_back(kept);
    let dropped = held.take_oldest(KEPT_BYTES_MAX);
    drop(held);
    // Freed outside the lock.
    drop(dropped);
}

/// Makes room in the read-copies budget for a read that may copy `bytes_max` bytes: while
/// the budget cannot hold it, drops the oldest kept answers, about as many bytes as it is
/// short of at each step (the reads in flight come first; an answer a response is still
/// sending frees its bytes once sent, so a step may free less, and the next drops more).
/// Costs one atomic load while the budget has room.
pub(crate) fn make_room(bytes_max: usize) {
    loop {
        let needed = copies_held_bytes().saturating_add(bytes_max as u64);
        let Some(short_bytes) = needed.checked_sub(COPIES_BYTES_MAX).filter(|short| *short > 0) else {
            return;
        };
        let dropped = {
            let mut held = HELD.lock().expect("held answers lock");
            if held.answers.is_empty() {
                return;
            }
            let keep_bytes = held.bytes.saturating_sub(usize::try_from(short_bytes).unwrap_or(usize::MAX));
            let mut dropped = held.take_oldest(keep_bytes);
            if dropped.is_empty() {
                // Answers of no bytes: each step still drops one.
                dropped.extend(held.take_front());
            }
            dropped
        };
        // Freed outside the lock.
        drop(dropped);
    }
}

/// Drops the answers kept longer than [`KEPT_MS_MAX`]: at each keep, and from the shard
/// workers' full turn, so an idle process does not hold them until its next read.
pub(crate) fn drop_expired() {
    let dropped = HELD.lock().expect("held answers lock").take_oldest(usize::MAX);
    // Freed outside the lock.
    drop(dropped);
}

/// Bytes of kept answers the process holds now.
pub(crate) fn kept_bytes() -> usize {
    HELD.lock().expect("held answers lock").bytes
}

/// Reads answered with a kept answer instead of a read of the log, since the start.
pub(crate) fn hits() -> u64 {
    HITS.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    /// The process's kept answers are shared: tests that keep or drop them run one at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn chunk(from: u64, len: u64, copied: bool) -> Chunk {
        let next = Offset::ZERO.advance(from + 1, from + len);
        Chunk { next, messages: 1, slices: vec![Bytes::from(vec![7; len as usize])], copied }
    }

    fn at(bytes: u64) -> Offset {
        Offset::ZERO.advance(bytes, bytes)
    }

    #[test]
    fn an_answer_is_handed_again_while_a_read_would_give_it() {
        let _serial = serial();
        let answers = KeptAnswers::default();
        let (from, tail) = (at(0), at(100));
        let full = chunk(0, 40, true);
        answers.keep(from, 40, tail, &full);
        let hits_before = hits();
        assert_eq!(answers.get(from, 40, at(500)).map(|c| c.next), Some(full.next), "ended before its tail");
        assert!(hits() > hits_before, "a hit is counted");
        assert!(answers.get(from, 41, tail).is_none(), "another read size is another answer");
        assert!(answers.get(at(1), 40, tail).is_none(), "another start");
        let to_tail = chunk(50, 50, true);
        answers.keep(at(50), 4096, to_tail.next, &to_tail);
        assert!(answers.get(at(50), 4096, to_tail.next).is_some(), "the tail has not moved");
        assert!(answers.get(at(50), 4096, at(101)).is_none(), "the tail moved: a read gives more");
    }

    #[test]
    fn only_copies_are_kept_and_a_stream_remembers_a_few() {
        let _serial = serial();
        let answers = KeptAnswers::default();
        answers.keep(at(0), 10, at(100), &chunk(0, 10, false));
        assert!(answers.get(at(0), 10, at(100)).is_none(), "a slice of storage is not kept");
        for start in 0..KEPT_PER_STREAM_MAX as u64 + 2 {
            answers.keep(at(start), 1, at(100), &chunk(start, 1, true));
        }
        let remembered =
            (0..KEPT_PER_STREAM_MAX as u64 + 2).filter(|s| answers.get(at(*s), 1, at(100)).is_some());
        assert_eq!(remembered.count(), KEPT_PER_STREAM_MAX, "the oldest forgotten");
    }

    #[test]
    fn the_process_holds_no_more_than_its_limit() {
        let _serial = serial();
        let answers = KeptAnswers::default();
        let piece = (KEPT_BYTES_MAX / KEPT_PER_STREAM_MAX) as u64;
        for start in 0..(2 * KEPT_PER_STREAM_MAX) as u64 {
            KeptAnswers::default().keep(
                at(start * piece),
                1,
                at(1 << 40),
                &chunk(start * piece, piece, true),
            );
        }
        assert!(kept_bytes() <= KEPT_BYTES_MAX);
        answers.keep(at(0), 1, at(10), &chunk(0, 10, true));
        assert!(answers.get(at(0), 1, at(10)).is_some(), "the newest is held");
    }

    #[test]
    fn reads_in_flight_come_before_kept_answers() {
        let _serial = serial();
        let answers = KeptAnswers::default();
        answers.keep(at(0), 1, at(10), &chunk(0, 10, true));
        make_room(0);
        assert!(answers.get(at(0), 1, at(10)).is_some(), "the budget has room: nothing dropped");
        make_room(COPIES_BYTES_MAX as usize + 1);
        assert!(answers.get(at(0), 1, at(10)).is_none(), "a read the budget cannot hold drops them");
        assert_eq!(kept_bytes(), 0);
    }

    #[test]
    fn aged_answers_are_dropped_without_another_keep() {
        let _serial = serial();
        let answers = KeptAnswers::default();
        answers.keep(at(0), 1, at(10), &chunk(0, 10, true));
        drop_expired();
        assert!(answers.get(at(0), 1, at(10)).is_some(), "a young answer stays");
        let Some(kept_at) = Instant::now().checked_sub(Duration::from_millis(KEPT_MS_MAX + 1)) else {
            return;
        };
        let aged =
            Arc::new(Kept { from: at(20), bytes_max: 1, tail: at(30), chunk: chunk(20, 10, true), kept_at });
        answers
            .answers
            .get()
            .expect("made at the first keep")
            .lock()
            .expect("lock")
            .push(Arc::downgrade(&aged));
        {
            let mut held = HELD.lock().expect("held answers lock");
            held.bytes += aged.chunk.len();
            held.answers.push_front(aged);
        }
        drop_expired();
        assert!(answers.get(at(20), 1, at(30)).is_none(), "an aged answer is dropped");
        assert!(answers.get(at(0), 1, at(10)).is_some(), "a young one stays");
    }

    #[test]
    fn a_crowd_of_tiny_answers_is_bounded_by_its_count() {
        let _serial = serial();
        let first = KeptAnswers::default();
        first.keep(at(0), 1, at(10), &chunk(0, 1, true));
        let crowd: Vec<KeptAnswers> = (0..KEPT_ANSWERS_MAX).map(|_| KeptAnswers::default()).collect();
        for answers in &crowd {
            answers.keep(at(0), 1, at(10), &chunk(0, 1, true));
        }
        assert!(first.get(at(0), 1, at(10)).is_none(), "the oldest dropped past the count");
        assert!(crowd[KEPT_ANSWERS_MAX - 1].get(at(0), 1, at(10)).is_some(), "the newest is held");
    }
}
