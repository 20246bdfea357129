//! The flush group's tests: rounds, shared flushes, commits that arrive while a leader
//! waits on the device, failures, and what a simulated power loss keeps.

use super::*;
use crate::storage::vfs::sim::{SimRng, SimVfs};
use crate::storage::vfs::Vfs;
use std::path::Path;

fn files(vfs: &SimVfs, count: usize) -> Vec<Arc<dyn VfsFile>> {
    vfs.create_dir_all(Path::new("/d")).unwrap();
    let files: Vec<_> = (0..count).map(|i| vfs.create_new(Path::new(&format!("/d/{i}"))).unwrap()).collect();
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

/// After a simulated power loss at any of 20 points, file `i` of the first `count` starts
/// with `len` bytes of `i + 1`.
fn assert_every_file_survives_power_loss(vfs: &SimVfs, count: usize, len: usize) {
    for seed in 0..20 {
        let after = vfs.crash(&mut SimRng::new(seed));
        for i in 0..count {
            assert_eq!(read(&after, &format!("/d/{i}"))[..len], vec![i as u8 + 1; len], "seed {seed}");
        }
    }
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
    assert_every_file_survives_power_loss(&vfs, 3, 100);
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

/// A file that runs `hook` once, the first time its write-back is waited for: another
/// shard's commit arriving while a round's leader waits on the device.
struct Hooked {
    inner: Arc<dyn VfsFile>,
    hook: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl VfsFile for Hooked {
    fn size(&self) -> io::Result<u64> {
        self.inner.size()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn write_all_at(&self, position: u64, parts: &[&[u8]]) -> io::Result<()> {
        self.inner.write_all_at(position, parts)
    }
    fn read_at(&self, position: u64, buffer: &mut [u8]) -> io::Result<usize> {
        self.inner.read_at(position, buffer)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn write_back(&self, position: u64, len: u64) -> io::Result<()> {
        let written_back = self.inner.write_back(position, len);
        if let Some(hook) = self.hook.lock().unwrap().take() {
            hook();
        }
        written_back
    }
    fn map(&self, len: u64) -> io::Result<Arc<dyn crate::storage::vfs::FileMap>> {
        self.inner.map(len)
    }
    fn punch_hole(&self, position: u64, len: u64) -> io::Result<()> {
        self.inner.punch_hole(position, len)
    }
}

/// `files` wrapped so that waiting for file `i`'s write-back writes `i + 1` into file
/// `i + 1` and enters it into `group`, its ticket kept in `tickets[i + 1]`.
fn chained(
    files: &[Arc<dyn VfsFile>],
    group: &Arc<FlushGroup>,
    tickets: &Arc<Mutex<Vec<Option<Ticket>>>>,
) -> Vec<Arc<dyn VfsFile>> {
    let mut hooked: Vec<Arc<dyn VfsFile>> = Vec::new();
    for (i, file) in files.iter().enumerate().rev() {
        let next = hooked.last().cloned();
        let (group, tickets) = (Arc::clone(group), Arc::clone(tickets));
        let hook = next.map(|next: Arc<dyn VfsFile>| -> Box<dyn FnOnce() + Send> {
            Box::new(move || {
                next.write_all_at(0, &[&[i as u8 + 2; 64]]).unwrap();
                tickets.lock().unwrap()[i + 1] = Some(group.enter(&next, 0, 64, 1).unwrap());
            })
        });
        hooked.push(Arc::new(Hooked { inner: Arc::clone(file), hook: Mutex::new(hook) }));
    }
    hooked.reverse();
    hooked
}

#[test]
fn commits_written_while_the_leader_waits_for_write_back_share_its_flush() {
    let vfs = SimVfs::new();
    let plain = files(&vfs, 3);
    let group = shared_group(&vfs);
    let tickets = Arc::new(Mutex::new(vec![None; 3]));
    let files = chained(&plain, &group, &tickets);
    files[0].write_all_at(0, &[&[1u8; 64]]).unwrap();
    let first = group.enter(&files[0], 0, 64, 1).unwrap();
    group.wait(first, files[0].as_ref()).unwrap();
    let tickets: Vec<Ticket> = tickets.lock().unwrap()[1..].iter().map(|t| t.unwrap()).collect();
    assert!(tickets.iter().all(|ticket| ticket.round == first.round), "all three in one round");
    for (ticket, file) in tickets.iter().zip(&files[1..]) {
        group.wait(*ticket, file.as_ref()).unwrap();
    }
    let stats = group.stats();
    assert_eq!((stats.flushes, stats.commits, stats.records), (1, 3, 3), "one flush for all three");
    assert_every_file_survives_power_loss(&vfs, 3, 64);
}

#[test]
fn a_commit_entering_during_the_last_pass_waits_for_the_next_round() {
    let vfs = SimVfs::new();
    let count = PASSES_MAX + 1;
    let plain = files(&vfs, count);
    let group = shared_group(&vfs);
    let tickets = Arc::new(Mutex::new(vec![None; count]));
    let files = chained(&plain, &group, &tickets);
    files[0].write_all_at(0, &[&[1u8; 64]]).unwrap();
    let first = group.enter(&files[0], 0, 64, 1).unwrap();
    group.wait(first, files[0].as_ref()).unwrap();
    let stats = group.stats();
    assert_eq!((stats.flushes, stats.commits), (1, PASSES_MAX as u64), "one commit per pass");
    let last = tickets.lock().unwrap()[PASSES_MAX].unwrap();
    assert_eq!(last.round, first.round + 1, "entered after the round closed");
    let lost: std::collections::HashSet<bool> = (0..64)
        .map(|seed| read(&vfs.crash(&mut SimRng::new(seed)), &format!("/d/{PASSES_MAX}"))[0] == 0)
        .collect();
    assert_eq!(lost.len(), 2, "the last commit is not durable before its own round");
    group.wait(last, files[PASSES_MAX].as_ref()).unwrap();
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
