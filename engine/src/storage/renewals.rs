//! TTL windows renewed by reads, saved now and then and at a clean stop (disk modes).
//!
//! Records carry the times of writes only, so from the log alone recovery can restart a
//! sliding TTL window at the last write, and a stream kept alive by reads would come back
//! already expired, its acknowledged data gone. So a shard whose readers renewed a window
//! saves, at most every [`SAVE_INTERVAL_MS`] and at a clean stop, when each of its streams
//! with a TTL was last read or written (written durably: temporary file, fsync, rename,
//! directory fsync), and recovery takes the later of that time and the log's. A crash
//! loses at most the last interval's renewals.
//!
//! An entry names its stream and its incarnation (acid: the stream id; file modes: the
//! file's collision suffix), and only ever moves a window forward to a time that very
//! incarnation really was read; an entry left over from an older save or a stream deleted
//! since is therefore harmless, and a damaged file is ignored with a warning.
//!
//! Format (`crate::binary`): `DSRN`, version u32, entry count u64, then per entry the
//! incarnation u64, the name (u32 length, bytes), the time u64 (ms); a crc32 of all that.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::ids::{Location, StreamId};
use crate::meta::StreamSnapshot;
use crate::storage::vfs::{create_dir_durably, read_file, write_file_durably, Vfs};

/// Readers' renewals are saved at most this often (and at a clean stop).
pub const SAVE_INTERVAL_MS: u64 = 5_000;
const MAGIC: &[u8; 4] = b"DSRN";
const VERSION: u32 = 2;

/// When one stream with a TTL was last read or written, as its shard saw it.
pub(crate) struct Renewal {
    pub name: Arc<str>,
    /// Which incarnation of the name (see the module comment).
    pub incarnation: u64,
    pub last_access_ms: u64,
}

/// Where a shard's readers' renewals are saved (the disk modes).
pub(crate) trait RenewalStore {
    /// Which incarnation of its name a stream is (its id in acid; its file's collision
    /// suffix, from its last record's location `chain_tail`, in the file modes).
    fn incarnation(&self, id: StreamId, chain_tail: Location) -> u64;

    /// Saves when the shard's streams with a TTL were last read or written; with `wait`,
    /// returns once that is durable. Nothing acknowledged depends on it, so a failure is
    /// logged, not fatal.
    fn save(&mut self, renewals: Vec<Renewal>, wait: bool);
}

/// Saved renewals: by name, then by incarnation.
pub(crate) type Renewals = HashMap<Box<str>, Vec<(u64, u64)>>;

/// Writes `renewals` to `path`, durably.
pub(crate) fn save(vfs: &dyn Vfs, path: &Path, renewals: &[Renewal]) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        create_dir_durably(vfs, dir)?;
    }
    write_file_durably(vfs, path, &encode(renewals))
}

/// The bytes of a renewals file holding `renewals`.
pub(crate) fn encode(renewals: &[Renewal]) -> Vec<u8> {
    crate::binary::encode_entries(MAGIC, VERSION, renewals, |encoder, renewal| {
        encoder.u64(renewal.incarnation).text(&renewal.name).u64(renewal.last_access_ms);
    })
}

/// Every renewal saved in `paths` (the latest time where files disagree); missing files
/// are skipped, damaged ones too, with a warning.
pub(crate) fn load(vfs: &dyn Vfs, paths: impl IntoIterator<Item = PathBuf>) -> Renewals {
    let mut renewals = Renewals::new();
    for path in paths {
        if !vfs.exists(&path) {
            continue;
        }
        match read_file(vfs, &path).and_then(|bytes| parse(&bytes)) {
            Ok(entries) => {
                for (name, incarnation, time_ms) in entries {
                    let kept = renewals.entry(name).or_default();
                    match kept.iter_mut().find(|(saved, _)| *saved == incarnation) {
                        Some((_, kept_ms)) => *kept_ms = (*kept_ms).max(time_ms),
                        None => kept.push((incarnation, time_ms)),
                    }
                }
            }
            Err(error) => tracing::warn!(path = %path.display(), %error, "saved TTL renewals ignored"),
        }
    }
    renewals
}

/// Moves each recovered stream's window to its saved renewal, if that is later;
/// `incarnation` says which incarnation a recovered stream is.
pub(crate) fn apply(
    renewals: &Renewals,
    streams: &mut [StreamSnapshot],
    incarnation: impl Fn(&StreamSnapshot) -> u64,
) {
    if renewals.is_empty() {
        return;
    }
    for stream in streams {
        let Some(saved) = renewals.get(&*stream.name) else { continue };
        let this = incarnation(stream);
        if let Some((_, time_ms)) = saved.iter().find(|(saved, _)| *saved == this) {
            stream.last_access_ms = stream.last_access_ms.max(*time_ms);
        }
    }
}

/// The entries of a renewals file: name, incarnation, time.
pub(crate) fn parse(bytes: &[u8]) -> io::Result<Vec<(Box<str>, u64, u64)>> {
    crate::binary::decode_entries(bytes, MAGIC, VERSION..=VERSION, "renewals file", |decoder, _| {
        let incarnation = decoder.u64()?;
        let name = decoder.text()?;
        Ok((name.into_boxed_str(), incarnation, decoder.u64()?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::vfs::sim::SimVfs;

    fn renewal(name: &str, incarnation: u64, last_access_ms: u64) -> Renewal {
        Renewal { name: name.into(), incarnation, last_access_ms }
    }

    fn snapshot(name: &str, id: u64, last_access_ms: u64) -> StreamSnapshot {
        StreamSnapshot { last_access_ms, ..StreamSnapshot::for_tests(name, StreamId::from_raw(id)) }
    }

    #[test]
    fn saved_times_only_move_the_same_incarnations_windows_forward() {
        let vfs = SimVfs::new();
        let (older, newer) = (PathBuf::from("/data/r/a.bin"), PathBuf::from("/data/r/b.bin"));
        save(&vfs, &older, &[renewal("read", 1, 6_000), renewal("written-later", 2, 5_000)]).unwrap();
        save(&vfs, &newer, &[renewal("read", 1, 9_000), renewal("recreated", 3, 8_000)]).unwrap();
        let renewals = load(&vfs, [older, newer, PathBuf::from("/data/r/missing.bin")]);
        assert_eq!(renewals.len(), 3);
        let mut recovered = [
            snapshot("read", 1, 1_000),
            snapshot("written-later", 2, 7_000),
            snapshot("recreated", 4, 2_000),
            snapshot("unknown", 5, 3_000),
        ];
        apply(&renewals, &mut recovered, |stream| stream.id.raw());
        let times: Vec<u64> = recovered.iter().map(|s| s.last_access_ms).collect();
        assert_eq!(times, [9_000, 7_000, 2_000, 3_000], "the latest save, later only, same incarnation only");
    }

    #[test]
    fn damaged_or_foreign_files_are_refused() {
        assert!(parse(b"").is_err());
        assert!(parse(b"DSRN").is_err());
        let vfs = SimVfs::new();
        let path = Path::new("/data/renewals.bin");
        save(&vfs, path, &[]).unwrap();
        let mut bytes = read_file(&vfs, path).unwrap();
        assert_eq!(parse(&bytes).unwrap(), Vec::new());
        bytes[5] ^= 1;
        assert!(parse(&bytes).is_err(), "a flipped bit fails the checksum");
        write_file_durably(&vfs, path, &bytes).unwrap();
        assert!(load(&vfs, [path.to_path_buf()]).is_empty(), "and the file is ignored");
    }
}
