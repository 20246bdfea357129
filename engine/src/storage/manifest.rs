//! The manifest: what a data directory holds, so it is never opened the wrong way.
//!
//! Written durably at first start (`MANIFEST`, text, one `key=value` per line, the last a
//! crc32 of the others), then again as `MANIFEST-COPY`; every later start compares it with
//! its configuration and refuses a different storage mode or shard count with a message that
//! says what the directory holds. The copy is there because the manifest is the one file
//! the whole directory depends on: where one of the two is missing or damaged, the other is
//! read and the start writes the lost one again (logged), as a file system keeps copies of
//! its superblock. Only a directory where both are lost is refused (it is never guessed how
//! its data was written).

use std::io;
use std::path::Path;

use crate::storage::vfs::{read_exact_at, write_file_durably, Vfs};
use crate::storage::StorageMode;

pub(crate) const MANIFEST_NAME: &str = "MANIFEST";
/// The manifest's copy, written after it.
pub(crate) const MANIFEST_COPY_NAME: &str = "MANIFEST-COPY";
/// A manifest file longer than this is damaged (a manifest is about 80 bytes).
const MANIFEST_BYTES_MAX: u64 = 4096;
/// Version of the on-disk format this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;
/// The name hash that places streams on shards.
pub(crate) const HASH_NAME: &str = "xxh3-64";

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

    /// Reads the manifest of `dir` (or, where it is missing or damaged, its copy); refuses
    /// one of another format or hash. Writes nothing. Also says what is wrong with the two
    /// files ([`file_problems`]), from the same reads.
    pub fn read(vfs: &dyn Vfs, dir: &Path) -> io::Result<(Manifest, Vec<FileProblem>)> {
        let (main, copy) = (load(vfs, &dir.join(MANIFEST_NAME)), load(vfs, &dir.join(MANIFEST_COPY_NAME)));
        let found = pick(dir, &main, &copy)?;
        check_version(dir, &found)?;
        let problems = file_problems(&found, [(MANIFEST_NAME, &main), (MANIFEST_COPY_NAME, &copy)]);
        Ok((found, problems))
    }

    /// Reads the manifest of `dir`, writing `expected` (and its copy) if there is none yet;
    /// refuses a directory whose manifest differs, and one that holds data but neither the
    /// manifest nor its copy (it is never guessed how such data was written). Where one of
    /// the two files is missing, damaged or different, it is written again from the other
    /// (the manifest wins), once the directory is known to match.
    pub fn check_or_create(vfs: &dyn Vfs, dir: &Path, expected: &Manifest) -> io::Result<Manifest> {
        let (main_path, copy_path) = (dir.join(MANIFEST_NAME), dir.join(MANIFEST_COPY_NAME));
        let (main, copy) = (load(vfs, &main_path), load(vfs, &copy_path));
        if matches!((&main, &copy), (Loaded::Missing, Loaded::Missing)) {
            refuse_unlabelled_data(vfs, dir)?;
            write_file_durably(vfs, &main_path, expected.encode().as_bytes())?;
            write_file_durably(vfs, &copy_path, expected.encode().as_bytes())?;
            return Ok(expected.clone());
        }
        let found = pick(dir, &main, &copy)?;
        check_version(dir, &found)?;
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
        for (path, loaded) in [(&main_path, &main), (&copy_path, &copy)] {
            if !matches!(loaded, Loaded::Intact(held) if *held == found) {
                if !matches!(loaded, Loaded::Missing) || path == &main_path {
                    let (path_text, state) = (path.display(), loaded.state());
                    tracing::warn!(path = %path_text, state, "manifest file written again from its other copy");
                }
                write_file_durably(vfs, path, found.encode().as_bytes())?;
            }
        }
        Ok(found)
    }
}

/// One manifest file's name and, in words, what is wrong with it.
pub type FileProblem = (&'static str, String);

/// What is wrong with the manifest's two files (name, as read), beside `found` (the manifest
/// read from them): each that is damaged or differs, and a missing `MANIFEST`, in words. A
/// missing copy is not a problem: the directory was written before copies were kept, and
/// its next start writes one.
fn file_problems(found: &Manifest, files: [(&'static str, &Loaded); 2]) -> Vec<FileProblem> {
    let mut problems = Vec::new();
    for (name, loaded) in files {
        let fine = match loaded {
            Loaded::Intact(held) => held == found,
            Loaded::Missing => name == MANIFEST_COPY_NAME,
            Loaded::Damaged => false,
        };
        if !fine {
            problems.push((
                name,
                format!("{} (the next start writes it again from the other copy)", loaded.state()),
            ));
        }
    }
    problems
}

/// One of the manifest's two files, as read.
enum Loaded {
    Intact(Manifest),
    /// Unreadable, too long, or not what [`Manifest::encode`] writes.
    Damaged,
    Missing,
}

impl Loaded {
    fn state(&self) -> &'static str {
        match self {
            Loaded::Intact(_) => "different",
            Loaded::Damaged => "damaged",
            Loaded::Missing => "missing",
        }
    }
}

/// Reads the manifest file at `path`.
fn load(vfs: &dyn Vfs, path: &Path) -> Loaded {
    if !vfs.exists(path) {
        return Loaded::Missing;
    }
    let bytes = vfs.open(path).and_then(|file| {
        let len = file.size()?;
        let mut bytes = vec![0; usize::try_from(len.min(MANIFEST_BYTES_MAX + 1)).expect("a few KiB")];
        read_exact_at(file.as_ref(), 0, &mut bytes)?;
        Ok(bytes)
    });
    match bytes.as_deref().map(std::str::from_utf8) {
        Ok(Ok(text)) if text.len() as u64 <= MANIFEST_BYTES_MAX => {
            Manifest::decode(text).map_or(Loaded::Damaged, Loaded::Intact)
        }
        _ => Loaded::Damaged,
    }
}

/// The manifest `dir`'s two files hold: the manifest's own where it is intact, else its copy.
fn pick(dir: &Path, main: &Loaded, copy: &Loaded) -> io::Result<Manifest> {
    match (main, copy) {
        (Loaded::Intact(found), _) | (_, Loaded::Intact(found)) => Ok(found.clone()),
        (Loaded::Missing, Loaded::Missing) => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{} has no {MANIFEST_NAME} (nor {MANIFEST_COPY_NAME})", dir.display()),
        )),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} holds no intact ds manifest: {MANIFEST_NAME} is {} and {MANIFEST_COPY_NAME} is {}. \
                 Restore one of them (lines format={FORMAT_VERSION}, mode=..., shards=..., hash={HASH_NAME})",
                dir.display(),
                main.state(),
                copy.state()
            ),
        )),
    }
}

/// Refuses a manifest of another format or hash.
fn check_version(dir: &Path, found: &Manifest) -> io::Result<()> {
    if found.format == FORMAT_VERSION && found.hash == HASH_NAME {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "{} holds format {} with hash {}; this build reads format {FORMAT_VERSION} with {HASH_NAME}",
            dir.display(),
            found.format,
            found.hash
        ),
    ))
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
            "{} holds data ({}) but no {MANIFEST_NAME} (nor {MANIFEST_COPY_NAME}), so how it was written is not known; {guess}. \
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
    use crate::storage::vfs::read_file;
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

    fn write(vfs: &SimVfs, path: &Path, contents: &[u8]) {
        write_file_durably(vfs, path, contents).unwrap();
    }

    fn text(vfs: &SimVfs, path: &Path) -> String {
        String::from_utf8(read_file(vfs, path).unwrap()).unwrap()
    }

    #[test]
    fn either_file_restores_the_other() {
        let vfs = SimVfs::new();
        let dir = Path::new("/data");
        vfs.create_dir_all(dir).unwrap();
        let acid4 = Manifest::new(StorageMode::Acid, 4);
        let (main, copy) = (dir.join(MANIFEST_NAME), dir.join(MANIFEST_COPY_NAME));
        Manifest::check_or_create(&vfs, dir, &acid4).unwrap();
        assert_eq!(text(&vfs, &copy), acid4.encode(), "the first start writes both");
        let damages: [&dyn Fn(&Path); 4] = [
            &|path| vfs.remove_file(path).unwrap(),
            &|path| write(&vfs, path, b"format=1\nmode=acid\nshards=4\nhash=xxh3-64\ncheck=00000000\n"),
            &|path| write(&vfs, path, &[0xff; 80]),
            &|path| write(&vfs, path, &vec![b'x'; MANIFEST_BYTES_MAX as usize + 1]),
        ];
        for damage in damages {
            for (lost, kept) in [(&main, &copy), (&copy, &main)] {
                damage(lost);
                assert_eq!(
                    Manifest::read(&vfs, dir).unwrap().0,
                    acid4,
                    "{}: read from the other",
                    lost.display()
                );
                assert!(Manifest::check_or_create(&vfs, dir, &Manifest::new(StorageMode::Acid, 8)).is_err());
                let unchanged = read_file(&vfs, lost).ok() != Some(acid4.encode().into_bytes());
                assert!(unchanged, "a refused start writes nothing");
                assert_eq!(Manifest::check_or_create(&vfs, dir, &acid4).unwrap(), acid4);
                assert_eq!(text(&vfs, lost), acid4.encode(), "{}: written again", lost.display());
                assert_eq!(text(&vfs, kept), acid4.encode());
            }
        }
    }

    #[test]
    fn both_lost_is_refused_and_the_manifest_wins_over_a_different_copy() {
        let vfs = SimVfs::new();
        let dir = Path::new("/data");
        vfs.create_dir_all(&dir.join("shard-000")).unwrap();
        let acid1 = Manifest::new(StorageMode::Acid, 1);
        let (main, copy) = (dir.join(MANIFEST_NAME), dir.join(MANIFEST_COPY_NAME));
        write(&vfs, &main, acid1.encode().as_bytes());
        write(&vfs, &copy, Manifest::new(StorageMode::FileFast, 1).encode().as_bytes());
        assert_eq!(Manifest::check_or_create(&vfs, dir, &acid1).unwrap(), acid1);
        assert_eq!(text(&vfs, &copy), acid1.encode(), "the copy follows the manifest");
        write(&vfs, &main, b"garbage");
        write(&vfs, &copy, b"");
        for error in [
            Manifest::read(&vfs, dir).unwrap_err(),
            Manifest::check_or_create(&vfs, dir, &acid1).unwrap_err(),
        ] {
            let error = error.to_string();
            assert!(error.contains("MANIFEST is damaged and MANIFEST-COPY is damaged"), "{error}");
        }
        vfs.remove_file(&main).unwrap();
        vfs.remove_file(&copy).unwrap();
        let error = Manifest::check_or_create(&vfs, dir, &acid1).unwrap_err().to_string();
        assert!(error.contains("acid data with 1 shards"), "{error}");
        assert!(!vfs.exists(&main) && !vfs.exists(&copy), "nothing is written");
    }
}
