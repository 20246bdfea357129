//! TTL windows renewed by reads, saved at a clean stop (file modes).
//!
//! A stream file's records carry the times of its writes, so from the file alone recovery
//! can only restart a sliding TTL window at the last write: a stream kept alive by reads
//! would come back already expired. So at a clean stop each shard writes, for every stream
//! with a TTL, when it was last read or written (`renewals/shard-NNN.bin`, written durably:
//! temporary file, fsync, rename, directory fsync), and recovery takes the later of that
//! time and the last record's.
//!
//! An entry names its stream and the stream's file (the collision suffix), and only ever
//! moves a window forward to a time that incarnation of the stream really was read; an
//! entry left over from an older stop or a stream deleted since is therefore harmless, and
//! a damaged file is ignored with a warning. Reads since the last clean stop are lost by a
//! crash (in acid, checkpoints carry the same times).
//!
//! Format (`crate::binary`): `DSRN`, version u32, entry count u64, then per entry the
//! suffix u8, the name (u32 length, bytes), the time u64 (ms); a crc32 of all that.

use std::collections::HashMap;
use std::io;
use std::path::Path;

use crate::binary::{Decoder, Encoder};
use crate::stream::StreamSnapshot;
use crate::vfs::{read_file, write_file_durably, Vfs};

use super::split_location;

/// The directory under the data directory that holds the saved renewals.
pub const RENEWALS_DIR: &str = "renewals";
const MAGIC: &[u8; 4] = b"DSRN";
const VERSION: u32 = 1;

/// When each stream was last read or written: by name, then by its file's collision suffix.
pub type Renewals = HashMap<Box<str>, Vec<(u8, u64)>>;

/// Saves when each of `streams` with a TTL was last read or written, for shard `shard`.
pub fn save(vfs: &dyn Vfs, root: &Path, shard: u32, streams: &[StreamSnapshot]) -> io::Result<()> {
    let with_ttl: Vec<&StreamSnapshot> = streams.iter().filter(|s| s.config.ttl_secs.is_some()).collect();
    let mut encoder = Encoder::default();
    encoder.bytes.extend_from_slice(MAGIC);
    encoder.u32(VERSION).u64(with_ttl.len() as u64);
    for stream in with_ttl {
        let (suffix, _) = split_location(stream.chain_tail);
        encoder.u8(suffix).text(&stream.name).u64(stream.last_access_ms);
    }
    let crc = crc32fast::hash(&encoder.bytes);
    encoder.u32(crc);
    let dir = root.join(RENEWALS_DIR);
    vfs.create_dir_all(&dir)?;
    write_file_durably(vfs, &dir.join(format!("shard-{shard:03}.bin")), &encoder.bytes)
}

/// Every saved renewal under `root` (the latest time where files disagree); unreadable
/// or damaged files are skipped with a warning.
pub fn load(vfs: &dyn Vfs, root: &Path) -> Renewals {
    let dir = root.join(RENEWALS_DIR);
    let mut renewals = Renewals::new();
    let Ok(names) = vfs.list(&dir) else { return renewals };
    for file in names.iter().filter(|name| name.ends_with(".bin")) {
        let path = dir.join(file);
        let parsed = read_file(vfs, &path).and_then(|bytes| parse(&bytes));
        match parsed {
            Ok(entries) => {
                for (name, suffix, time_ms) in entries {
                    let files = renewals.entry(name).or_default();
                    match files.iter_mut().find(|(kept, _)| *kept == suffix) {
                        Some((_, kept_ms)) => *kept_ms = (*kept_ms).max(time_ms),
                        None => files.push((suffix, time_ms)),
                    }
                }
            }
            Err(error) => tracing::warn!(path = %path.display(), %error, "saved TTL renewals ignored"),
        }
    }
    renewals
}

/// Moves each recovered stream's window to its saved renewal, if that is later.
pub fn apply(renewals: &Renewals, streams: &mut [StreamSnapshot]) {
    if renewals.is_empty() {
        return;
    }
    for stream in streams {
        let (suffix, _) = split_location(stream.chain_tail);
        let files = renewals.get(&*stream.name).map_or(&[][..], Vec::as_slice);
        if let Some((_, time_ms)) = files.iter().find(|(saved, _)| *saved == suffix) {
            stream.last_access_ms = stream.last_access_ms.max(*time_ms);
        }
    }
}

/// The entries of a renewals file: name, collision suffix, time.
fn parse(bytes: &[u8]) -> io::Result<Vec<(Box<str>, u8, u64)>> {
    let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    let Some((body, crc)) = bytes.split_last_chunk::<4>() else { return Err(invalid("too short")) };
    if crc32fast::hash(body) != u32::from_le_bytes(*crc) {
        return Err(invalid("checksum mismatch"));
    }
    let Some(fields) = body.strip_prefix(MAGIC.as_slice()) else {
        return Err(invalid("not a renewals file"));
    };
    let mut decoder = Decoder::new(fields);
    let mut entries = Vec::new();
    let decoded = (|| {
        if decoder.u32()? != VERSION {
            return Err(crate::binary::DecodeFailure);
        }
        for _ in 0..decoder.u64()? {
            let suffix = decoder.u8()?;
            let name = decoder.text()?;
            entries.push((name.into_boxed_str(), suffix, decoder.u64()?));
        }
        Ok(())
    })();
    decoded.map_err(|_| invalid("unknown version or truncated entry"))?;
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfs::sim::SimVfs;

    fn snapshot(name: &str, suffix: u8, last_access_ms: u64, ttl_secs: Option<u64>) -> StreamSnapshot {
        StreamSnapshot {
            id: 1,
            name: name.into(),
            config: crate::stream::StreamConfig {
                content_type: crate::content_type::ContentType::default_type(),
                ttl_secs,
                expires_at_ms: None,
            },
            last_access_ms,
            tail: crate::offset::Offset::ZERO,
            closed: false,
            stream_seq: None,
            producers: Vec::new(),
            chain_tail: super::super::location(suffix, 0),
            chain_n: 0,
        }
    }

    #[test]
    fn saved_times_only_move_the_same_streams_windows_forward() {
        let vfs = SimVfs::new();
        let root = Path::new("/data");
        let saved = [
            snapshot("read", 0, 9_000, Some(10)),
            snapshot("written-later", 0, 5_000, Some(10)),
            snapshot("second-of-a-hash", 1, 8_000, Some(10)),
            snapshot("no-ttl", 0, 9_000, None),
        ];
        save(&vfs, root, 3, &saved).unwrap();
        let renewals = load(&vfs, root);
        assert_eq!(renewals.len(), 3, "streams without a TTL are not saved");
        let mut recovered = [
            snapshot("read", 0, 1_000, Some(10)),
            snapshot("written-later", 0, 7_000, Some(10)),
            snapshot("second-of-a-hash", 0, 2_000, Some(10)),
            snapshot("unknown", 0, 3_000, Some(10)),
        ];
        apply(&renewals, &mut recovered);
        let times: Vec<u64> = recovered.iter().map(|s| s.last_access_ms).collect();
        assert_eq!(times, [9_000, 7_000, 2_000, 3_000], "later only, and only for the same file");
    }

    #[test]
    fn damaged_or_foreign_files_are_refused() {
        assert!(parse(b"").is_err());
        assert!(parse(b"DSRN").is_err());
        let vfs = SimVfs::new();
        save(&vfs, Path::new("/data"), 0, &[]).unwrap();
        let mut bytes = read_file(&vfs, Path::new("/data/renewals/shard-000.bin")).unwrap();
        assert_eq!(parse(&bytes).unwrap(), Vec::new());
        bytes[5] ^= 1;
        assert!(parse(&bytes).is_err(), "a flipped bit fails the checksum");
    }
}
