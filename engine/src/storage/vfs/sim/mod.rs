//! A simulated disk for crash tests: everything an fsync did not cover may be lost or torn.
//!
//! Each file keeps its durable image and the writes made since its last `sync_data`; each
//! directory keeps its durable entries and the creations, renames and removals made since its
//! last `sync_dir` — subdirectories included: a directory created and never synced into its
//! parent can vanish with everything in it. [`SimVfs::crash`] returns the disk as a reboot
//! would find it: durable state, plus — chosen by a seeded generator — each unsynced write
//! kept, dropped or torn (a random subset of its 512-byte sectors), and a random prefix of
//! each directory's unsynced entry changes. [`SimVfs::fail_after`] makes every operation after the
//! next `n` fail, which is how a test stops the world in the middle of a commit;
//! [`SimVfs::set_read_only`] makes every change fail while reads go on, as a file system
//! remounted read-only after an error does. Same seed, same disk.
//!
//! The device cache is modelled as ext4 and XFS behave (`storage::flush` relies on it):
//! `write_back` (`sync_file_range`) sends a file's writes inside a range to the device
//! without making them durable; every `sync_data` ends in a device cache flush, which makes
//! durable, in every file, the written-back writes that overwrite blocks already written and
//! synced (the file's allocated prefix). A write into space never written (past that prefix,
//! or space `set_len` added) needs metadata only the file's own `sync_data` commits.
//!
//! `file` holds one file's data and what a crash leaves of it; `tests` pins the model down.

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

use super::{FileMap, Vfs, VfsFile};

mod file;
mod rng;

use file::{survive, write_into, FileData};
pub use rng::SimRng;

/// Granularity of a torn write: sectors of the file, each kept whole or not at all.
pub(crate) const SECTOR_BYTES: usize = 512;

type FileRef = Arc<Mutex<FileData>>;

#[derive(Clone)]
enum DirChange {
    Put(String, FileRef),
    Remove(String),
    MakeDir(String),
}

#[derive(Default)]
struct Dir {
    current: BTreeMap<String, FileRef>,
    durable: BTreeMap<String, FileRef>,
    unsynced: Vec<DirChange>,
    /// Subdirectories whose entries are durable here.
    durable_subdirs: std::collections::BTreeSet<String>,
}

#[derive(Default)]
struct Disk {
    /// Ordered, so a crash visits directories in the same order for the same seed.
    dirs: BTreeMap<PathBuf, Dir>,
    /// Operations left before every operation fails (`None`: never).
    operations_left: Option<u64>,
    /// Bytes the disk holds at most (`None`: no limit); growing files past it fails with
    /// "no space left".
    capacity: Option<usize>,
    /// Files with writes written back since the last device flush.
    written_back: Vec<FileRef>,
    /// Every change fails ("read-only file system") while reads go on, as on a file system
    /// remounted read-only after an error.
    read_only: bool,
}

/// The simulated disk. Clones share it.
#[derive(Clone, Default)]
pub struct SimVfs {
    disk: Arc<Mutex<Disk>>,
}

impl Disk {
    /// The device cache flush every `sync_data` ends with: in each file, the written-back
    /// writes (in order, up to the first that needs metadata) become durable.
    fn flush_device(&mut self) {
        self.written_back.retain(|file| {
            let mut data = file.lock().expect("sim file lock");
            data.flush_written_back();
            data.written_back > 0
        });
    }

    /// What `sync_dir` does: `dir`'s entries, and which subdirectories it holds, durable.
    fn make_entries_durable(&mut self, dir: &Path) -> io::Result<()> {
        let subdirs: std::collections::BTreeSet<String> =
            self.dirs.keys().filter(|path| path.parent() == Some(dir)).map(|path| split(path).1).collect();
        let directory = self.dir_mut(dir)?;
        directory.durable = directory.current.clone();
        directory.durable_subdirs = subdirs;
        directory.unsynced.clear();
        Ok(())
    }

    fn dir_mut(&mut self, dir: &Path) -> io::Result<&mut Dir> {
        self.dirs.get_mut(dir).ok_or_else(no_directory)
    }
}

fn no_directory() -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, "no such directory")
}

fn power_loss() -> io::Error {
    io::Error::other("simulated power loss")
}

fn split(path: &Path) -> (PathBuf, String) {
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    (dir, name)
}

impl SimVfs {
    pub fn new() -> SimVfs {
        SimVfs::default()
    }

    /// After `operations` more operations (reads included), every operation fails.
    pub fn fail_after(&self, operations: u64) {
        self.lock().operations_left = Some(operations);
    }

    /// Turns the disk read-only (every write, sync and change of a directory fails) or back.
    pub fn set_read_only(&self, read_only: bool) {
        self.lock().read_only = read_only;
    }

    /// Limits the bytes files may hold in all (`None`: no limit).
    pub fn set_capacity(&self, bytes: Option<usize>) {
        self.lock().capacity = bytes;
    }

    /// Refuses to grow files by `growth` bytes past the capacity.
    fn make_room(&self, growth: usize) -> io::Result<()> {
        let capacity = self.lock().capacity;
        let Some(capacity) = capacity else { return Ok(()) };
        if growth > 0 && self.stored_bytes() + growth > capacity {
            return Err(io::Error::new(io::ErrorKind::StorageFull, "simulated disk full"));
        }
        Ok(())
    }

    /// Lets operations succeed again (the disk was fine; the process that saw it fail is gone).
    pub fn recover_from_failure(&self) {
        self.lock().operations_left = None;
    }

    /// Whether the disk has stopped answering.
    pub fn has_failed(&self) -> bool {
        self.lock().operations_left == Some(0)
    }

    /// The disk as a reboot finds it: durable state plus a seeded choice of unsynced changes.
    pub fn crash(&self, rng: &mut SimRng) -> SimVfs {
        let disk = self.lock();
        let mut survivors: HashMap<*const Mutex<FileData>, FileRef> = HashMap::new();
        let mut after = Disk { capacity: disk.capacity, ..Disk::default() };
        // Parents sort before their children: a directory survives if its parent did and
        // kept its entry.
        let mut kept_subdirs: HashMap<PathBuf, std::collections::BTreeSet<String>> = HashMap::new();
        for (path, dir) in &disk.dirs {
            if let Some(parent) = path.parent() {
                let name = split(path).1;
                if !kept_subdirs.get(parent).is_some_and(|names| names.contains(&name)) {
                    continue;
                }
            }
            let mut entries = dir.durable.clone();
            let mut subdirs = dir.durable_subdirs.clone();
            let kept = rng.below(dir.unsynced.len() as u64 + 1) as usize;
            for change in &dir.unsynced[..kept] {
                match change {
                    DirChange::Put(name, file) => {
                        entries.insert(name.clone(), Arc::clone(file));
                    }
                    DirChange::Remove(name) => {
                        entries.remove(name);
                    }
                    DirChange::MakeDir(name) => {
                        subdirs.insert(name.clone());
                    }
                }
            }
            let mut rebooted = BTreeMap::new();
            for (name, file) in entries {
                let key = Arc::as_ptr(&file);
                let copy = survivors.entry(key).or_insert_with(|| survive(&file, rng));
                rebooted.insert(name, Arc::clone(copy));
            }
            kept_subdirs.insert(path.clone(), subdirs.clone());
            let rebooted_dir = Dir {
                current: rebooted.clone(),
                durable: rebooted,
                unsynced: Vec::new(),
                durable_subdirs: subdirs,
            };
            after.dirs.insert(path.clone(), rebooted_dir);
        }
        // Entries of directories that did not survive name nothing.
        for (path, dir) in after.dirs.iter_mut() {
            dir.durable_subdirs.retain(|name| kept_subdirs.contains_key(&path.join(name)));
        }
        SimVfs { disk: Arc::new(Mutex::new(after)) }
    }

    /// Total bytes currently held in files (for test assertions about cleanup).
    pub fn stored_bytes(&self) -> usize {
        let disk = self.lock();
        let mut seen = std::collections::HashSet::new();
        let mut total = 0;
        for dir in disk.dirs.values() {
            for file in dir.current.values() {
                if seen.insert(Arc::as_ptr(file)) {
                    total += file.lock().expect("sim file lock").current.len();
                }
            }
        }
        total
    }

    /// Overwrites bytes of a file as they are now and durably (corruption tests).
    pub fn corrupt(&self, path: &Path, position: usize, bytes: &[u8]) -> io::Result<()> {
        let file = self.find(path)?;
        let mut data = file.lock().expect("sim file lock");
        let data = &mut *data;
        write_into(&mut data.current, position, bytes);
        write_into(&mut data.durable, position, bytes);
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, Disk> {
        self.disk.lock().expect("sim disk lock")
    }

    /// Counts one operation; fails once the budget set by `fail_after` is spent.
    fn operate(&self) -> io::Result<MutexGuard<'_, Disk>> {
        let mut disk = self.lock();
        match &mut disk.operations_left {
            Some(0) => Err(power_loss()),
            Some(left) => {
                *left -= 1;
                Ok(disk)
            }
            None => Ok(disk),
        }
    }

    /// Counts one operation that changes the disk; fails while it is read-only.
    fn change(&self) -> io::Result<MutexGuard<'_, Disk>> {
        let disk = self.operate()?;
        match disk.read_only {
            true => Err(io::Error::from_raw_os_error(libc::EROFS)),
            false => Ok(disk),
        }
    }

    fn find(&self, path: &Path) -> io::Result<FileRef> {
        let (dir, name) = split(path);
        let disk = self.lock();
        disk.dirs
            .get(&dir)
            .and_then(|d| d.current.get(&name))
            .cloned()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{} not found", path.display())))
    }
}

struct SimFile {
    vfs: SimVfs,
    data: FileRef,
}

struct SimMap {
    data: FileRef,
    len: usize,
}

impl Vfs for SimVfs {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.change()?;
        let mut missing = Vec::new();
        let mut current = Some(path);
        while let Some(dir) = current.filter(|dir| !disk.dirs.contains_key(*dir)) {
            missing.push(dir);
            current = dir.parent();
        }
        for dir in missing.into_iter().rev() {
            if let Some(parent) = dir.parent() {
                let name = split(dir).1;
                disk.dirs
                    .get_mut(parent)
                    .expect("parents are created first")
                    .unsynced
                    .push(DirChange::MakeDir(name));
            }
            disk.dirs.insert(dir.to_path_buf(), Dir::default());
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let disk = self.operate()?;
        let listed = disk.dirs.get(dir).ok_or_else(no_directory)?;
        let mut names: Vec<String> = listed.current.keys().cloned().collect();
        let prefix = dir.to_path_buf();
        for path in disk.dirs.keys() {
            if path.parent() == Some(prefix.as_path()) {
                names.push(split(path).1);
            }
        }
        Ok(names)
    }

    fn exists(&self, path: &Path) -> bool {
        let (dir, name) = split(path);
        let disk = self.lock();
        disk.dirs.contains_key(path) || disk.dirs.get(&dir).is_some_and(|d| d.current.contains_key(&name))
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>> {
        drop(self.operate()?);
        let data = self.find(path)?;
        Ok(Arc::new(SimFile { vfs: self.clone(), data }))
    }

    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>> {
        let (dir, name) = split(path);
        let mut disk = self.change()?;
        let directory = disk.dir_mut(&dir)?;
        if directory.current.contains_key(&name) {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{} exists", path.display())));
        }
        let data: FileRef = Arc::default();
        directory.current.insert(name.clone(), Arc::clone(&data));
        directory.unsynced.push(DirChange::Put(name, Arc::clone(&data)));
        Ok(Arc::new(SimFile { vfs: self.clone(), data }))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let (dir, name) = split(path);
        let mut disk = self.change()?;
        let directory = disk.dir_mut(&dir)?;
        if directory.current.remove(&name).is_none() {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("{} not found", path.display())));
        }
        directory.unsynced.push(DirChange::Remove(name));
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let ((from_dir, from_name), (to_dir, to_name)) = (split(from), split(to));
        let mut disk = self.change()?;
        // Like rename(2): a missing target directory fails before the source is touched.
        disk.dir_mut(&to_dir)?;
        let source = disk.dir_mut(&from_dir)?;
        let file = source
            .current
            .remove(&from_name)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such file"))?;
        source.unsynced.push(DirChange::Remove(from_name));
        let target = disk.dir_mut(&to_dir)?;
        target.current.insert(to_name.clone(), Arc::clone(&file));
        target.unsynced.push(DirChange::Put(to_name, file));
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.change()?.make_entries_durable(dir)
    }

    /// The whole simulated disk is one file system.
    fn sync_file_system(&self, _path: &Path) -> io::Result<()> {
        let mut disk = self.change()?;
        let dirs: Vec<PathBuf> = disk.dirs.keys().cloned().collect();
        for dir in &dirs {
            let files = disk.dir_mut(dir)?.current.values();
            files.for_each(|file| file.lock().expect("sim file lock").make_durable());
            disk.make_entries_durable(dir)?;
        }
        disk.flush_device();
        Ok(())
    }

    fn lock_exclusive(&self, _path: &Path) -> io::Result<Box<dyn Any + Send + Sync>> {
        Ok(Box::new(()))
    }

    /// One simulated device: a flush covers every file (as on ext4 and XFS).
    fn flush_domain(&self, _path: &Path) -> Option<u64> {
        Some(0)
    }

    fn free_bytes(&self, _path: &Path) -> u64 {
        let capacity = self.lock().capacity;
        match capacity {
            Some(capacity) => capacity.saturating_sub(self.stored_bytes()) as u64,
            None => u64::MAX,
        }
    }
}

impl VfsFile for SimFile {
    fn size(&self) -> io::Result<u64> {
        drop(self.vfs.operate()?);
        Ok(self.data.lock().expect("sim file lock").current.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        drop(self.vfs.change()?);
        let size = self.data.lock().expect("sim file lock").current.len();
        self.vfs.make_room((len as usize).saturating_sub(size))?;
        let mut data = self.data.lock().expect("sim file lock");
        data.current.resize(len as usize, 0);
        data.unsynced_len = Some(len as usize);
        data.allocated = data.allocated.min(len as usize);
        Ok(())
    }

    fn write_all_at(&self, position: u64, parts: &[&[u8]]) -> io::Result<()> {
        drop(self.vfs.change()?);
        let bytes = parts.concat();
        let size = self.data.lock().expect("sim file lock").current.len();
        self.vfs.make_room((position as usize + bytes.len()).saturating_sub(size))?;
        let mut data = self.data.lock().expect("sim file lock");
        write_into(&mut data.current, position as usize, &bytes);
        data.unsynced.push((position as usize, bytes));
        Ok(())
    }

    fn read_at(&self, position: u64, buffer: &mut [u8]) -> io::Result<usize> {
        drop(self.vfs.operate()?);
        let data = self.data.lock().expect("sim file lock");
        let start = (position as usize).min(data.current.len());
        let count = buffer.len().min(data.current.len() - start);
        buffer[..count].copy_from_slice(&data.current[start..start + count]);
        Ok(count)
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut disk = self.vfs.change()?;
        self.data.lock().expect("sim file lock").make_durable();
        disk.flush_device();
        Ok(())
    }

    fn write_back(&self, position: u64, len: u64) -> io::Result<()> {
        let mut disk = self.vfs.change()?;
        let mut data = self.data.lock().expect("sim file lock");
        let before = data.written_back;
        data.write_back(position as usize, (position + len) as usize);
        if data.written_back > before && !disk.written_back.iter().any(|file| Arc::ptr_eq(file, &self.data)) {
            disk.written_back.push(Arc::clone(&self.data));
        }
        Ok(())
    }

    /// The allocated prefix: every block of it was written and made durable.
    fn written_end(&self, from: u64) -> io::Result<u64> {
        drop(self.vfs.operate()?);
        let allocated = self.data.lock().expect("sim file lock").allocated as u64;
        Ok(allocated.max(from))
    }

    fn map(&self, len: u64) -> io::Result<Arc<dyn FileMap>> {
        drop(self.vfs.operate()?);
        Ok(Arc::new(SimMap { data: Arc::clone(&self.data), len: len as usize }))
    }
}

impl FileMap for SimMap {
    fn size(&self) -> usize {
        self.len
    }

    fn read(&self, start: usize, buffer: &mut [u8]) {
        assert!(start + buffer.len() <= self.len, "read outside the map");
        let data = self.data.lock().expect("sim file lock");
        let available = data.current.len().saturating_sub(start).min(buffer.len());
        buffer[..available].copy_from_slice(&data.current[start..start + available]);
        buffer[available..].fill(0);
    }

    fn slice(&self, start: usize, end: usize) -> Bytes {
        let mut copy = vec![0; end - start];
        self.read(start, &mut copy);
        Bytes::from(copy)
    }

    fn visit(&self, start: usize, end: usize, visit: &mut dyn FnMut(&[u8])) {
        visit(&self.slice(start, end));
    }
}

#[cfg(test)]
mod tests;
