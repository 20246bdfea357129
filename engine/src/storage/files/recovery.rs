//! Rebuilding the file modes' streams at start: every stream file read and checked.
//!
//! Each file must open with its stream's create record and continue with appends that each
//! continue the stream (see `storage::replay`); every record's header and payload crc are
//! checked. Reading stops at the first record that fails: the file is cut there (synced in
//! file-durable), so the next append lands right after the last good record, and the cut is
//! reported; bytes that were cut off (unless all zeros) are kept in `dropped/` first. A file without a readable create record holds nothing that was acknowledged as
//! a stream; it is moved to `dropped/` rather than deleted. Files are read in parallel.
//! Each file that still holds the stream it held at a clean stop is held to the length it
//! had then (`clean_ends`); after that stop, a stream whose file is gone is reported by name
//! and its file written again as its create record alone: it stays, damaged, until deleted.

use std::collections::{BTreeSet, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use xxhash_rust::xxh3::xxh3_64;

use super::analysis::analyze_file;
use super::clean_ends::{self, CleanEnd, CleanEnds};
use super::{belongs_at, incarnation, parse_file_name, renewals_path, STREAMS_DIR};
use crate::meta::StreamSnapshot;
use crate::storage::renewals;
use crate::storage::vfs::{create_dir_durably, write_file_durably, Vfs, VfsFile};
use crate::storage::{Damage, RecoveryReport};

/// Where files that cannot be streams go.
pub(crate) const DROPPED_DIR: &str = "dropped";

/// The streams of a file-mode data directory, by shard.
pub(crate) struct FilesRecovered {
    pub shards: Vec<Vec<StreamSnapshot>>,
    /// Stream directories that exist.
    pub dirs: BTreeSet<PathBuf>,
    /// By shard: the saved ends of files found short of them (or their delete record gone),
    /// which the shard keeps through its next clean stop (paths under the data directory).
    pub floors: Vec<Vec<(PathBuf, CleanEnd)>>,
    pub report: RecoveryReport,
}

/// What reading one file found.
enum FileOutcome {
    Stream {
        snapshot: Box<StreamSnapshot>,
        records: u64,
        bytes: u64,
        damage: Vec<Damage>,
        stale_bytes: u64,
        /// The saved end that found the file short (see [`FilesRecovered::floors`]).
        floor: Option<(PathBuf, CleanEnd)>,
    },
    /// Not a stream (no readable create record): moved aside, and why (torn: a create a
    /// crash cut short).
    Dropped(Damage),
    /// A file that is not where its stream belongs: left alone.
    Misplaced(PathBuf),
}

/// Recovers every stream under `root`; `threads` readers work in parallel (1: in order).
pub(crate) fn recover(
    vfs: &dyn Vfs,
    root: &Path,
    shard_count: u32,
    durable: bool,
    threads: usize,
) -> io::Result<FilesRecovered> {
    let (dirs, files) = list_stream_files(vfs, root)?;
    let ends = clean_ends::load(vfs, root);
    let ends = &ends;
    let chunk = files.len().div_ceil(threads.max(1)).max(1);
    let recover_one = move |(path, suffix): &FileEntry| {
        let clean = path.strip_prefix(root).ok().and_then(|relative| ends.get(relative));
        recover_file(vfs, root, path, *suffix, durable, clean)
    };
    let outcomes: Vec<io::Result<Vec<FileOutcome>>> = if threads <= 1 {
        vec![files.iter().map(recover_one).collect()]
    } else {
        std::thread::scope(|scope| {
            let tasks: Vec<_> = files
                .chunks(chunk)
                .map(|part| scope.spawn(move || part.iter().map(recover_one).collect()))
                .collect();
            tasks.into_iter().map(|task| task.join().expect("recovery threads do not panic")).collect()
        })
    };
    let mut recovered = FilesRecovered {
        shards: vec![Vec::new(); shard_count as usize],
        dirs,
        floors: vec![Vec::new(); shard_count as usize],
        report: RecoveryReport::default(),
    };
    let mut names = HashSet::new();
    for part in outcomes {
        for outcome in part? {
            gather(&mut recovered, &mut names, outcome, shard_count);
        }
    }
    // Before the renewals: a stream kept under its name keeps its TTL window too.
    restore_lost_files(vfs, &mut recovered, &mut names, root, ends, durable, shard_count);
    let renewed = renewals::load(vfs, (0..shard_count).map(|shard| renewals_path(root, shard)));
    for streams in &mut recovered.shards {
        renewals::apply(&renewed, streams, |stream| incarnation(stream.chain_tail));
    }
    clean_ends::mark_read(vfs, root)?;
    Ok(recovered)
}

/// Streams whose file was there at the clean stop just before this start and is not now (or
/// was moved aside: it no longer opens with its create record): each is reported by name,
/// as damage, and its file written again as its saved create record alone, which its saved
/// length then finds short, so the stream keeps its name, marked damaged, until it is
/// deleted (`clean_ends`). Where that cannot be done (no record saved, another file holds
/// the name, no room), the stream is reported only.
fn restore_lost_files(
    vfs: &dyn Vfs,
    recovered: &mut FilesRecovered,
    names: &mut HashSet<Arc<str>>,
    root: &Path,
    ends: &CleanEnds,
    durable: bool,
    shard_count: u32,
) {
    for (file, end) in clean_ends::lost(vfs, root, ends) {
        let lost =
            format!("stream {:?}: its file, {} bytes at the last clean stop, is lost", end.name, end.len);
        let restored = restore_file(vfs, &file, end, names);
        let reason = match &restored {
            Ok(_) => format!("{lost}; its name is kept, as a damaged stream, until it is deleted"),
            Err(why) => format!("{lost} ({why})"),
        };
        tracing::error!(path = %file.display(), "{reason}");
        let damage = Damage::new(file.clone(), 0, reason);
        let outcome = restored.and_then(|suffix| {
            recover_file(vfs, root, &file, suffix, durable, Some(end)).map_err(|error| error.to_string())
        });
        let Ok(mut outcome) = outcome else {
            recovered.report.damage.push(damage);
            continue;
        };
        if let FileOutcome::Stream { damage: found, .. } = &mut outcome {
            // The restored file's shortness is the loss just reported.
            *found = vec![damage];
        }
        recovered.dirs.insert(file.parent().unwrap_or(root).to_path_buf());
        gather(recovered, names, outcome, shard_count);
    }
}

/// Writes the lost stream file `file` again, durably, as its saved create record alone;
/// its collision suffix, or why it cannot be.
fn restore_file(vfs: &dyn Vfs, file: &Path, end: &CleanEnd, names: &HashSet<Arc<str>>) -> Result<u8, String> {
    let name = file.file_name().map(|name| name.to_string_lossy());
    let Some((_, suffix)) = name.and_then(|name| parse_file_name(&name)) else {
        return Err("not a stream file's name".into());
    };
    if end.create_record.is_empty() {
        return Err("no copy of its create record was saved".into());
    }
    if names.contains(end.name.as_ref()) {
        return Err("another file holds the stream now".into());
    }
    let dir = file.parent().expect("a stream file has a directory");
    create_dir_durably(vfs, dir)
        .and_then(|()| write_file_durably(vfs, file, &end.create_record))
        .map_err(|error| format!("it cannot be written again: {error}"))?;
    Ok(suffix)
}

/// Adds one file's outcome to the recovered streams and the report.
fn gather(
    recovered: &mut FilesRecovered,
    names: &mut HashSet<Arc<str>>,
    outcome: FileOutcome,
    shard_count: u32,
) {
    let report = &mut recovered.report;
    match outcome {
        FileOutcome::Stream { snapshot, records, bytes, damage, stale_bytes, floor } => {
            report.files += 1;
            report.records_replayed += records;
            report.bytes_replayed += bytes;
            report.stale_bytes += stale_bytes;
            report.damage.extend(damage);
            report.damaged_streams += u64::from(snapshot.damage.is_some());
            if !names.insert(Arc::clone(&snapshot.name)) {
                tracing::warn!(name = %snapshot.name, "two files hold one stream; the second is ignored");
                return;
            }
            let shard = (xxh3_64(snapshot.name.as_bytes()) & u64::from(shard_count - 1)) as usize;
            recovered.shards[shard].push(*snapshot);
            recovered.floors[shard].extend(floor);
        }
        FileOutcome::Dropped(dropped) => {
            tracing::warn!(path = %dropped.file.display(), "a file without a readable create record was moved aside: {}", dropped.reason);
            report.damage.push(dropped);
        }
        FileOutcome::Misplaced(path) => {
            tracing::warn!(path = %path.display(), "a stream file is not where its name hashes to; ignored");
        }
    }
}

/// A stream file and its collision suffix.
pub type FileEntry = (PathBuf, u8);

/// The stream directories (`streams/ab/cd`) and stream files under `root`.
pub(crate) fn list_stream_files(
    vfs: &dyn Vfs,
    root: &Path,
) -> io::Result<(BTreeSet<PathBuf>, Vec<FileEntry>)> {
    let streams = root.join(STREAMS_DIR);
    create_dir_durably(vfs, &streams)?;
    let is_hex_pair =
        |name: &str| name.len() == 2 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let mut dirs = BTreeSet::new();
    let mut files = Vec::new();
    for upper in vfs.list(&streams)?.into_iter().filter(|n| is_hex_pair(n)) {
        for lower in vfs.list(&streams.join(&upper))?.into_iter().filter(|n| is_hex_pair(n)) {
            let dir = streams.join(&upper).join(&lower);
            for name in vfs.list(&dir)? {
                if let Some((_, suffix)) = parse_file_name(&name) {
                    files.push((dir.join(&name), suffix));
                }
            }
            dirs.insert(dir);
        }
    }
    files.sort();
    Ok((dirs, files))
}

/// The bytes of the file at `path`, shared from a map.
pub(crate) fn file_bytes(vfs: &dyn Vfs, path: &Path) -> io::Result<(Arc<dyn VfsFile>, Bytes)> {
    let file = vfs.open(path)?;
    let size = file.size()?;
    let bytes = if size == 0 { Bytes::new() } else { file.map(size)?.slice(0, size as usize) };
    Ok((file, bytes))
}

/// Reads and checks one stream file (held to `clean`, its end at the last clean stop, if
/// saved), cutting off anything after its last good record.
fn recover_file(
    vfs: &dyn Vfs,
    root: &Path,
    path: &Path,
    suffix: u8,
    durable: bool,
    clean: Option<&CleanEnd>,
) -> io::Result<FileOutcome> {
    let (file, bytes) = file_bytes(vfs, path)?;
    let size = bytes.len() as u64;
    let analysis = analyze_file(&bytes, suffix, durable, clean);
    let Some(snapshot) = analysis.snapshot else {
        let reason = analysis.failure.unwrap_or_default();
        let target = drop_aside(vfs, root, path)?;
        return Ok(FileOutcome::Dropped(match analysis.unfinished_create {
            true => Damage::torn_end(target, 0, reason),
            false => Damage::new(target, 0, reason),
        }));
    };
    if !belongs_at(&snapshot.name, suffix, path, root) {
        return Ok(FileOutcome::Misplaced(path.to_path_buf()));
    }
    let position = analysis.valid_end;
    let at = |(position, reason)| Damage::new(path.to_path_buf(), position, reason);
    let mut damage: Vec<Damage> = analysis.damage.into_iter().map(at).collect();
    let mut torn = analysis.failure.map(|reason| Damage::torn_end(path.to_path_buf(), position, reason));
    if position < size {
        let cut = &bytes[position as usize..];
        if let (Some(torn), true) = (torn.as_mut(), cut.iter().any(|b| *b != 0)) {
            torn.quarantined.extend(keep_cut_tail(vfs, root, path, position, cut));
        }
        file.set_len(position)?;
        if durable {
            file.sync_data()?;
        }
    }
    damage.extend(torn);
    let floor = match (analysis.held_by_clean_end, clean, path.strip_prefix(root)) {
        (true, Some(clean), Ok(relative)) => Some((relative.to_path_buf(), clean.clone())),
        _ => None,
    };
    Ok(FileOutcome::Stream {
        snapshot: Box::new(snapshot),
        records: analysis.records,
        bytes: position,
        damage,
        stale_bytes: size - position,
        floor,
    })
}

/// Keeps the bytes cut off a stream file in `dropped/` (for inspection) before the cut, if
/// it can (not on a full disk: they were never acknowledged, so the cut goes on anyway).
fn keep_cut_tail(vfs: &dyn Vfs, root: &Path, path: &Path, position: u64, cut: &[u8]) -> Option<PathBuf> {
    let dropped = root.join(DROPPED_DIR);
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let target = dropped.join(format!("{name}.from-{position}"));
    let kept = create_dir_durably(vfs, &dropped).and_then(|()| write_file_durably(vfs, &target, cut));
    match kept {
        Ok(()) => Some(target),
        Err(error) => {
            tracing::warn!(%error, path = %path.display(), "cannot keep the bytes cut off a torn stream file");
            None
        }
    }
}

/// Moves a file that is not a stream into `dropped/` (kept for inspection).
fn drop_aside(vfs: &dyn Vfs, root: &Path, path: &Path) -> io::Result<PathBuf> {
    let dropped = root.join(DROPPED_DIR);
    create_dir_durably(vfs, &dropped)?;
    let target = dropped.join(path.file_name().unwrap_or_default());
    vfs.rename(path, &target)?;
    vfs.sync_dir(&dropped)?;
    vfs.sync_dir(path.parent().unwrap_or(root))?;
    Ok(target)
}
