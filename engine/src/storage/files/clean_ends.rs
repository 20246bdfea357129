//! Where each stream file ended at a clean stop, so that later starts can tell damage from
//! a crash.
//!
//! After a crash a stream file may end torn (file-durable: in its last, unacknowledged
//! batch; file-fast: anywhere it was not synced), so recovery cuts a failing end that could
//! be one (`analysis`). But files only ever grow: every byte a file held at a clean stop was
//! written whole and synced, and stays so. So at a clean stop
//! each shard saves its streams' file lengths (`clean-ends/shard-NNN.bin`), each with the
//! check of the file's create record (which incarnation of the name it holds), and later
//! starts hold each file that still holds that incarnation to its saved length: a file that
//! fails its checks before it, or ends short of it, was damaged — its stream is marked
//! damaged where its intact data ends (reads serve up to there, then 500), never silently
//! cut shorter, at this start and every later one (the shard keeps such a stream's saved
//! length through its next clean stop); a soft-deleted stream whose delete record was lost
//! stays deleted. Beyond a saved length the crash rules apply as before.
//!
//! A stream whose file is gone, or no longer opens with its create record, is found by the
//! first start after the stop that saved it (`shard-NNN.fresh` marks a save no start has
//! read yet; later a file may be missing because its stream was deleted). Each saved end
//! holds a copy of its file's create record, so that start writes the file again as that
//! record alone: the saved length then finds it short, and the stream keeps its name as a
//! damaged stream (reads and writes answer 500 until it is deleted) rather than vanishing
//! into a 404 under which a client could create the name afresh. The file an operator puts
//! back from a copy, whole, is read as before.
//! file-durable has synced every file when it stops; file-fast, which syncs nothing as it
//! goes, makes its file system durable (`syncfs`) first, and saves nothing if that fails.
//!
//! Format (`crate::binary`): `DSCE`, version u32, entry count u64, then per entry the file's
//! path under the data directory (u32 length, bytes), its stream's name (u32 length, bytes),
//! its length u64, the check (header crc32) of its create record u32, whether the stream
//! was soft-deleted (u8) and, from version 2 on, the create record's bytes (u32 length,
//! bytes; none when it was not read); a crc32 of all that. Version 1 files still load.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::binary::DecodeFailure;
use crate::storage::vfs::{create_dir_durably, read_file, write_file_durably, Vfs};

const MAGIC: &[u8; 4] = b"DSCE";
const VERSION: u32 = 2;
/// The oldest version still read (saved ends without create records).
const VERSION_OLDEST: u32 = 1;
/// Most bytes of a create record a saved end keeps (a create record holds the stream's
/// name, content type and fork origin: a few hundred bytes at most in practice).
pub(crate) const CREATE_RECORD_SAVED_MAX: usize = 64 << 10;
/// The directory under the data directory that holds the shards' saved ends.
pub(crate) const CLEAN_ENDS_DIR: &str = "clean-ends";

/// Where one stream's file ended at a clean stop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CleanEnd {
    /// The stream's name (for reports: the file itself may be gone).
    pub name: Box<str>,
    /// The file's length: every byte before it was written whole and synced.
    pub len: u64,
    /// The header check of the file's create record: the saved length is only that
    /// incarnation's (the name may have been deleted and created again since).
    pub create_check: u32,
    /// The stream was soft-deleted (its file ended with the delete record).
    pub deleted: bool,
    /// A copy of the file's create record (empty when it was not saved): what a lost file
    /// is written again as.
    pub create_record: Box<[u8]>,
    /// Saved by a stop that no start has read yet (not stored: from `shard-NNN.fresh`).
    pub fresh: bool,
}

/// The header check of the create record at the start of a stream file, `None` when the
/// file is too short to hold a header.
pub(crate) fn create_check(start: &[u8]) -> Option<u32> {
    let check = start.get(CREATE_CHECK_AT..CREATE_CHECK_AT + 4)?;
    Some(u32::from_le_bytes(check.try_into().expect("four bytes")))
}

/// Where a record header holds its own crc32 (`record::codec`).
const CREATE_CHECK_AT: usize = 60;

/// Saved ends by file path, relative to the data directory.
pub(crate) type CleanEnds = HashMap<PathBuf, CleanEnd>;

/// Where shard `shard` saves its streams' file ends.
pub(crate) fn clean_ends_path(root: &Path, shard: u32) -> PathBuf {
    root.join(CLEAN_ENDS_DIR).join(format!("shard-{shard:03}.bin"))
}

/// The mark of a save of shard `shard` that no start has read yet.
fn fresh_path(root: &Path, shard: u32) -> PathBuf {
    clean_ends_path(root, shard).with_extension("fresh")
}

/// Writes `ends` (file paths relative to `root`) as shard `shard`'s, durably, then marks
/// them fresh.
pub(crate) fn save(vfs: &dyn Vfs, root: &Path, shard: u32, ends: &[(PathBuf, CleanEnd)]) -> io::Result<()> {
    let path = clean_ends_path(root, shard);
    create_dir_durably(vfs, path.parent().expect("a saved file has a directory"))?;
    write_file_durably(vfs, &path, &encode(ends))?;
    write_file_durably(vfs, &fresh_path(root, shard), b"")
}

/// Every shard's saved ends under `root`. A damaged file counts for nothing (its shard's
/// files are then judged as after a crash), with a warning.
pub(crate) fn load(vfs: &dyn Vfs, root: &Path) -> CleanEnds {
    let mut ends = CleanEnds::new();
    let dir = root.join(CLEAN_ENDS_DIR);
    let Ok(names) = vfs.list(&dir) else { return ends };
    for name in names.iter().filter(|name| name.starts_with("shard-") && name.ends_with(".bin")) {
        let path = dir.join(name);
        let fresh = vfs.exists(&path.with_extension("fresh"));
        match read_file(vfs, &path).and_then(|bytes| parse(&bytes)) {
            Ok(entries) => {
                ends.extend(entries.into_iter().map(|(path, end)| (path, CleanEnd { fresh, ..end })))
            }
            Err(error) => tracing::warn!(path = %path.display(), %error, "saved file ends ignored"),
        }
    }
    ends
}

/// The streams of `ends` saved by a stop no start has read yet whose file is no longer at
/// its path under `root` (gone, or moved aside by recovery): each file's path, with its
/// saved end, in path order.
pub(crate) fn lost<'a>(vfs: &dyn Vfs, root: &Path, ends: &'a CleanEnds) -> Vec<(PathBuf, &'a CleanEnd)> {
    let mut lost: Vec<(PathBuf, &CleanEnd)> = ends
        .iter()
        .filter(|(_, end)| end.fresh)
        .map(|(relative, end)| (root.join(relative), end))
        .filter(|(path, _)| !vfs.exists(path))
        .collect();
    lost.sort_by(|a, b| a.0.cmp(&b.0));
    lost
}

/// Marks every save under `root` read (durably): done by recovery, before the store takes
/// a write.
pub(crate) fn mark_read(vfs: &dyn Vfs, root: &Path) -> io::Result<()> {
    let dir = root.join(CLEAN_ENDS_DIR);
    if !vfs.exists(&dir) {
        return Ok(());
    }
    let marks: Vec<String> = vfs.list(&dir)?.into_iter().filter(|name| name.ends_with(".fresh")).collect();
    for mark in &marks {
        vfs.remove_file(&dir.join(mark))?;
    }
    if !marks.is_empty() {
        vfs.sync_dir(&dir)?;
    }
    Ok(())
}

fn encode(ends: &[(PathBuf, CleanEnd)]) -> Vec<u8> {
    crate::binary::encode_entries(MAGIC, VERSION, ends, |encoder, (path, end)| {
        let path = path.to_str().expect("stream file paths are ASCII");
        encoder.text(path).text(&end.name).u64(end.len).u32(end.create_check).u8(u8::from(end.deleted));
        encoder.blob(&end.create_record);
    })
}

fn parse(bytes: &[u8]) -> io::Result<Vec<(PathBuf, CleanEnd)>> {
    let versions = VERSION_OLDEST..=VERSION;
    crate::binary::decode_entries(bytes, MAGIC, versions, "file of saved ends", |decoder, version| {
        let path = PathBuf::from(decoder.text()?);
        let name = decoder.text()?.into_boxed_str();
        let (len, create_check, deleted) = (decoder.u64()?, decoder.u32()?, decoder.u8()?);
        let create_record: Box<[u8]> = match version {
            1 => Box::default(),
            _ => decoder.blob()?.into(),
        };
        let record_fits = create_record.len() <= CREATE_RECORD_SAVED_MAX && create_record.len() as u64 <= len;
        if deleted > 1 || path.is_absolute() || !record_fits {
            return Err(DecodeFailure);
        }
        Ok((path, CleanEnd { name, len, create_check, deleted: deleted == 1, create_record, fresh: false }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::vfs::sim::SimVfs;

    fn end(name: &str, len: u64, deleted: bool) -> CleanEnd {
        let create_record = vec![7; len.min(64) as usize].into();
        CleanEnd {
            name: name.into(),
            len,
            create_check: len as u32 ^ 0x5a5a,
            deleted,
            create_record,
            fresh: false,
        }
    }

    #[test]
    fn saved_ends_load_from_every_shard_fresh_until_a_start_read_them() {
        let vfs = SimVfs::new();
        let root = Path::new("/data");
        let a = (PathBuf::from("streams/aa/bb/a.log"), end("a", 120, false));
        let b = (PathBuf::from("streams/cc/dd/b-1.log"), end("b", 4_096, true));
        save(&vfs, root, 0, std::slice::from_ref(&a)).unwrap();
        save(&vfs, root, 3, std::slice::from_ref(&b)).unwrap();
        let fresh =
            |(path, end): &(PathBuf, CleanEnd)| (path.clone(), CleanEnd { fresh: true, ..end.clone() });
        assert_eq!(load(&vfs, root), CleanEnds::from([fresh(&a), fresh(&b)]));
        mark_read(&vfs, root).unwrap();
        assert_eq!(load(&vfs, root), CleanEnds::from([a, b]), "kept, no longer fresh");
    }

    #[test]
    fn damaged_or_foreign_files_count_for_nothing() {
        assert!(parse(b"").is_err());
        assert!(parse(b"DSCE").is_err());
        let vfs = SimVfs::new();
        let root = Path::new("/data");
        save(&vfs, root, 1, &[(PathBuf::from("streams/x.log"), end("x", 9, false))]).unwrap();
        let path = clean_ends_path(root, 1);
        let mut bytes = read_file(&vfs, &path).unwrap();
        bytes[9] ^= 1;
        assert!(parse(&bytes).is_err(), "a flipped bit fails the checksum");
        write_file_durably(&vfs, &path, &bytes).unwrap();
        assert!(load(&vfs, root).is_empty(), "and the file is ignored");
    }

    #[test]
    fn version_1_files_load_without_create_records() {
        let saved = (PathBuf::from("streams/aa/bb/a.log"), end("a", 120, true));
        let v1 =
            crate::binary::encode_entries(MAGIC, 1, std::slice::from_ref(&saved), |encoder, (path, end)| {
                let path = path.to_str().unwrap();
                encoder
                    .text(path)
                    .text(&end.name)
                    .u64(end.len)
                    .u32(end.create_check)
                    .u8(u8::from(end.deleted));
            });
        let loaded = parse(&v1).unwrap();
        let expected = CleanEnd { create_record: Box::default(), ..saved.1.clone() };
        assert_eq!(loaded, vec![(saved.0.clone(), expected)]);
        assert_eq!(
            parse(&encode(std::slice::from_ref(&saved))).unwrap(),
            vec![saved],
            "version 2 keeps the record"
        );
    }
}
