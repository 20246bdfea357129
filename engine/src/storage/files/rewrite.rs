//! A stream's file deleted under the running process, written again from the open file.
//!
//! The writer still holds the deleted file open and every byte of it is readable, but its
//! name is gone: appends to it would be acknowledged and lost at the next start. Rather than
//! refuse the stream for good (damaged), the writer makes a new file under the same name and
//! copies the stream into it ([`rewrite`]) before the stream's next append, so the stream
//! goes on whole, positions and all. A stream longer than [`REWRITE_BYTES_MAX`] is not
//! copied (it would hold its shard's other streams too long): it is damaged as before.

use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::storage::vfs::{read_exact_at, Vfs, VfsFile};

/// Longest stream written again on the shard thread.
pub(super) const REWRITE_BYTES_MAX: u64 = 256 << 20;
/// Bytes copied per read and write.
const CHUNK_BYTES: u64 = 1 << 20;

/// A new file at `path` holding the first `end` bytes of `old`, made durable with its
/// directory entry when `durable`; nothing is left at `path` when it fails.
pub(super) fn rewrite(
    vfs: &dyn Vfs,
    path: &Path,
    old: &dyn VfsFile,
    end: u64,
    durable: bool,
) -> io::Result<Arc<dyn VfsFile>> {
    assert!(end <= REWRITE_BYTES_MAX, "a stream of at most REWRITE_BYTES_MAX is written again");
    let new = vfs.create_new(path)?;
    let written = copy(old, new.as_ref(), end).and_then(|()| match durable {
        true => {
            new.sync_data()?;
            vfs.sync_dir(path.parent().unwrap_or(Path::new(".")))
        }
        false => Ok(()),
    });
    if let Err(error) = written {
        let _ = vfs.remove_file(path);
        return Err(error);
    }
    Ok(new)
}

/// Copies bytes `0..end` of `from` to the same positions of `to`.
fn copy(from: &dyn VfsFile, to: &dyn VfsFile, end: u64) -> io::Result<()> {
    let mut buffer = vec![0u8; CHUNK_BYTES.min(end) as usize];
    let mut at = 0;
    while at < end {
        let len = (end - at).min(CHUNK_BYTES) as usize;
        read_exact_at(from, at, &mut buffer[..len])?;
        to.write_all_at(at, &[&buffer[..len]])?;
        at += len as u64;
    }
    debug_assert_eq!(to.size().ok(), Some(end), "the copy ends where the stream does");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::vfs::real::{scratch, RealVfs};

    #[test]
    fn a_deleted_file_is_written_again_byte_for_byte() {
        let dir = scratch("rewrite");
        let vfs = RealVfs;
        let path = dir.join("s.log");
        let old = vfs.create_new(&path).unwrap();
        let bytes: Vec<u8> = (0..(CHUNK_BYTES as usize * 2 + 77)).map(|i| (i % 251) as u8).collect();
        old.write_all_at(0, &[&bytes]).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(!old.linked().unwrap());
        let new = rewrite(&vfs, &path, old.as_ref(), bytes.len() as u64, true).unwrap();
        assert!(new.linked().unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
        assert!(rewrite(&vfs, &path, old.as_ref(), 10, false).is_err(), "never over a file that is there");
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "which is left as it was");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
