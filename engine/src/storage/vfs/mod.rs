//! The file system as the disk modes see it: a small trait, a real implementation, and a
//! simulated disk for crash tests.
//!
//! Every byte the disk modes read or write goes through [`Vfs`] and [`VfsFile`], so the
//! crash simulation can put a disk under the engine that loses or tears any write an fsync
//! did not cover. Reads of stored data go through [`FileMap`]: a read-only view that sees
//! later writes (an mmap on the real disk), handing out `Bytes` without copying.
//!
//! - `real`: `std::fs`, `pwritev`, `fdatasync`, memmap2, fs2 locks.
//! - `sim`: an in-memory disk with an explicit durable state and a seeded crash.
//! - `read_only`: any of them, refusing every change (offline inspection).
//! - `domain`: which real file systems let one device flush cover every file, and how
//!   their inode tables are laid out.
//! - `fault_guard`: a page of a real map that cannot be read reads as zeros (which no
//!   checksum passes) instead of killing the process with SIGBUS.

mod domain;
pub(crate) mod fault_guard;
pub(crate) mod read_only;
pub(crate) mod real;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod sim;

use std::any::Any;
use std::io;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

/// A file system.
pub trait Vfs: Send + Sync + 'static {
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Names of the entries of `dir` (files and directories), in no particular order.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    fn exists(&self, path: &Path) -> bool;
    /// Opens an existing file for reading and writing.
    fn open(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>>;
    /// Creates a file that must not exist yet.
    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes the creations, renames and removals of entries of `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Makes everything written on the file system that holds `path` durable, every file's
    /// data and every directory's entries (`syncfs`): the clean stop of a mode that syncs
    /// nothing as it goes.
    fn sync_file_system(&self, path: &Path) -> io::Result<()>;
    /// Takes an exclusive lock on `path` (created if needed) and on the directory holding
    /// it until the guard is dropped: the directory's lock holds when the file is deleted.
    fn lock_exclusive(&self, path: &Path) -> io::Result<Box<dyn Any + Send + Sync>>;
    /// Opens an existing file for reading only.
    fn open_read_only(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>> {
        self.open(path)
    }
    /// Takes a shared lock on the existing file `path` and on the directory holding it
    /// (refused while an exclusive one is held) until the guard is dropped.
    fn lock_shared(&self, _path: &Path) -> io::Result<Box<dyn Any + Send + Sync>> {
        Ok(Box::new(()))
    }
    /// Bytes still free for this process on the file system that holds `path` (`u64::MAX`
    /// when it cannot tell).
    fn free_bytes(&self, _path: &Path) -> u64 {
        u64::MAX
    }
    /// An id of the file system that holds `path` when one device flush there makes durable
    /// every file's written-back overwrites of blocks already written (ext4 without
    /// `data=journal`, XFS); `None` where each file needs its own `sync_data`
    /// (`storage::flush`).
    fn flush_domain(&self, _path: &Path) -> Option<u64> {
        None
    }
    /// On ext4 (where, without a journal, a flush also writes the inode-table block of the
    /// flushed file when another inode in it changed), the most inodes one such block can
    /// hold under `path`; `None` elsewhere, or where it cannot be told
    /// (`storage::flush_file`).
    fn inode_table_span(&self, _path: &Path) -> Option<u64> {
        None
    }
    /// The inode number of `path` (`None` where files have none, or it cannot be read).
    fn inode_number(&self, _path: &Path) -> Option<u64> {
        None
    }
}

/// Whether `error` says the disk (or the user's quota) is full.
pub(crate) fn is_out_of_space(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::StorageFull
        || matches!(error.raw_os_error(), Some(code) if code == libc::ENOSPC || code == libc::EDQUOT)
}

/// An open file.
pub trait VfsFile: Send + Sync {
    fn size(&self) -> io::Result<u64>;
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Writes every part, in order, starting at `position`.
    fn write_all_at(&self, position: u64, parts: &[&[u8]]) -> io::Result<()>;
    /// Reads into `buffer` from `position`; returns how many bytes were read (short at the end).
    fn read_at(&self, position: u64, buffer: &mut [u8]) -> io::Result<usize>;
    /// Makes the file's written data durable (fdatasync), ending in a device cache flush.
    fn sync_data(&self) -> io::Result<()>;
    /// Whether the file still has a name in a directory: one deleted under the process takes
    /// writes and syncs that no restart will find. By default (the simulated disk) `true`.
    fn linked(&self) -> io::Result<bool> {
        Ok(true)
    }
    /// Whether `path` still names this file (not moved away, not replaced by another one
    /// there). By default (the simulated disk) `true`.
    fn is_at(&self, _path: &Path) -> io::Result<bool> {
        Ok(true)
    }
    /// Sends the written data of `len` bytes at `position` to the device and waits for it,
    /// without a cache flush (`sync_file_range`): durable only once a later `sync_data` of
    /// any file on the same device (`Vfs::flush_domain`) returns. By default a `sync_data`.
    fn write_back(&self, _position: u64, _len: u64) -> io::Result<()> {
        self.sync_data()
    }
    /// Starts sending the written data of `len` bytes at `position` to the device without
    /// waiting (a later `write_back` of the range waits for it). By default nothing.
    fn start_write_back(&self, _position: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
    /// Where the run of durably written blocks that goes on from `from` ends (`from` itself
    /// in a hole): writes before it need no new block, so a device flush alone makes them
    /// durable. Call it after a `sync_data`. By default `from` (nothing assumed written).
    fn written_end(&self, from: u64) -> io::Result<u64> {
        Ok(from)
    }
    /// A read-only view of the first `len` bytes that also shows later writes.
    fn map(&self, len: u64) -> io::Result<Arc<dyn FileMap>>;
}

/// A read-only view of a file's first bytes.
pub trait FileMap: Send + Sync {
    fn size(&self) -> usize;
    /// Whether a page of the map could not be read and shows zeros instead
    /// (`fault_guard`): from then on the map may differ from the file.
    fn faulted(&self) -> bool {
        false
    }
    /// Copies `buffer.len()` bytes from `start` (panics past the end).
    fn read(&self, start: usize, buffer: &mut [u8]);
    /// Shares bytes `start..end` (without copying where the platform allows).
    fn slice(&self, start: usize, end: usize) -> Bytes;
    /// Lends bytes `start..end` to `visit` (no copy, no allocation where the platform
    /// allows; panics past the end).
    fn visit(&self, start: usize, end: usize, visit: &mut dyn FnMut(&[u8]));
}

/// Reads exactly `buffer.len()` bytes at `position`, failing on a short read.
pub(crate) fn read_exact_at(file: &dyn VfsFile, position: u64, buffer: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buffer.len() {
        let read = file.read_at(position + done as u64, &mut buffer[done..])?;
        if read == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "short read"));
        }
        done += read;
    }
    Ok(())
}

/// Writes a file under a temporary name, syncs it, renames it into place and syncs the
/// directory: after a crash the file is either the old one or complete.
pub(crate) fn write_file_durably(vfs: &dyn Vfs, path: &Path, contents: &[u8]) -> io::Result<()> {
    let directory = path.parent().unwrap_or(Path::new("."));
    let temporary = path.with_extension("tmp");
    if vfs.exists(&temporary) {
        vfs.remove_file(&temporary)?;
    }
    let file = vfs.create_new(&temporary)?;
    file.write_all_at(0, &[contents])?;
    file.sync_data()?;
    drop(file);
    vfs.rename(&temporary, path)?;
    vfs.sync_dir(directory)
}

/// Creates directory `path` and any missing parents, and makes each new entry durable: the
/// directory holding each created one is synced (deepest first) before this returns, so a
/// power cut cannot take a directory away with the files acknowledged in it.
pub(crate) fn create_dir_durably(vfs: &dyn Vfs, path: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut current = Some(path);
    while let Some(dir) = current.filter(|dir| !dir.as_os_str().is_empty() && !vfs.exists(dir)) {
        missing.push(dir);
        current = dir.parent();
    }
    if missing.is_empty() {
        return Ok(());
    }
    vfs.create_dir_all(path)?;
    for dir in missing {
        // The root has no parent; a relative name's parent is the working directory.
        let holder = match dir.parent() {
            None => continue,
            Some(parent) if parent.as_os_str().is_empty() => Path::new("."),
            Some(parent) => parent,
        };
        vfs.sync_dir(holder)?;
    }
    Ok(())
}

/// Reads a whole (small) file.
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))] // (the `testing` front door exports it)
pub fn read_file(vfs: &dyn Vfs, path: &Path) -> io::Result<Vec<u8>> {
    let file = vfs.open(path)?;
    let len = usize::try_from(file.size()?).map_err(|_| io::Error::other("file too large"))?;
    let mut contents = vec![0; len];
    read_exact_at(file.as_ref(), 0, &mut contents)?;
    Ok(contents)
}
