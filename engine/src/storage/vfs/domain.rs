//! Which real file systems let one device flush make every file's written-back overwrites
//! durable (`storage::flush` shares flushes only there).
//!
//! On ext4 and XFS, `fdatasync` of any file ends in a cache flush of the device under the
//! file system, and an overwrite of blocks already written and synced changes no metadata;
//! so after `sync_file_range` has written a range back, another file's `fdatasync` on the
//! same device makes it durable. Not so with ext4's `data=journal` (data goes through the
//! journal, which `sync_file_range` does not commit), nor on file systems whose fsync does
//! more or other work per file (btrfs, overlayfs, network file systems, tmpfs): each file
//! is then flushed by itself. The answer is the device number, so only files on the same
//! device share a flush.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

const EXT4_SUPER_MAGIC: i64 = 0xEF53;
const XFS_SUPER_MAGIC: i64 = 0x5846_5342;

/// The smallest inode ext4 makes (bytes): a block of its inode table holds at most its
/// block size over this many inodes.
const EXT4_INODE_BYTES_MIN: u64 = 128;

/// The device of `path` when it is on ext4 (not `data=journal`) or XFS.
pub(super) fn flush_domain(path: &Path) -> Option<u64> {
    let device = std::fs::metadata(path).ok()?.dev();
    match file_system_magic(path)?.0 {
        XFS_SUPER_MAGIC => Some(device),
        EXT4_SUPER_MAGIC => {
            let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
            (!journals_data(&mountinfo, device)?).then_some(device)
        }
        _ => None,
    }
}

/// On ext4, the most inodes one block of the inode table under `path` can hold (its block
/// size over the smallest inode); `None` on other file systems.
pub(super) fn inode_table_span(path: &Path) -> Option<u64> {
    match file_system_magic(path)? {
        (EXT4_SUPER_MAGIC, block_bytes) if block_bytes >= EXT4_INODE_BYTES_MIN => {
            Some(block_bytes / EXT4_INODE_BYTES_MIN)
        }
        _ => None,
    }
}

/// The file system's magic number and block size.
fn file_system_magic(path: &Path) -> Option<(i64, u64)> {
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut stats = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `path` is NUL-terminated and `stats` a buffer of the right type, read only
    // after statfs filled it (returned 0).
    if unsafe { libc::statfs(path.as_ptr(), stats.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: filled by the successful call above.
    let stats = unsafe { stats.assume_init() };
    // `f_type`'s and `f_bsize`'s widths differ between targets.
    #[allow(clippy::unnecessary_cast)]
    Some((stats.f_type as i64, stats.f_bsize as u64))
}

/// Whether the file system on `device` is mounted with `data=journal`, from the text of
/// `/proc/self/mountinfo` (`None` when no line names the device).
fn journals_data(mountinfo: &str, device: u64) -> Option<bool> {
    let wanted = format!("{}:{}", libc::major(device), libc::minor(device));
    let line = mountinfo.lines().find(|line| line.split(' ').nth(2) == Some(wanted.as_str()))?;
    let (_, super_options) = line.split_once(" - ")?;
    let options = super_options.split(' ').nth(2).unwrap_or("");
    Some(options.split(',').any(|option| option == "data=journal"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
40 27 254:1 / /data rw,relatime - ext4 /dev/vdb rw,data=journal
";

    #[test]
    fn data_journal_mounts_are_found_by_device() {
        assert_eq!(journals_data(MOUNTINFO, libc::makedev(254, 0)), Some(false));
        assert_eq!(journals_data(MOUNTINFO, libc::makedev(254, 1)), Some(true));
        assert_eq!(journals_data(MOUNTINFO, libc::makedev(8, 1)), None);
    }

    #[test]
    fn a_missing_path_has_no_domain() {
        assert_eq!(flush_domain(Path::new("/no/such/path/anywhere")), None);
    }
}
