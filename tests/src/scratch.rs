//! Small file systems of their own for tests that need a disk to fail for real: a tmpfs,
//! and an ext4 image on a loop device (the file system acid is tuned for). Mounting needs
//! root (as the tests run here and in CI), `mkfs.ext4` and a loop device; where one is
//! missing a constructor returns `None`, and the test says so with [`skipped`].

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::data_dir::DataDir;
use crate::Server;

/// Size of the file system a test gets.
pub const FILE_SYSTEM_BYTES: u64 = 48 << 20;

/// A small file system mounted on a temporary directory, unmounted when dropped (before the
/// image it may live in is removed).
pub struct Scratch {
    dir: DataDir,
    /// The directory holding an ext4 image, and the image.
    image: Option<(DataDir, PathBuf)>,
}

impl Scratch {
    pub fn tmpfs() -> Option<Scratch> {
        let dir = DataDir::new("tmpfs");
        let size = format!("size={FILE_SYSTEM_BYTES}");
        quietly(Command::new("mount").args(["-t", "tmpfs", "-o", &size, "tmpfs"]).arg(dir.path()))
            .then_some(Scratch { dir, image: None })
    }

    /// ext4 with 4 KiB blocks (what `mkfs` gives a disk of any real size) and its default
    /// journal, in an image file mounted through a loop device with `options` (`-o`).
    pub fn ext4(options: &str) -> Option<Scratch> {
        let image_dir = DataDir::new("ext4-image");
        let image = image_dir.path().join("fs.img");
        std::fs::File::create(&image).ok()?.set_len(FILE_SYSTEM_BYTES).ok()?;
        let dir = DataDir::new("ext4");
        let made =
            quietly(Command::new(system_tool("mkfs.ext4")).args(["-q", "-F", "-b", "4096"]).arg(&image));
        let options = format!("loop,{options}");
        let mounted =
            made && quietly(Command::new("mount").args(["-o", &options]).arg(&image).arg(dir.path()));
        mounted.then_some(Scratch { dir, image: Some((image_dir, image)) })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The ext4 image's loop device as `/sys/fs/ext4` names it (`loop3`), if it is one.
    pub fn ext4_device(&self) -> Option<String> {
        let output = Command::new("findmnt").args(["-n", "-o", "SOURCE"]).arg(self.path()).output().ok()?;
        let source = String::from_utf8(output.stdout).ok()?;
        Some(Path::new(source.trim()).file_name()?.to_string_lossy().into_owned())
    }

    /// Unmounts the ext4 image, repairs it (`e2fsck -fy`: an error the test caused leaves it
    /// marked as needing a check) and mounts it again with `options`; whether all of it did.
    pub fn ext4_remount_repaired(&self, options: &str) -> bool {
        let Some((_, image)) = &self.image else { return false };
        let unmounted = quietly(Command::new("umount").arg(self.path()));
        // e2fsck exits 1 when it repaired something: that is success here.
        let checked = Command::new(system_tool("e2fsck"))
            .arg("-fy")
            .arg(image)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.code().is_some_and(|code| code <= 1));
        let options = format!("loop,{options}");
        unmounted
            && checked
            && quietly(Command::new("mount").args(["-o", &options]).arg(image).arg(self.path()))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = quietly(Command::new("umount").arg(self.dir.path()));
    }
}

/// A `mode` server with its data in `data` on a scratch file system, sized for one: four
/// shards, 1 MiB segments, streams of at most 256 KiB, a memory budget that is never what
/// refuses a write.
pub fn start_server(mode: &str, data: &Path) -> Server {
    let data_dir = data.display().to_string();
    Server::start(&[
        ("DS_STORAGE__MODE", mode),
        ("DS_STORAGE__DATA_DIR", &data_dir),
        ("DS_STORAGE__ACID_SHARD_COUNT", "4"),
        ("DS_STORAGE__SEGMENT_BYTES", "1048576"),
        ("DS_LIMITS__MAX_STREAM_BYTES", "262144"),
        ("DS_LIMITS__MAX_MEMORY_BYTES", "1073741824"),
    ])
}

/// Written past the test harness's capture, so the skip shows in the summary.
pub fn skipped(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

/// `name` where a user's PATH may not reach it (Debian keeps mkfs in /usr/sbin), else `name`.
fn system_tool(name: &str) -> PathBuf {
    let sbin = ["/usr/sbin", "/sbin"].iter().map(|dir| Path::new(dir).join(name)).find(|path| path.exists());
    sbin.unwrap_or_else(|| PathBuf::from(name))
}

/// Runs `command` with its output dropped; whether it ran and succeeded.
fn quietly(command: &mut Command) -> bool {
    let status = command.stdout(Stdio::null()).stderr(Stdio::null()).status();
    status.is_ok_and(|status| status.success())
}
