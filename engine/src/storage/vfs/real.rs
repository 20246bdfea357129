//! The real file system: `std::fs`, positional vectored writes, `fdatasync`, memmap2 maps
//! and fs2 locks.

use std::any::Any;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use memmap2::{Mmap, MmapOptions};

use super::fault_guard::{self, Guard};
use super::{FileMap, Vfs, VfsFile};

/// Most buffers one `pwritev` call takes (Linux's `IOV_MAX`).
const IOV_MAX: usize = 1024;

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RealVfs;

struct RealFile {
    file: File,
}

struct RealMap {
    map: Arc<GuardedMap>,
    /// The whole map as one shared `Bytes`: a slice of it costs a reference count, not an
    /// allocation (a catch-up read hands out one slice per record).
    whole: Bytes,
}

impl Vfs for RealVfs {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir_all(path)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            names.push(entry?.file_name().to_string_lossy().into_owned());
        }
        Ok(names)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Arc::new(RealFile { file }))
    }

    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>> {
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(path)?;
        Ok(Arc::new(RealFile { file }))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn free_bytes(&self, path: &Path) -> u64 {
        use std::os::unix::ffi::OsStrExt;
        let Ok(path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
            return u64::MAX;
        };
        let mut stats = std::mem::MaybeUninit::<libc::statvfs>::uninit();
        // SAFETY: `path` is a NUL-terminated string and `stats` a buffer of the right type,
        // which statvfs fills when it returns 0 (and only then is it read).
        if unsafe { libc::statvfs(path.as_ptr(), stats.as_mut_ptr()) } != 0 {
            return u64::MAX;
        }
        // SAFETY: filled by the successful call above.
        let stats = unsafe { stats.assume_init() };
        stats.f_bavail.saturating_mul(stats.f_frsize)
    }

    fn flush_domain(&self, path: &Path) -> Option<u64> {
        super::domain::flush_domain(path)
    }

    fn inode_table_span(&self, path: &Path) -> Option<u64> {
        super::domain::inode_table_span(path)
    }

    fn inode_number(&self, path: &Path) -> Option<u64> {
        std::fs::symlink_metadata(path).ok().map(|metadata| metadata.ino())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn sync_file_system(&self, path: &Path) -> io::Result<()> {
        let dir = File::open(path)?;
        // SAFETY: `syncfs` takes a descriptor, which `dir` keeps open for the call.
        match unsafe { libc::syncfs(dir.as_raw_fd()) } {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    }

    fn lock_exclusive(&self, path: &Path) -> io::Result<Box<dyn Any + Send + Sync>> {
        // The directory first: with its file deleted under a running server (a "stale lock"
        // cleared by hand), a second server would lock a new file of that name.
        let dir = File::open(parent_dir(path))?;
        fs2::FileExt::try_lock_exclusive(&dir)?;
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        fs2::FileExt::try_lock_exclusive(&file)?;
        Ok(Box::new((dir, file)))
    }

    fn open_read_only(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>> {
        Ok(Arc::new(RealFile { file: File::open(path)? }))
    }

    fn lock_shared(&self, path: &Path) -> io::Result<Box<dyn Any + Send + Sync>> {
        let dir = File::open(parent_dir(path))?;
        fs2::FileExt::try_lock_shared(&dir)?;
        let file = File::open(path)?;
        fs2::FileExt::try_lock_shared(&file)?;
        Ok(Box::new((dir, file)))
    }
}

/// The directory holding `path` (the current one for a bare name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

impl VfsFile for RealFile {
    fn size(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn linked(&self) -> io::Result<bool> {
        // A plain fstat: `File::metadata` asks statx for more than the link count.
        let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstat writes a whole `stat` into the buffer when it returns 0.
        if unsafe { libc::fstat(self.file.as_raw_fd(), stat.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fstat returned 0, so the buffer is initialized.
        Ok(unsafe { stat.assume_init() }.st_nlink > 0)
    }

    fn is_at(&self, path: &Path) -> io::Result<bool> {
        let named = match std::fs::metadata(path) {
            Ok(named) => named,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(error) => return Err(error),
        };
        let open = self.file.metadata()?;
        Ok((named.dev(), named.ino()) == (open.dev(), open.ino()))
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn write_all_at(&self, position: u64, parts: &[&[u8]]) -> io::Result<()> {
        let mut slices: Vec<&[u8]> = parts.iter().copied().filter(|p| !p.is_empty()).collect();
        let mut position = position;
        let mut first = 0;
        while first < slices.len() {
            let batch = &slices[first..(first + IOV_MAX).min(slices.len())];
            let iovecs: Vec<libc::iovec> = batch
                .iter()
                .map(|s| libc::iovec { iov_base: s.as_ptr() as *mut libc::c_void, iov_len: s.len() })
                .collect();
            // SAFETY: the iovecs point into live slices for the duration of the call.
            let written = unsafe {
                libc::pwritev(
                    self.file.as_raw_fd(),
                    iovecs.as_ptr(),
                    iovecs.len() as libc::c_int,
                    position as libc::off_t,
                )
            };
            if written < 0 {
                let error = io::Error::last_os_error();
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(error);
            }
            if written == 0 {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "pwritev wrote nothing"));
            }
            position += written as u64;
            let mut remaining = written as usize;
            while remaining > 0 {
                let head = slices[first].len();
                if remaining >= head {
                    remaining -= head;
                    first += 1;
                } else {
                    slices[first] = &slices[first][remaining..];
                    remaining = 0;
                }
            }
        }
        Ok(())
    }

    fn read_at(&self, position: u64, buffer: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.file.read_at(buffer, position) {
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// `sync_file_range` waiting for the write-out; it reports the file's write-back errors.
    fn write_back(&self, position: u64, len: u64) -> io::Result<()> {
        let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
            | libc::SYNC_FILE_RANGE_WRITE
            | libc::SYNC_FILE_RANGE_WAIT_AFTER;
        self.sync_file_range(position, len, flags)
    }

    fn start_write_back(&self, position: u64, len: u64) -> io::Result<()> {
        self.sync_file_range(position, len, libc::SYNC_FILE_RANGE_WRITE)
    }

    /// `lseek(SEEK_HOLE)`; `from` where the file system cannot tell.
    fn written_end(&self, from: u64) -> io::Result<u64> {
        // SAFETY: plain syscall on an owned descriptor (its offset is never used: all I/O
        // is positional).
        let hole = unsafe { libc::lseek(self.file.as_raw_fd(), from as libc::off_t, libc::SEEK_HOLE) };
        Ok(u64::try_from(hole).map_or(from, |hole| hole.max(from)))
    }

    fn map(&self, len: u64) -> io::Result<Arc<dyn FileMap>> {
        let len = usize::try_from(len).map_err(|_| io::Error::other("map too large"))?;
        // SAFETY: the engine never truncates or shrinks a file while it is mapped, and maps
        // are read-only. A page that still cannot be read (the file cut short by someone
        // else, a device error) faults: the guard turns it into zeros, which no record's
        // checksum passes, instead of SIGBUS killing the process.
        let map = unsafe { MmapOptions::new().len(len).map(&self.file)? };
        let guard = fault_guard::guard(map.as_ptr(), map.len());
        let map = Arc::new(GuardedMap { guard, map });
        let whole = Bytes::from_owner(MapRange { map: Arc::clone(&map), start: 0, end: len });
        Ok(Arc::new(RealMap { map, whole }))
    }
}

impl RealFile {
    fn sync_file_range(&self, position: u64, len: u64, flags: libc::c_uint) -> io::Result<()> {
        loop {
            // SAFETY: plain syscall on an owned descriptor.
            let result = unsafe {
                libc::sync_file_range(
                    self.file.as_raw_fd(),
                    position as libc::off64_t,
                    len as libc::off64_t,
                    flags,
                )
            };
            if result == 0 {
                return Ok(());
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }
}

/// A map and its fault guard (released first: nothing reads the map by then).
struct GuardedMap {
    guard: Guard,
    map: Mmap,
}

impl std::ops::Deref for GuardedMap {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.map
    }
}

/// A shared range of a map, kept alive by the `Bytes` that points into it.
struct MapRange {
    map: Arc<GuardedMap>,
    start: usize,
    end: usize,
}

impl AsRef<[u8]> for MapRange {
    fn as_ref(&self) -> &[u8] {
        &self.map[self.start..self.end]
    }
}

impl FileMap for RealMap {
    fn size(&self) -> usize {
        self.map.len()
    }

    fn faulted(&self) -> bool {
        self.map.guard.faulted()
    }

    fn read(&self, start: usize, buffer: &mut [u8]) {
        buffer.copy_from_slice(&self.map[start..start + buffer.len()]);
    }

    fn slice(&self, start: usize, end: usize) -> Bytes {
        assert!(start <= end && end <= self.map.len(), "slice outside the map");
        self.whole.slice(start..end)
    }

    fn visit(&self, start: usize, end: usize, visit: &mut dyn FnMut(&[u8])) {
        visit(&self.map[start..end]);
    }
}

/// An empty directory of this test process called `name` (unit tests on the real disk
/// remove it when done).
#[cfg(test)]
pub(crate) fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ds-vfs-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectored_positional_writes_show_through_a_map() {
        let dir = scratch("pwritev");
        let vfs = RealVfs;
        let file = vfs.create_new(&dir.join("f")).unwrap();
        file.set_len(64).unwrap();
        let map = file.map(64).unwrap();
        let many: Vec<Vec<u8>> = (0..2000).map(|i| vec![(i % 251) as u8; 1]).collect();
        let parts: Vec<&[u8]> = many.iter().map(Vec::as_slice).collect();
        file.set_len(4096).unwrap();
        file.write_all_at(10, &[b"abc", b"", b"de"]).unwrap();
        assert_eq!(&map.slice(10, 15)[..], b"abcde", "a map sees later writes");
        file.write_all_at(1000, &parts).unwrap();
        let mut back = vec![0; 2000];
        super::super::read_exact_at(file.as_ref(), 1000, &mut back).unwrap();
        assert_eq!(back, many.concat(), "more parts than one pwritev takes");
        file.sync_data().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_second_lock_is_refused() {
        let dir = scratch("lock");
        let vfs = RealVfs;
        let guard = vfs.lock_exclusive(&dir.join("LOCK")).unwrap();
        assert!(vfs.lock_exclusive(&dir.join("LOCK")).is_err());
        std::fs::remove_file(dir.join("LOCK")).unwrap();
        assert!(vfs.lock_exclusive(&dir.join("LOCK")).is_err(), "the directory stays locked");
        assert!(vfs.lock_shared(&dir.join("LOCK")).is_err(), "to readers too");
        drop(guard);
        assert!(vfs.lock_exclusive(&dir.join("LOCK")).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
