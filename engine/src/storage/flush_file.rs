//! Where a shared flush group's flush file lives: the empty, never-written file whose
//! `fdatasync` ends each round (`storage::flush`), so that the call is the device's cache
//! flush alone.
//!
//! On ext4 without a journal, `fdatasync` of any file first writes, synchronously, the block
//! of the inode table that holds the file's inode whenever that block is dirty — and it is
//! dirty whenever any inode in it changed: a log segment's modification time changes with its
//! writes, every clock tick. Files made together get neighbouring inodes, so the flush file
//! of a fresh data directory often shares its block with segments, and then about half the
//! rounds wrote a 4 KiB block and waited for it before their cache flush (measured
//! 2026-11-28, acid, 64 connections: 1,073–1,434 such writes in 2 s of 2,600–3,000 flushes,
//! 28,700–29,500 appends/s, against none and 31,100–34,000 where the block was the flush
//! file's alone — which start got which was chance).
//!
//! So on ext4 the flush file is one of a **pool** of empty files (`flush/NNNN` beside the
//! plain `FLUSH`) that together hold every inode of one aligned run of the inode table as
//! long as a block can hold (its block size over ext4's smallest inode, 128 bytes): no other
//! file can ever get an inode in that block, and none of the pool's is ever written. Each
//! start reads the pool and, where it owns no such run yet, adds files one at a time (ext4
//! hands out the lowest free inode of a group) until it does, at most
//! [`POOL_SPANS_MAX`] runs' worth (the holes of a busy file system's inode table fill
//! first); files of the pool outside the run are then removed. Another process creating
//! files at the same moment (a second server starting beside this one) takes inodes between
//! ours and spoils every run: then the start tries again, up to [`RETRIES_MAX`] times (and
//! at most [`RETRY_PAUSES_MAX`] of pauses), each after a pause of random length and with at
//! most [`RETRY_SPANS_MAX`] runs' worth of files, so that two starts that spoiled each
//! other's runs retry at different moments. If no run
//! forms even so, the pool is removed, and if the pool cannot be made at all (no inodes
//! left, say) it is left alone: either way the plain file serves, with a warning, and the
//! next start tries again. Elsewhere — other file systems, the simulated disk —
//! the flush file is the plain `FLUSH`, as before. None of this touches durability: any
//! file's `fdatasync` on the file system flushes the device's cache; the pool only decides
//! whether that call also waits for a metadata write.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::storage::vfs::{Vfs, VfsFile};

/// The flush file where its inode's block does not matter (and the fallback).
const PLAIN_NAME: &str = "FLUSH";
/// The pool's directory, beside the plain file.
const POOL_DIR_NAME: &str = "flush";
/// How many runs' worth of files one start may add to the pool while it looks for a run:
/// enough to fill the holes a busy file system leaves in a group's inodes first (each new
/// file takes the lowest free one), at a few tens of microseconds a file, once.
const POOL_SPANS_MAX: u64 = 32;
/// Tries after the first when no run formed. Two servers started together spoiled each
/// other's runs in 14 of 16 starts before there were retries (both gave up after the same
/// number of files).
const RETRIES_MAX: u32 = 8;
/// Runs' worth of files one retry may add: with no other process creating files meanwhile,
/// a run forms within two (the first try filled the holes).
const RETRY_SPANS_MAX: u64 = 2;
/// How many retries' worth of time a pause before a retry may last at most: two processes
/// that retry together then seldom overlap (making a file took 0.2-1 ms on this VM, so a
/// retry lasts tens of milliseconds).
const RETRY_PAUSE_RETRIES_MAX: u32 = 8;
/// Longest all the pauses of one start may add up to.
const RETRY_PAUSES_MAX: Duration = Duration::from_secs(1);

/// A file of the pool: its number (its name) and its inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Member {
    number: u32,
    inode: u64,
}

/// Opens the flush file of the group whose first shard's directory is `dir`, creating what
/// is missing (a crash may lose new files: they hold nothing, and the next start makes them
/// again).
pub fn open(vfs: &dyn Vfs, dir: &Path) -> io::Result<Arc<dyn VfsFile>> {
    let plain = dir.join(PLAIN_NAME);
    if let Some(span) = vfs.inode_table_span(dir) {
        let pool_dir = dir.join(POOL_DIR_NAME);
        match open_pooled(vfs, &pool_dir, span) {
            Ok(Some(file)) => {
                // The plain file of an earlier start: nothing depends on it any more.
                if vfs.exists(&plain) {
                    if let Err(error) = vfs.remove_file(&plain) {
                        tracing::warn!(path = %plain.display(), %error, "cannot remove the unused flush file");
                    }
                }
                return Ok(file);
            }
            Ok(None) => tracing::warn!(
                dir = %pool_dir.display(),
                "the flush file could not get an inode-table block of its own (other files took \
                 inodes between the pool's); each flush may first write that block"
            ),
            // The pool only saves work: a file system out of inodes, say, still gets flushed.
            Err(error) => tracing::warn!(
                dir = %pool_dir.display(),
                %error,
                "the flush file's pool could not be made; each flush may first write the plain \
                 flush file's inode-table block"
            ),
        }
    }
    open_or_create(vfs, &plain)
}

/// The flush file from the pool in `pool_dir`, grown until it owns a run of `span` inodes;
/// `None` (and the pool removed) if no run formed.
fn open_pooled(vfs: &dyn Vfs, pool_dir: &Path, span: u64) -> io::Result<Option<Arc<dyn VfsFile>>> {
    vfs.create_dir_all(pool_dir)?;
    let mut pool = read_pool(vfs, pool_dir)?;
    let create = |number| create_member(vfs, pool_dir, number);
    let Some(run) = place_retrying(&mut pool, span, create, std::thread::sleep)? else {
        remove_members(vfs, pool_dir, &pool, |_| true)?;
        return Ok(None);
    };
    remove_members(vfs, pool_dir, &pool, |member| run_of(member.inode, span) != run)?;
    let flush = pool.iter().filter(|member| run_of(member.inode, span) == run).min_by_key(|m| m.inode);
    let flush = flush.expect("an owned run has members");
    vfs.open(&pool_dir.join(member_name(flush.number))).map(Some)
}

/// [`place`], then, while no run formed, up to [`RETRIES_MAX`] smaller tries, each after
/// `pause` for a [`retry_pause`]; the run's index, or `None` if none formed.
fn place_retrying(
    pool: &mut Vec<Member>,
    span: u64,
    mut create: impl FnMut(u32) -> io::Result<Member>,
    mut pause: impl FnMut(Duration),
) -> io::Result<Option<u64>> {
    let (started, made_before) = (Instant::now(), pool.len());
    let mut run = place(pool, span, POOL_SPANS_MAX, &mut create)?;
    // What one file took, from the first try: a retry's length follows from it.
    let per_file = started.elapsed() / u32::try_from(pool.len() - made_before).unwrap_or(u32::MAX).max(1);
    let retry_length = per_file.saturating_mul(u32::try_from(RETRY_SPANS_MAX * span).unwrap_or(u32::MAX));
    let mut paused = Duration::ZERO;
    for retry in 0..RETRIES_MAX {
        if run.is_some() || paused >= RETRY_PAUSES_MAX {
            break;
        }
        let wait = retry_pause(retry, retry_length).min(RETRY_PAUSES_MAX - paused);
        pause(wait);
        paused += wait;
        run = place(pool, span, RETRY_SPANS_MAX, &mut create)?;
    }
    Ok(run)
}

/// A pause of 1 ms up to [`RETRY_PAUSE_RETRIES_MAX`] times `retry_length` (at least 8 ms),
/// drawn from the process, the retry and the clock, so that processes that retry together
/// pause for different times.
fn retry_pause(retry: u32, retry_length: Duration) -> Duration {
    let range_us = retry_length.saturating_mul(RETRY_PAUSE_RETRIES_MAX).as_micros().max(8_000) as u64;
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |t| t.as_nanos());
    let seed = [u64::from(std::process::id()), u64::from(retry), nanos as u64];
    let draw = xxhash_rust::xxh3::xxh3_64(&seed.map(u64::to_le_bytes).concat());
    Duration::from_micros(1_000 + draw % range_us)
}

/// Grows `pool` with `create` (given the next free number) until it owns a whole run of
/// `span` inodes, adding at most `spans_max` × `span` files; the run's index, or `None` if
/// none formed.
fn place(
    pool: &mut Vec<Member>,
    span: u64,
    spans_max: u64,
    mut create: impl FnMut(u32) -> io::Result<Member>,
) -> io::Result<Option<u64>> {
    assert!(span > 0);
    let mut runs = runs_of(pool, span);
    if let Some(run) = runs.iter().find(|(_, inodes)| inodes.len() as u64 == span).map(|(run, _)| *run) {
        return Ok(Some(run));
    }
    let out_of_numbers = || io::Error::other("the flush pool's numbers ran out");
    let number_first = match pool.iter().map(|member| member.number).max() {
        Some(last) => last.checked_add(1).ok_or_else(out_of_numbers)?,
        None => 0,
    };
    let creations_max = u32::try_from(span * spans_max).map_err(|_| out_of_numbers())?;
    let number_end = number_first.checked_add(creations_max).ok_or_else(out_of_numbers)?;
    for number in number_first..number_end {
        let member = create(number)?;
        pool.push(member);
        let run = run_of(member.inode, span);
        let inodes = runs.entry(run).or_default();
        inodes.insert(member.inode);
        if inodes.len() as u64 == span {
            return Ok(Some(run));
        }
    }
    Ok(None)
}

/// The inodes of `pool`, by the run of `span` they fall in.
fn runs_of(pool: &[Member], span: u64) -> BTreeMap<u64, BTreeSet<u64>> {
    let mut runs: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
    for member in pool {
        runs.entry(run_of(member.inode, span)).or_default().insert(member.inode);
    }
    runs
}

/// The aligned run of `span` inodes that `inode` falls in (ext4 numbers inodes from 1; a
/// block of the table holds the inodes from a multiple of its count on, counted from 0).
fn run_of(inode: u64, span: u64) -> u64 {
    inode.saturating_sub(1) / span
}

fn member_name(number: u32) -> String {
    format!("{number:04}")
}

/// The pool's files: every entry named as the pool names its files, with its inode, by
/// number.
fn read_pool(vfs: &dyn Vfs, pool_dir: &Path) -> io::Result<Vec<Member>> {
    let mut pool = Vec::new();
    for name in vfs.list(pool_dir)? {
        // Only the names the pool gives (`0047`, not `47`, `+47` or `00047`).
        let Some(number) = name.parse::<u32>().ok().filter(|&number| member_name(number) == name) else {
            continue;
        };
        pool.push(Member { number, inode: inode_of(vfs, &pool_dir.join(&name))? });
    }
    pool.sort_by_key(|member| member.number);
    Ok(pool)
}

fn create_member(vfs: &dyn Vfs, pool_dir: &Path, number: u32) -> io::Result<Member> {
    let path = pool_dir.join(member_name(number));
    drop(vfs.create_new(&path)?);
    Ok(Member { number, inode: inode_of(vfs, &path)? })
}

fn inode_of(vfs: &dyn Vfs, path: &Path) -> io::Result<u64> {
    vfs.inode_number(path).ok_or_else(|| io::Error::other(format!("no inode number for {}", path.display())))
}

fn remove_members(
    vfs: &dyn Vfs,
    pool_dir: &Path,
    pool: &[Member],
    remove: impl Fn(&Member) -> bool,
) -> io::Result<()> {
    for member in pool.iter().filter(|member| remove(member)) {
        vfs.remove_file(&pool_dir.join(member_name(member.number)))?;
    }
    Ok(())
}

fn open_or_create(vfs: &dyn Vfs, path: &Path) -> io::Result<Arc<dyn VfsFile>> {
    if vfs.exists(path) {
        return vfs.open(path);
    }
    vfs.create_new(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An inode table as ext4 hands it out: the lowest free inode first (nothing is freed
    /// while a pool is placed, so the lowest free one only moves up).
    struct Table {
        used: BTreeSet<u64>,
        lowest_free: u64,
    }

    impl Table {
        fn new(used: BTreeSet<u64>) -> Table {
            Table { used, lowest_free: 1 }
        }

        fn take(&mut self) -> u64 {
            while self.used.contains(&self.lowest_free) {
                self.lowest_free += 1;
            }
            self.used.insert(self.lowest_free);
            self.lowest_free
        }
    }

    /// Places a pool in `table`; after each of the pool's files, `foreign(i)` other files
    /// take an inode. The run, and how many files were made.
    fn place_in(
        table: &mut Table,
        pool: &mut Vec<Member>,
        span: u64,
        foreign: impl Fn(u32) -> u32,
    ) -> (Option<u64>, u32) {
        let mut created = 0;
        let run = place(pool, span, POOL_SPANS_MAX, |number| {
            created += 1;
            let member = Member { number, inode: table.take() };
            for _ in 0..foreign(number) {
                table.take();
            }
            Ok(member)
        });
        (run.unwrap(), created)
    }

    fn owned_run(pool: &[Member], span: u64) -> Option<u64> {
        runs_of(pool, span).into_iter().find(|(_, inodes)| inodes.len() as u64 == span).map(|(run, _)| run)
    }

    fn assert_owned(pool: &[Member], span: u64, run: u64) {
        let inodes: BTreeSet<u64> = pool.iter().map(|member| member.inode).collect();
        for inode in run * span + 1..=(run + 1) * span {
            assert!(inodes.contains(&inode), "inode {inode} of run {run} is not the pool's");
        }
    }

    #[test]
    fn a_pool_fills_the_holes_then_owns_the_next_whole_run() {
        let mut used: BTreeSet<u64> = (1..=100).collect();
        for hole in [7, 20, 21, 90] {
            used.remove(&hole);
        }
        let mut table = Table::new(used);
        let mut pool = Vec::new();
        let (run, created) = place_in(&mut table, &mut pool, 16, |_| 0);
        // Inodes 7, 20, 21, 90 and 101..=112 are taken before the run 113..=128 is whole.
        assert_eq!(run, Some(7));
        assert_owned(&pool, 16, 7);
        assert_eq!(created, 4 + 12 + 16);
    }

    #[test]
    fn a_pool_that_owns_a_run_makes_nothing_more() {
        let mut pool: Vec<Member> = (0..8).map(|i| Member { number: i, inode: 33 + u64::from(i) }).collect();
        pool.push(Member { number: 8, inode: 3 });
        let run = place(&mut pool, 8, POOL_SPANS_MAX, |_| panic!("nothing to make")).unwrap();
        assert_eq!(run, Some(4));
    }

    #[test]
    fn a_pool_that_lost_a_file_grows_again() {
        let mut table = Table::new((1..=40).filter(|inode| *inode != 35).collect());
        // The pool once owned 33..=40; 35 was removed (by hand) and is free again.
        let mut pool: Vec<Member> = [33, 34, 36, 37, 38, 39, 40]
            .iter()
            .enumerate()
            .map(|(i, &inode)| Member { number: i as u32, inode })
            .collect();
        let (run, created) = place_in(&mut table, &mut pool, 8, |_| 0);
        assert_eq!((run, created), (Some(4), 1));
        assert_owned(&pool, 8, 4);
        assert!(pool.iter().any(|member| member.number == 7 && member.inode == 35));
    }

    #[test]
    fn another_process_taking_inodes_between_ours_leaves_no_run_and_a_bounded_pool() {
        let mut table = Table::new(BTreeSet::new());
        let mut pool = Vec::new();
        let (run, created) = place_in(&mut table, &mut pool, 8, |_| 1);
        assert_eq!(run, None);
        assert_eq!(u64::from(created), 8 * POOL_SPANS_MAX);
    }

    /// Places a pool, with retries, in `table`; while `busy(number)`, another process takes
    /// an inode after each of the pool's files. The run, files made, and the pauses.
    fn place_retrying_in(
        table: &mut Table,
        pool: &mut Vec<Member>,
        span: u64,
        busy: impl Fn(u32) -> bool,
    ) -> (Option<u64>, u32, Vec<Duration>) {
        let (mut created, mut pauses) = (0, Vec::new());
        let create = |number| {
            created += 1;
            let member = Member { number, inode: table.take() };
            if busy(number) {
                table.take();
            }
            Ok(member)
        };
        let run = place_retrying(pool, span, create, |pause| pauses.push(pause)).unwrap();
        (run, created, pauses)
    }

    #[test]
    fn a_start_whose_runs_another_start_spoiled_tries_again_after_a_pause() {
        // Another server starting at the same moment takes an inode after each of ours for
        // as long as our first try lasts, then stops (it gave up, or it has its run).
        let (span, mut table, mut pool) = (8, Table::new(BTreeSet::new()), Vec::new());
        let first_try = (span * POOL_SPANS_MAX) as u32;
        let (run, created, pauses) = place_retrying_in(&mut table, &mut pool, span, |n| n < first_try);
        let run = run.expect("the retry, alone, owns a run");
        assert_owned(&pool, span, run);
        assert_eq!(pauses.len(), 1);
        assert!(pauses[0] >= Duration::from_millis(1) && pauses[0] <= RETRY_PAUSES_MAX, "{pauses:?}");
        assert!(u64::from(created) <= span * (POOL_SPANS_MAX + RETRY_SPANS_MAX), "{created} files");
    }

    #[test]
    fn a_start_spoiled_in_every_try_gives_up_after_its_retries_with_a_bounded_pool() {
        let (span, mut table, mut pool) = (8, Table::new(BTreeSet::new()), Vec::new());
        let (run, created, pauses) = place_retrying_in(&mut table, &mut pool, span, |_| true);
        assert_eq!(run, None);
        assert_eq!(pauses.len() as u32, RETRIES_MAX);
        assert_eq!(u64::from(created), span * (POOL_SPANS_MAX + u64::from(RETRIES_MAX) * RETRY_SPANS_MAX));
    }

    #[test]
    fn retry_pauses_scale_with_a_retry_and_differ() {
        let short: BTreeSet<Duration> = (0..64).map(|retry| retry_pause(retry, Duration::ZERO)).collect();
        assert!(
            short.iter().all(|p| *p >= Duration::from_millis(1) && *p < Duration::from_millis(9)),
            "{short:?}"
        );
        assert!(short.len() > 1, "pauses are drawn, not fixed");
        let retry_length = Duration::from_millis(50);
        let long: Vec<Duration> = (0..64).map(|retry| retry_pause(retry, retry_length)).collect();
        let bound = Duration::from_millis(1) + retry_length * RETRY_PAUSE_RETRIES_MAX;
        assert!(long.iter().all(|p| *p < bound), "{long:?}");
        assert!(long.iter().any(|p| *p > Duration::from_millis(9)), "{long:?}");
    }

    proptest! {
        /// Whatever the table and whoever else takes inodes: a run given is wholly the
        /// pool's, no start makes more than its bound, and with nobody else taking inodes a
        /// run forms within two runs' worth of files once the holes are filled.
        #[test]
        fn a_placed_run_is_wholly_the_pools(
            used in proptest::collection::btree_set(1u64..300, 0..250),
            span_log2 in 1u32..6,
            foreign_every in proptest::option::of(1u32..6),
        ) {
            let span = 1u64 << span_log2;
            let holes = (1..=used.iter().max().copied().unwrap_or(0)).filter(|i| !used.contains(i)).count() as u64;
            let mut table = Table::new(used);
            let mut pool = Vec::new();
            let foreign = |number: u32| foreign_every.map_or(0, |every| u32::from(number.is_multiple_of(every)));
            let (run, created) = place_in(&mut table, &mut pool, span, foreign);
            prop_assert!(u64::from(created) <= span * POOL_SPANS_MAX);
            if let Some(run) = run {
                assert_owned(&pool, span, run);
            } else if foreign_every.is_none() {
                prop_assert!(holes + 2 * span > span * POOL_SPANS_MAX, "no run after filling {holes} holes");
            }
        }
    }

    #[test]
    fn on_the_real_disk_the_flush_file_owns_its_inode_table_block() {
        use crate::storage::vfs::real::{scratch, RealVfs};
        let dir = scratch("flush-file");
        let vfs = RealVfs;
        std::fs::write(dir.join(PLAIN_NAME), b"").unwrap(); // left by an earlier version
        let Some(span) = vfs.inode_table_span(&dir) else {
            drop(open(&vfs, &dir).unwrap());
            assert!(dir.join(PLAIN_NAME).exists());
            return std::fs::remove_dir_all(&dir).unwrap();
        };
        // Other tests of this run create files at the same time and may take inodes between
        // the pool's; a start then falls back to the plain file (and removes the pool), and
        // the next one tries again.
        let pool_dir = dir.join(POOL_DIR_NAME);
        let placed = (0..5).find_map(|_| {
            drop(open(&vfs, &dir).unwrap());
            let pool = read_pool(&vfs, &pool_dir).unwrap();
            match pool.is_empty() {
                true => {
                    assert!(dir.join(PLAIN_NAME).exists(), "a start without a run uses the plain file");
                    None
                }
                false => Some(pool),
            }
        });
        let pool = placed.expect("the pool owns a run in one of five starts");
        assert_eq!(pool.len() as u64, span, "only the owned run's files stay");
        let run = owned_run(&pool, span).expect("the pool owns a run");
        assert_owned(&pool, span, run);
        assert!(!dir.join(PLAIN_NAME).exists());
        // The next start finds the same run and makes nothing.
        drop(open(&vfs, &dir).unwrap());
        assert_eq!(read_pool(&vfs, &pool_dir).unwrap(), pool);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_the_names_the_pool_gives_are_the_pools() {
        use crate::storage::vfs::real::{scratch, RealVfs};
        let dir = scratch("flush-file-names");
        for name in ["0047", "47", "+047", "00047", "12345", "x1", "4294967295"] {
            std::fs::write(dir.join(name), b"").unwrap();
        }
        let numbers: Vec<u32> = read_pool(&RealVfs, &dir).unwrap().iter().map(|m| m.number).collect();
        assert_eq!(numbers, [47, 12345, 4294967295]);
        // The last possible number leaves no room to grow: an error, not an overflow.
        let mut pool = read_pool(&RealVfs, &dir).unwrap();
        assert!(place(&mut pool, 1 << 20, POOL_SPANS_MAX, |_| unreachable!()).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_pool_that_cannot_be_made_leaves_the_plain_flush_file() {
        use crate::storage::vfs::real::{scratch, RealVfs};
        let dir = scratch("flush-file-blocked");
        // Where the pool's directory should be, a file: creating the pool fails.
        std::fs::write(dir.join(POOL_DIR_NAME), b"not a directory").unwrap();
        let file = open(&RealVfs, &dir).unwrap();
        assert!(file.is_at(&dir.join(PLAIN_NAME)).unwrap());
        assert_eq!(std::fs::read(dir.join(POOL_DIR_NAME)).unwrap(), b"not a directory");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
