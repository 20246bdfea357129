//! The device flush that makes a commit durable, shared by the shards whose logs live on one
//! file system where that is safe.
//!
//! A commit's bytes are durable once they have reached the device (write-back) and the
//! device's volatile cache has been flushed after that. `fdatasync` does both for one file,
//! so with one log per shard every shard pays a cache flush per batch, and the device sees
//! as many flushes as there are busy shards. On ext4 (without `data=journal`) and XFS, an
//! overwrite of blocks already written and synced needs no metadata, and any file's
//! `fdatasync` ends in a cache flush of the whole device. There a commit instead starts the
//! write-back of its own range (`sync_file_range`, not waiting) and joins a **round**; one
//! member of the round (its leader) waits until every member's range is written back, then
//! runs one `fdatasync` of the group's **flush file**, whose cache flush covers them all.
//! The flush file is never written, so its `fdatasync` is the cache flush alone: a log's own
//! file would first write its inode, synchronously, on ext4 without a journal (every write
//! changes its modification time) — one more device write and wait in every round.
//! Elsewhere (a per-file group) each commit runs its own `fdatasync`.
//!
//! Rounds: a commit enters the open round and gets its number; `wait` returns once a flush
//! that started after the commit entered has finished. If no flush is running, the waiter
//! becomes the leader: it closes the open round (later commits enter the next one), flushes,
//! then wakes everyone. A failed flush fails its round and every later one: the process
//! stops acknowledging (a failed fsync is fatal).
//!
//! A worker (`shard::worker`) lets every shard it drives write, then enter, then wait, in
//! threads and in an engine whose caller drives the shards (manual, for deterministic
//! tests), so one flush covers several shards and a simulated power loss can fall at any
//! step of a round. Each flush is counted ([`FlushStats`]): flushes, records covered,
//! latency. A thread about to block on a flush first leaves `SCHED_BATCH`
//! (`crate::scheduling`), so that the flush's end wakes it at once.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crate::histogram::{Histogram, HistogramSnapshot};
use crate::scheduling;
use crate::storage::vfs::VfsFile;

/// Most commits one round holds: one per shard, and an engine has at most 256 shards.
const MEMBERS_MAX: usize = 256;

/// How the commits of the logs on one file system become durable.
pub(crate) struct FlushGroup {
    /// The shared group's flush file (never written); `None` in a per-file group.
    flush_file: Option<Arc<dyn VfsFile>>,
    rounds: Mutex<Rounds>,
    finished: Condvar,
    counters: FlushCounters,
}

#[derive(Default)]
struct Rounds {
    /// The round commits enter now.
    open: u64,
    /// Every round below this one is durable.
    done: u64,
    /// A leader is flushing (the rounds before `open`).
    flushing: bool,
    /// The open round's commits: each one's file and written range (the leader waits for
    /// their write-back), and their records (counted when its flush finishes).
    members: Vec<Member>,
    open_records: u64,
    /// A flush failed: nothing after it is ever durable.
    failed: bool,
}

/// A commit in a round: the range of its file it wrote.
struct Member {
    file: Arc<dyn VfsFile>,
    position: u64,
    len: u64,
}

/// A commit's place in a round: what [`FlushGroup::wait`] waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a commit is durable only once its ticket was waited for"]
pub(crate) struct Ticket {
    round: u64,
    records: u64,
}

/// What one flush makes durable.
struct Covered {
    commits: u64,
    records: u64,
}

#[derive(Default)]
struct FlushCounters {
    flushes: AtomicU64,
    commits: AtomicU64,
    records: AtomicU64,
    records_per_flush: Histogram,
    flush_us: Histogram,
}

/// What the flushes of one file system (or of all, summed) did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlushStats {
    /// Commits share device flushes (on at least one file system).
    pub shared: bool,
    /// Device flushes (`fdatasync` calls at the end of a commit).
    pub flushes: u64,
    /// Commits (one per shard batch) those flushes made durable: more than one per flush
    /// where shards share them.
    pub commits: u64,
    /// Records those flushes made durable.
    pub records: u64,
    pub records_per_flush: HistogramSnapshot,
    /// Microseconds each flush took.
    pub flush_us: HistogramSnapshot,
}

impl FlushStats {
    /// Adds `other` into this one.
    pub fn merge(&mut self, other: &FlushStats) {
        self.shared |= other.shared;
        self.flushes += other.flushes;
        self.commits += other.commits;
        self.records += other.records;
        self.records_per_flush.merge(&other.records_per_flush);
        self.flush_us.merge(&other.flush_us);
    }
}

impl FlushGroup {
    /// A group whose members share each device flush (only where the file system makes one
    /// flush cover every member's written-back overwrites), run as an `fdatasync` of
    /// `flush_file`, a file on that file system that nothing writes.
    pub(crate) fn shared(flush_file: Arc<dyn VfsFile>) -> Arc<FlushGroup> {
        Arc::new(FlushGroup::new(Some(flush_file)))
    }

    /// A group where each commit flushes its own file.
    pub(crate) fn per_file() -> Arc<FlushGroup> {
        Arc::new(FlushGroup::new(None))
    }

    fn new(flush_file: Option<Arc<dyn VfsFile>>) -> FlushGroup {
        FlushGroup {
            flush_file,
            rounds: Mutex::new(Rounds::default()),
            finished: Condvar::new(),
            counters: FlushCounters::default(),
        }
    }

    pub(crate) fn is_shared(&self) -> bool {
        self.flush_file.is_some()
    }

    /// After a commit wrote `len` bytes at `position` of `file` (`records` records): starts
    /// their write-back and enters the open round (shared).
    pub(crate) fn enter(
        &self,
        file: &Arc<dyn VfsFile>,
        position: u64,
        len: u64,
        records: u64,
    ) -> io::Result<Ticket> {
        if !self.is_shared() {
            return Ok(Ticket { round: 0, records });
        }
        file.start_write_back(position, len)?;
        let mut rounds = self.lock();
        // A shard finishes each commit before its next: a round holds one commit per shard.
        assert!(rounds.members.len() < MEMBERS_MAX, "a round holds one commit per shard");
        rounds.members.push(Member { file: Arc::clone(file), position, len });
        rounds.open_records += records;
        Ok(Ticket { round: rounds.open, records })
    }

    /// Returns once the commit of `ticket` (written to `file`) is durable: in a per-file
    /// group by flushing `file`, in a shared one by leading a round when no one else is.
    pub(crate) fn wait(&self, ticket: Ticket, file: &dyn VfsFile) -> io::Result<()> {
        let Some(flush_file) = &self.flush_file else {
            scheduling::prompt_scheduling();
            return self.flush(file, Covered { commits: 1, records: ticket.records });
        };
        let mut rounds = self.lock();
        loop {
            if rounds.failed {
                return Err(io::Error::other("an earlier device flush failed"));
            }
            if rounds.done > ticket.round {
                return Ok(());
            }
            if rounds.flushing {
                scheduling::prompt_scheduling();
                rounds = self.finished.wait(rounds).expect("flush group lock");
                continue;
            }
            rounds = self.lead(rounds, flush_file.as_ref());
        }
    }

    /// Closes the open round, waits for its members' write-back, flushes with `flush_file`
    /// and wakes the members.
    fn lead<'a>(
        &'a self,
        mut rounds: MutexGuard<'a, Rounds>,
        flush_file: &dyn VfsFile,
    ) -> MutexGuard<'a, Rounds> {
        let closing = rounds.open;
        let members = std::mem::take(&mut rounds.members);
        let covered =
            Covered { commits: members.len() as u64, records: std::mem::take(&mut rounds.open_records) };
        rounds.open += 1;
        rounds.flushing = true;
        drop(rounds);
        scheduling::prompt_scheduling();
        let written_back =
            members.iter().try_for_each(|member| member.file.write_back(member.position, member.len));
        let flushed = written_back.and_then(|()| self.flush(flush_file, covered));
        let mut rounds = self.lock();
        assert!(rounds.flushing && rounds.done <= closing, "one leader at a time, rounds in order");
        rounds.flushing = false;
        match flushed {
            Ok(()) => rounds.done = closing + 1,
            Err(error) => {
                tracing::error!(%error, "device flush failed");
                rounds.failed = true;
            }
        }
        self.finished.notify_all();
        rounds
    }

    /// One `fdatasync` of `file`, counted as a flush of what it covers.
    fn flush(&self, file: &dyn VfsFile, covered: Covered) -> io::Result<()> {
        let started = Instant::now();
        file.sync_data()?;
        let counters = &self.counters;
        counters.flush_us.record(started.elapsed().as_micros() as u64);
        counters.flushes.fetch_add(1, Ordering::Relaxed);
        counters.commits.fetch_add(covered.commits, Ordering::Relaxed);
        counters.records.fetch_add(covered.records, Ordering::Relaxed);
        counters.records_per_flush.record(covered.records);
        Ok(())
    }

    pub(crate) fn stats(&self) -> FlushStats {
        let counters = &self.counters;
        FlushStats {
            shared: self.is_shared(),
            flushes: counters.flushes.load(Ordering::Relaxed),
            commits: counters.commits.load(Ordering::Relaxed),
            records: counters.records.load(Ordering::Relaxed),
            records_per_flush: counters.records_per_flush.snapshot(),
            flush_us: counters.flush_us.snapshot(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Rounds> {
        self.rounds.lock().expect("flush group lock")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::vfs::sim::{SimRng, SimVfs};
    use crate::storage::vfs::Vfs;
    use std::path::Path;

    fn files(vfs: &SimVfs, count: usize) -> Vec<Arc<dyn VfsFile>> {
        vfs.create_dir_all(Path::new("/d")).unwrap();
        let files: Vec<_> =
            (0..count).map(|i| vfs.create_new(Path::new(&format!("/d/{i}"))).unwrap()).collect();
        for file in &files {
            file.write_all_at(0, &[&[0u8; 4096]]).unwrap();
            file.sync_data().unwrap();
        }
        vfs.sync_dir(Path::new("/d")).unwrap();
        vfs.sync_dir(Path::new("/")).unwrap();
        files
    }

    /// A shared group whose flush file is `/d/flush`.
    fn shared_group(vfs: &SimVfs) -> Arc<FlushGroup> {
        FlushGroup::shared(vfs.create_new(Path::new("/d/flush")).unwrap())
    }

    fn read(vfs: &SimVfs, name: &str) -> Vec<u8> {
        let file = vfs.open(Path::new(name)).unwrap();
        let mut bytes = vec![0; 4096];
        file.read_at(0, &mut bytes).unwrap();
        bytes
    }

    #[test]
    fn one_flush_covers_every_member_of_its_round() {
        let vfs = SimVfs::new();
        let files = files(&vfs, 3);
        let group = shared_group(&vfs);
        let tickets: Vec<Ticket> = files
            .iter()
            .enumerate()
            .map(|(i, file)| {
                file.write_all_at(0, &[&[i as u8 + 1; 100]]).unwrap();
                group.enter(file, 0, 100, 2).unwrap()
            })
            .collect();
        for (ticket, file) in tickets.iter().zip(&files) {
            group.wait(*ticket, file.as_ref()).unwrap();
        }
        let stats = group.stats();
        assert_eq!((stats.flushes, stats.commits, stats.records), (1, 3, 6), "one flush for all three");
        assert_eq!(
            vfs.open(Path::new("/d/flush")).unwrap().size().unwrap(),
            0,
            "the flush file is never written"
        );
        for seed in 0..20 {
            let after = vfs.crash(&mut SimRng::new(seed));
            for i in 0..3 {
                assert_eq!(read(&after, &format!("/d/{i}"))[..100], [i as u8 + 1; 100], "seed {seed}");
            }
        }
    }

    #[test]
    fn a_commit_that_enters_after_the_flush_started_waits_for_the_next_round() {
        let vfs = SimVfs::new();
        let files = files(&vfs, 2);
        let group = shared_group(&vfs);
        files[0].write_all_at(0, &[b"first"]).unwrap();
        let first = group.enter(&files[0], 0, 5, 1).unwrap();
        group.wait(first, files[0].as_ref()).unwrap();
        files[1].write_all_at(0, &[b"second"]).unwrap();
        let second = group.enter(&files[1], 0, 6, 1).unwrap();
        assert_ne!(first, second);
        group.wait(second, files[1].as_ref()).unwrap();
        assert_eq!(group.stats().flushes, 2);
    }

    #[test]
    fn writes_never_written_back_are_not_covered() {
        let vfs = SimVfs::new();
        let files = files(&vfs, 2);
        let group = shared_group(&vfs);
        files[0].write_all_at(0, &[&[7u8; 512]]).unwrap();
        files[1].write_all_at(0, &[&[9u8; 512]]).unwrap();
        let ticket = group.enter(&files[0], 0, 512, 1).unwrap();
        group.wait(ticket, files[0].as_ref()).unwrap();
        let kept: std::collections::HashSet<bool> =
            (0..64).map(|seed| read(&vfs.crash(&mut SimRng::new(seed)), "/d/1")[0] == 9).collect();
        assert_eq!(kept.len(), 2, "file 1 never entered: its write may be lost");
    }

    #[test]
    fn a_failed_flush_fails_every_waiter_after_it() {
        let vfs = SimVfs::new();
        let files = files(&vfs, 2);
        let group = shared_group(&vfs);
        let ticket = group.enter(&files[0], 0, 0, 1).unwrap();
        vfs.fail_after(0);
        assert!(group.wait(ticket, files[0].as_ref()).is_err());
        vfs.recover_from_failure();
        let later = group.enter(&files[1], 0, 0, 1).unwrap();
        assert!(group.wait(later, files[1].as_ref()).is_err(), "a failed flush is never forgotten");
    }

    #[test]
    fn threads_share_flushes_and_each_returns_durable() {
        let vfs = SimVfs::new();
        let files = files(&vfs, 4);
        let group = shared_group(&vfs);
        std::thread::scope(|scope| {
            for (i, file) in files.iter().enumerate() {
                let group = &group;
                scope.spawn(move || {
                    for round in 0..200u32 {
                        let byte = (round % 250) as u8 + 1;
                        file.write_all_at(u64::from(round % 8) * 512, &[&[byte; 512]]).unwrap();
                        let ticket = group.enter(file, 0, 4096, 1).unwrap();
                        group.wait(ticket, file.as_ref()).unwrap();
                    }
                    i
                });
            }
        });
        let stats = group.stats();
        assert_eq!(stats.records, 800);
        assert!(stats.flushes <= 800);
        for seed in 0..8 {
            let after = vfs.crash(&mut SimRng::new(seed));
            for i in 0..4 {
                let bytes = read(&after, &format!("/d/{i}"));
                assert_eq!(bytes[7 * 512], 200, "the last write of file {i} is durable");
            }
        }
    }
}
