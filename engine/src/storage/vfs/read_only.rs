//! A file system that refuses every change: what offline inspection reads through, so it
//! cannot alter a data directory even by mistake.

use std::any::Any;
use std::io;
use std::path::Path;
use std::sync::Arc;

use super::{Vfs, VfsFile};

/// `inner`, read-only: files open for reading, and creating, removing, renaming, syncing
/// directories or taking an exclusive lock fail.
pub(crate) struct ReadOnly(pub Arc<dyn Vfs>);

fn refused() -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, "read-only inspection changes nothing")
}

impl Vfs for ReadOnly {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        if self.0.exists(path) {
            Ok(())
        } else {
            Err(refused())
        }
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.0.list(dir)
    }

    fn exists(&self, path: &Path) -> bool {
        self.0.exists(path)
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>> {
        self.0.open_read_only(path)
    }

    fn create_new(&self, _path: &Path) -> io::Result<Arc<dyn VfsFile>> {
        Err(refused())
    }

    fn remove_file(&self, _path: &Path) -> io::Result<()> {
        Err(refused())
    }

    fn rename(&self, _from: &Path, _to: &Path) -> io::Result<()> {
        Err(refused())
    }

    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        Err(refused())
    }

    fn sync_file_system(&self, _path: &Path) -> io::Result<()> {
        Err(refused())
    }

    fn lock_exclusive(&self, _path: &Path) -> io::Result<Box<dyn Any + Send + Sync>> {
        Err(refused())
    }

    fn open_read_only(&self, path: &Path) -> io::Result<Arc<dyn VfsFile>> {
        self.0.open_read_only(path)
    }

    fn lock_shared(&self, path: &Path) -> io::Result<Box<dyn Any + Send + Sync>> {
        self.0.lock_shared(path)
    }
}
