//! Where a shared flush group's flush file lives: the empty, never-written file whose
//! `fdatasync` ends each round (`storage::flush`), so that the call is the device's cache
//! flush alone.
//!
//! On ext4 without a journal, `fdatasync` of any file first writes, synchronously, the block
//! of the inode table that holds the file's inode whenever that block is dirty — and it is
//! dirty whenever any inode in it changed: a log segment's modification time changes with its
//! writes, every clock tick. Files made together get neighbouring inodes, so the flush file
//! of a fresh data directory often shares its block with segments. Then many rounds write a
//! 4 KiB block and wait for it before their cache flush, and appends lose a noticeable share
//! of their rate (docs/performance/code-choices.md). Whether a start's flush file shares
//! its block is chance.
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
//! other's runs retry at different moments. If no run forms even so, the pool's files stay
//! (up to [`POOL_KEPT_MAX`]): they fill the holes of the inode table, so the next start's
//! files land past them. If the pool cannot be made at all (no inodes left, say) it is left
//! alone. Either way the plain file serves, with a warning, and the next start goes on.
//! Elsewhere — other file systems, the simulated disk — the flush file is the plain `FLUSH`,
//! as before. None of this touches durability: any file's `fdatasync` on the file system
//! flushes the device's cache; the pool only decides whether that call also waits for a
//! metadata write.

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
/// file takes the lowest free one). The files are made once, by the start that needs them.
const POOL_SPANS_MAX: u64 = 32;
/// Tries after the first when no run formed. Two servers started together usually spoil
/// each other's runs at the first try, because both give up after the same number of files
/// (docs/performance/code-choices.md).
const RETRIES_MAX: u32 = 8;
/// Runs' worth of files one retry may add: with no other process creating files meanwhile,
/// a run forms within two (the first try filled the holes).
const RETRY_SPANS_MAX: u64 = 2;
/// How many retries' worth of time a pause before a retry may last at most: two processes
/// that retry together then seldom overlap (a retry makes up to [`RETRY_SPANS_MAX`] runs'
/// worth of files, so it lasts tens of milliseconds).
const RETRY_PAUSE_RETRIES_MAX: u32 = 8;
/// Longest all the pauses of one start may add up to.
const RETRY_PAUSES_MAX: Duration = Duration::from_secs(1);

/// Most files a pool that owns no run keeps for the next start. They fill holes of the
/// inode table (a file system with many files made and removed over time), so the next
/// start's files land past them. One start's files may not reach past the holes that many
/// old files left. A start that removed its pool again would leave the same holes for the
/// next (docs/performance/code-choices.md). Past this the pool is removed and tried afresh.
const POOL_KEPT_MAX: usize = 8192;

/// A file of the pool: its number (its name) and its inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Member {
    number: u32,
    inode: u64,
}

/// Opens the flush file of the group whose first shard's directory is `dir`, creating what
/// is missing (a crash may lose new files: they hold nothing, and the next start makes them
/// again).
pub(super) fn open(vfs: &dyn Vfs, dir: &Path) -> io::Result<Arc<dyn VfsFile>> {
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
                "the flush file could not get an inode-table block of its own yet (other files \
                 took inodes between the pool's; the pool's files stay, and the next start goes on \
                 past them); each flush may first write that block"
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
/// `None` if no run formed (the pool kept for the next start, up to [`POOL_KEPT_MAX`]).
fn open_pooled(vfs: &dyn Vfs, pool_dir: &Path, span: u64) -> io::Result<Option<Arc<dyn VfsFile>>> {
    vfs.create_dir_all(pool_dir)?;
    let mut pool = read_pool(vfs, pool_dir)?;
    let create = |number| create_member(vfs, pool_dir, number);
    let Some(run) = place_retrying(&mut pool, span, create, std::thread::sleep)? else {
        keep_unplaced(vfs, pool_dir, &pool, POOL_KEPT_MAX)?;
        return Ok(None);
    };
    remove_members(vfs, pool_dir, &pool, |member| run_of(member.inode, span) != run)?;
    let flush = pool.iter().filter(|member| run_of(member.inode, span) == run).min_by_key(|m| m.inode);
    let flush = flush.expect("an owned run has members");
    vfs.open(&pool_dir.join(member_name(flush.number))).map(Some)
}

/// What a start that owns no run leaves of `pool`: all of it, for the next start to go on
/// past, unless it has grown beyond `kept_max` files; then nothing, to start afresh.
fn keep_unplaced(vfs: &dyn Vfs, pool_dir: &Path, pool: &[Member], kept_max: usize) -> io::Result<()> {
    if pool.len() <= kept_max {
        return Ok(());
    }
    remove_members(vfs, pool_dir, pool, |_| true)
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
    for _ in 0..RETRIES_MAX {
        if run.is_some() || paused >= RETRY_PAUSES_MAX {
            break;
        }
        let wait = retry_pause(retry_length).min(RETRY_PAUSES_MAX - paused);
        pause(wait);
        paused += wait;
        run = place(pool, span, RETRY_SPANS_MAX, &mut create)?;
    }
    Ok(run)
}

/// A pause of 1 ms plus a draw below [`RETRY_PAUSE_RETRIES_MAX`] times `retry_length` (and
/// below at least 8 ms), drawn afresh for each pause (the standard library's randomly keyed
/// hasher, as the server's cursor jitter draws), so that processes that retry together
/// pause for different times.
fn retry_pause(retry_length: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let range_us = retry_length.saturating_mul(RETRY_PAUSE_RETRIES_MAX).as_micros().max(8_000) as u64;
    let draw = std::collections::hash_map::RandomState::new().build_hasher().finish();
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
mod tests;
