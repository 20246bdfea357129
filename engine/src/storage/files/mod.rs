//! file-durable and file-fast: one append-only file of records per stream.
//!
//! - `writer`: the shard's commit step — each record appended to its stream's file (one
//!   positional write per record), then, in file-durable, one fdatasync per touched file
//!   and one fsync per touched directory before anything is acknowledged.
//! - `source`: reading a stream's records from its file (positional reads, crc-checked).
//! - `handles`: the bounded cache of open files that the writer and readers share.
//! - `analysis`: reading one stream file back (torn ends, damage stepped over).
//! - `recovery`: scanning every stream file at start, cutting torn tails off.
//! - `rewrite`: a stream's file deleted under the process, written again from the open file.
//! - `clean_ends`: where each file ended at a clean stop (file-durable), so that the next
//!   start tells a damaged end from a torn one.
//!
//! A stream's file is named by the 128-bit xxh3 hash of its name, never by the name itself
//! (no path traversal, no length or character limits from the file system):
//! `streams/ab/cd/abcd…(32 hex digits).log`, with `-k` before the extension for the rare
//! second name with the same hash (the create record inside names its stream, so recovery
//! and collision checks read it from there). Records use the WAL's codec, so producer
//! state and closing travel inside the records; a record's location is its position in the
//! file, with the collision suffix in the top byte. Readers' TTL renewals are saved in
//! `renewals/shard-NNN.bin` (`crate::storage::renewals`), keyed by the collision suffix.

pub(crate) mod analysis;
pub(crate) mod clean_ends;
pub(crate) mod handles;
pub(crate) mod recovery;
mod rewrite;
pub(crate) mod source;
pub(crate) mod writer;

use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::xxh3_128;

use crate::ids::{ChainIndex, Location, Lsn};

/// The directory under the data directory that holds stream files.
pub(crate) const STREAMS_DIR: &str = "streams";
const EXTENSION: &str = "log";
/// Most streams whose names share one hash (far beyond any real collision).
pub(crate) const SUFFIX_MAX: u8 = 255;

/// The location of `position` in the file with collision suffix `suffix`.
pub(crate) fn location(suffix: u8, position: u64) -> Location {
    assert!(position < 1 << 56, "stream files are smaller than 2^56 bytes");
    Location::from_raw(u64::from(suffix) << 56 | position)
}

/// The sequence number a stream file gives the record with chain index `n`: a file holds one
/// chain, so its records are numbered by their index (a soft delete, outside the chain, takes
/// the next).
pub(crate) fn record_number(n: ChainIndex) -> Lsn {
    Lsn::from_raw(n.raw())
}

/// The collision suffix and position of a location.
pub(crate) fn split_location(location: Location) -> (u8, u64) {
    let raw = location.raw();
    ((raw >> 56) as u8, raw & ((1 << 56) - 1))
}

/// Where shard `shard` saves its readers' TTL renewals.
pub(crate) fn renewals_path(root: &Path, shard: u32) -> PathBuf {
    root.join("renewals").join(format!("shard-{shard:03}.bin"))
}

/// Which incarnation of its name the stream whose chain ends at `chain_tail` is: its
/// file's collision suffix.
pub(crate) fn incarnation(chain_tail: Location) -> u64 {
    u64::from(split_location(chain_tail).0)
}

/// The hash a stream's file is named by, as 32 hex digits.
fn name_hash(name: &str) -> String {
    format!("{:032x}", xxh3_128(name.as_bytes()))
}

/// The directory that holds the files of streams whose name hashes like `name`'s.
pub(crate) fn stream_dir(root: &Path, name: &str) -> PathBuf {
    let hash = name_hash(name);
    root.join(STREAMS_DIR).join(&hash[0..2]).join(&hash[2..4])
}

/// The file of stream `name` with collision suffix `suffix`.
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))] // (the `testing` front door exports it)
pub fn stream_path(root: &Path, name: &str, suffix: u8) -> PathBuf {
    let hash = name_hash(name);
    let file = match suffix {
        0 => format!("{hash}.{EXTENSION}"),
        k => format!("{hash}-{k}.{EXTENSION}"),
    };
    root.join(STREAMS_DIR).join(&hash[0..2]).join(&hash[2..4]).join(file)
}

/// The hash and collision suffix a stream file's name stands for, if it is one.
pub(crate) fn parse_file_name(file: &str) -> Option<(String, u8)> {
    let stem = file.strip_suffix(&format!(".{EXTENSION}"))?;
    let (hash, suffix) = match stem.split_once('-') {
        Some((hash, suffix)) => (hash, suffix.parse::<u8>().ok().filter(|k| *k > 0)?),
        None => (stem, 0),
    };
    let hex = hash.len() == 32 && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    hex.then(|| (hash.to_string(), suffix))
}

/// Whether `path` is where the file of stream `name` with suffix `suffix` belongs.
pub(crate) fn belongs_at(name: &str, suffix: u8, path: &Path, root: &Path) -> bool {
    stream_path(root, name, suffix) == path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_hashed_paths_whatever_they_contain() {
        let root = Path::new("/data");
        for name in ["a", "../../etc/passwd", "x/y/z", &"n".repeat(1024), "ünïcødé"] {
            let path = stream_path(root, name, 0);
            assert!(path.starts_with("/data/streams"));
            assert_eq!(path.components().count(), 6, "{path:?}");
            let file = path.file_name().unwrap().to_str().unwrap();
            assert_eq!(file.len(), 36);
            assert_eq!(parse_file_name(file).map(|(_, k)| k), Some(0));
            assert!(belongs_at(name, 0, &path, root));
        }
        let second = stream_path(root, "a", 3);
        assert!(second.to_str().unwrap().ends_with("-3.log"));
        assert_eq!(parse_file_name(second.file_name().unwrap().to_str().unwrap()).map(|(_, k)| k), Some(3));
        assert_eq!(stream_dir(root, "a"), second.parent().unwrap());
    }

    #[test]
    fn other_files_are_not_stream_files() {
        for file in
            ["x.log", "0123.log", &format!("{}.tmp", "a".repeat(32)), &format!("{}-0.log", "a".repeat(32))]
        {
            assert_eq!(parse_file_name(file), None, "{file}");
        }
    }

    #[test]
    fn locations_carry_the_suffix() {
        assert_eq!(split_location(location(7, 12345)), (7, 12345));
        assert_eq!(split_location(location(0, 0)), (0, 0));
    }
}
