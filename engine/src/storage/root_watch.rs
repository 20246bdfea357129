//! Whether the data directory the store was opened in is still there.
//!
//! A data directory removed under the running process (an `rm -rf` of it, a cleanup job)
//! takes writes into files that no restart will find, and creating a file in it fails:
//! an acid shard could not move to a new segment and stopped the process, and file mode
//! created a new stream in a directory it made anew, without a manifest, whose data the
//! next start would never read; so does one moved away, or replaced by another at its path.
//! [`RootWatch`] asks whether the configured path still names the directory opened at the
//! start (same device and inode: a removed directory's path names nothing, or a new one) at
//! most every [`CHECK_MS`]; once it does not, every shard refuses writes
//! (`NoRoom::DirectoryRemoved`: 503), one error is logged, and what the process holds open
//! goes on being served. It never comes back: a directory made again at that path is not
//! the one this process recovered. The disk modes' writers ask it before they accept an op
//! (`Persist::reserve`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::vfs::{Vfs, VfsFile};

/// Least time between two looks at the directory (clock milliseconds).
pub(crate) const CHECK_MS: u64 = 10;

/// The data directory of an open store, watched.
pub(crate) struct RootWatch {
    dir: PathBuf,
    /// The directory, open for as long as the store is (`None` where a directory cannot be
    /// opened: the simulated disk, where nothing removes one under the process).
    opened: Option<Arc<dyn VfsFile>>,
    lost: AtomicBool,
    checked_ms: AtomicU64,
}

impl RootWatch {
    /// Watches the existing directory `dir`.
    pub(crate) fn open(vfs: &dyn Vfs, dir: &Path) -> std::io::Result<RootWatch> {
        let opened = match vfs.open_read_only(dir) {
            Ok(file) => Some(file),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
            Err(error) => return Err(error),
        };
        Ok(RootWatch {
            dir: dir.to_path_buf(),
            opened,
            lost: AtomicBool::new(false),
            checked_ms: AtomicU64::new(0),
        })
    }

    /// Whether the directory was found removed, without looking again.
    pub(crate) fn known_lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }

    /// Whether the directory was removed, looking again when the last look is at least
    /// [`CHECK_MS`] from `now_ms` (either way: the clock is the system's, which may step
    /// back).
    pub(crate) fn lost(&self, now_ms: u64) -> bool {
        if self.lost.load(Ordering::Relaxed) {
            return true;
        }
        if now_ms.abs_diff(self.checked_ms.load(Ordering::Relaxed)) < CHECK_MS {
            return false;
        }
        self.checked_ms.store(now_ms, Ordering::Relaxed);
        self.look_now()
    }

    /// Whether the directory was removed, looking now.
    pub(crate) fn look_now(&self) -> bool {
        let Some(opened) = &self.opened else { return false };
        // An error asking counts as still there: only a directory known to be gone is lost.
        if !matches!(opened.is_at(&self.dir), Ok(false)) {
            return self.lost.load(Ordering::Relaxed);
        }
        if !self.lost.swap(true, Ordering::Relaxed) {
            tracing::error!(
                dir = %self.dir.display(),
                "the data directory was removed (or moved) under the server: writes are refused \
                 until it restarts; what it holds open is still served"
            );
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::vfs::real::{scratch, RealVfs};

    #[test]
    fn a_removed_directory_is_lost_for_good_and_looked_at_no_more_often_than_asked() {
        let root = scratch("root-watch");
        let vfs = RealVfs;
        let lock = vfs.lock_exclusive(&root.join("LOCK")).unwrap();
        let watch = RootWatch::open(&vfs, &root).unwrap();
        assert!(!watch.lost(1_000));
        drop(lock);
        std::fs::remove_file(root.join("LOCK")).unwrap();
        assert!(!watch.lost(1_000 + CHECK_MS), "a file removed from it is not the directory");
        std::fs::remove_dir_all(&root).unwrap();
        assert!(!watch.lost(1_000 + 2 * CHECK_MS - 1), "not looked at again yet");
        assert!(watch.lost(1_000 + 2 * CHECK_MS));
        vfs.create_dir_all(&root).unwrap();
        std::fs::write(root.join("LOCK"), b"").unwrap();
        assert!(watch.lost(1_000 + 10 * CHECK_MS), "a directory made again is not the store");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_directory_moved_away_or_replaced_is_lost() {
        let vfs = RealVfs;
        for replaced in [false, true] {
            let root = scratch("root-watch-moved");
            let watch = RootWatch::open(&vfs, &root).unwrap();
            assert!(!watch.look_now());
            let moved = root.with_extension("moved");
            std::fs::rename(&root, &moved).unwrap();
            if replaced {
                vfs.create_dir_all(&root).unwrap();
            }
            assert!(watch.look_now(), "replaced: {replaced}");
            std::fs::remove_dir_all(&moved).unwrap();
            let _ = std::fs::remove_dir_all(&root);
        }
    }
}
