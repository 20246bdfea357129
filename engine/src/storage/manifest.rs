//! The manifest: what a data directory holds, so it is never opened the wrong way.
//!
//! Written durably at first start (`MANIFEST`, text, one `key=value` per line, the last a
//! crc32 of the others); every later start compares it with its configuration and refuses a
//! different storage mode or shard count with a message that says what the directory holds.

use std::io;
use std::path::Path;

use crate::storage::vfs::{read_file, write_file_durably, Vfs};
use crate::storage::StorageMode;

pub const MANIFEST_NAME: &str = "MANIFEST";
/// Version of the on-disk format this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;
/// The name hash that places streams on shards.
pub const HASH_NAME: &str = "xxh3-64";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    pub format: u32,
    pub mode: StorageMode,
    pub shards: u32,
    pub hash: String,
}

impl Manifest {
    pub fn new(mode: StorageMode, shards: u32) -> Manifest {
        Manifest { format: FORMAT_VERSION, mode, shards, hash: HASH_NAME.to_string() }
    }

    pub fn encode(&self) -> String {
        let fields = self.fields();
        let check = check_line(&fields);
        fields + &check
    }

    /// The manifest `text` holds, if it is exactly what [`Manifest::encode`] writes: its
    /// fields in order, then their check line — or no check line, as a manifest restored by
    /// hand (or written before manifests carried one) has. Anything else is refused, so a
    /// damaged manifest is never read as another configuration.
    pub fn decode(text: &str) -> Option<Manifest> {
        let field = |key: &str| text.lines().find_map(|line| line.strip_prefix(key)?.strip_prefix('='));
        let hash = field("hash").filter(|hash| is_name(hash))?;
        let manifest = Manifest {
            format: field("format")?.parse().ok()?,
            mode: StorageMode::parse(field("mode")?)?,
            shards: field("shards")?.parse().ok()?,
            hash: hash.to_string(),
        };
        let fields = manifest.fields();
        match text.strip_prefix(fields.as_str())? {
            "" => Some(manifest),
            rest if rest == check_line(&fields) => Some(manifest),
            _ => None,
        }
    }

    /// The field lines, as written.
    fn fields(&self) -> String {
        format!("format={}\nmode={}\nshards={}\nhash={}\n", self.format, self.mode, self.shards, self.hash)
    }

    /// Reads the manifest of `dir`; refuses one of another format or hash.
    pub fn read(vfs: &dyn Vfs, dir: &Path) -> io::Result<Manifest> {
        let path = dir.join(MANIFEST_NAME);
        let bytes = read_file(vfs, &path)?;
        let found = std::str::from_utf8(&bytes).ok().and_then(Manifest::decode).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, format!("{} is not a ds manifest", path.display()))
        })?;
        if found.format != FORMAT_VERSION || found.hash != HASH_NAME {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} holds format {} with hash {}; this build reads format {FORMAT_VERSION} with {HASH_NAME}",
                    dir.display(),
                    found.format,
                    found.hash
                ),
            ));
        }
        Ok(found)
    }

    /// Reads the manifest of `dir`, writing `expected` if there is none yet; refuses a
    /// directory whose manifest differs, and one that holds data but no manifest (it is
    /// never guessed how such data was written).
    pub fn check_or_create(vfs: &dyn Vfs, dir: &Path, expected: &Manifest) -> io::Result<Manifest> {
        let path = dir.join(MANIFEST_NAME);
        if !vfs.exists(&path) {
            refuse_unlabelled_data(vfs, dir)?;
            write_file_durably(vfs, &path, expected.encode().as_bytes())?;
            return Ok(expected.clone());
        }
        let found = Manifest::read(vfs, dir)?;
        if !same_format(found.mode, expected.mode) || found.shards != expected.shards {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} holds a store of mode {} with {} shards; it cannot be opened as {} with {} shards \
                     (set DS_STORAGE__MODE and DS_STORAGE__ACID_SHARD_COUNT to match, or use another DS_STORAGE__DATA_DIR)",
                    dir.display(),
                    found.mode,
                    found.shards,
                    expected.mode,
                    expected.shards
                ),
            ));
        }
        Ok(found)
    }
}

/// Whether `text` could name a hash: letters, digits and dashes, so that a damaged line
/// break never joins the check line onto it unnoticed.
fn is_name(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The line that checks the field lines `fields`: their crc32.
fn check_line(fields: &str) -> String {
    format!("check={:08x}\n", crc32fast::hash(fields.as_bytes()))
}

/// Entries a new data directory may hold before its manifest is written: the lock, and a
/// manifest being written when a crash came.
const BEFORE_MANIFEST: [&str; 2] = ["LOCK", "MANIFEST.tmp"];

/// Refuses `dir` when it holds anything but what a new data directory holds.
fn refuse_unlabelled_data(vfs: &dyn Vfs, dir: &Path) -> io::Result<()> {
    let mut found: Vec<String> =
        vfs.list(dir)?.into_iter().filter(|n| !BEFORE_MANIFEST.contains(&n.as_str())).collect();
    if found.is_empty() {
        return Ok(());
    }
    found.sort();
    let shards = found.iter().filter(|n| n.starts_with("shard-")).count();
    let guess = match (shards, found.iter().any(|n| n == "streams")) {
        (0, true) => "it looks like file-durable or file-fast data (mode=file-durable)".to_string(),
        (shards, _) if shards > 0 => {
            format!("it looks like acid data with {shards} shards (mode=acid, shards={shards})")
        }
        _ => "what wrote it is not known".to_string(),
    };
    found.truncate(5);
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "{} holds data ({}) but no {MANIFEST_NAME}, so how it was written is not known; {guess}. \
             Restore its {MANIFEST_NAME} (lines format={FORMAT_VERSION}, mode=..., shards=..., hash={HASH_NAME}) \
             or point DS_STORAGE__DATA_DIR at an empty directory",
            dir.display(),
            found.join(", ")
        ),
    ))
}

/// file-fast and file-durable write the same files (they differ only in when they sync), so
/// a directory of one opens as the other.
fn same_format(found: StorageMode, expected: StorageMode) -> bool {
    let file_mode = |mode| matches!(mode, StorageMode::FileFast | StorageMode::FileDurable);
    found == expected || (file_mode(found) && file_mode(expected))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::vfs::sim::SimVfs;

    #[test]
    fn first_start_writes_it_and_later_starts_must_match() {
        let vfs = SimVfs::new();
        let dir = Path::new("/data");
        vfs.create_dir_all(dir).unwrap();
        let acid16 = Manifest::new(StorageMode::Acid, 16);
        assert_eq!(Manifest::check_or_create(&vfs, dir, &acid16).unwrap(), acid16);
        assert!(Manifest::check_or_create(&vfs, dir, &acid16).is_ok());
        let error = Manifest::check_or_create(&vfs, dir, &Manifest::new(StorageMode::Acid, 8)).unwrap_err();
        assert!(error.to_string().contains("16 shards"), "{error}");
        assert!(Manifest::check_or_create(&vfs, dir, &Manifest::new(StorageMode::FileFast, 16)).is_err());
        let files = Path::new("/files");
        vfs.create_dir_all(files).unwrap();
        Manifest::check_or_create(&vfs, files, &Manifest::new(StorageMode::FileFast, 4)).unwrap();
        assert!(Manifest::check_or_create(&vfs, files, &Manifest::new(StorageMode::FileDurable, 4)).is_ok());
        assert!(Manifest::check_or_create(&vfs, files, &Manifest::new(StorageMode::Acid, 4)).is_err());
        assert_eq!(Manifest::decode(&acid16.encode()), Some(acid16.clone()));
        assert_eq!(Manifest::decode("format=1\nmode=tape\nshards=1\nhash=x\n"), None);
        let by_hand = "format=1\nmode=acid\nshards=16\nhash=xxh3-64\n";
        assert_eq!(Manifest::decode(by_hand), Some(acid16.clone()), "restored by hand, without a check");
        let altered = acid16.encode().replace("shards=16", "shards=18");
        assert_eq!(Manifest::decode(&altered), None, "a field that disagrees with its check");
        assert_eq!(Manifest::decode(&format!("{by_hand}mode=file-fast\n")), None, "anything more");
    }

    #[test]
    fn data_without_a_manifest_is_never_reinterpreted() {
        let vfs = SimVfs::new();
        let dir = Path::new("/data");
        for shard in ["shard-000", "shard-001"] {
            vfs.create_dir_all(&dir.join(shard)).unwrap();
        }
        vfs.create_new(&dir.join("LOCK")).unwrap();
        let error = Manifest::check_or_create(&vfs, dir, &Manifest::new(StorageMode::Acid, 4)).unwrap_err();
        assert!(error.to_string().contains("acid data with 2 shards"), "{error}");
        assert!(!vfs.exists(&dir.join(MANIFEST_NAME)), "nothing is written");
        let fresh = Path::new("/fresh");
        vfs.create_dir_all(fresh).unwrap();
        vfs.create_new(&fresh.join("LOCK")).unwrap();
        assert!(Manifest::check_or_create(&vfs, fresh, &Manifest::new(StorageMode::Acid, 4)).is_ok());
    }
}
