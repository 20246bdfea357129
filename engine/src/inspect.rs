//! Read-only access to a data directory, for offline tools (`ds-tool`).
//!
//! [`open`] reads the manifest and takes a shared lock on the directory's `LOCK` file, so it
//! is refused while a server holds its exclusive lock; with `force` it skips the lock and
//! reads whatever prefix of each log is whole at that moment (every record is checked end to
//! end, so one being written is never taken for a complete one). Every file is read through
//! `ReadOnly`: this is the analysis recovery runs, without the repair, and nothing can be
//! written.
//!
//! - acid: [`Store::shard`] analyzes one shard's log (checkpoint, then replay) and gives
//!   a `WalSource` over its segments, for reads and record scans.
//! - file modes: [`Store::stream_files`] lists the stream files; [`Store::stream_file`]
//!   reads and checks one.
//! - both: [`Store::open_stream`] finds a stream by name and reads it as a reader would.

use std::any::Any;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use xxhash_rust::xxh3::xxh3_64;

use crate::limits::Limits;
use crate::meta::ForkRef;
use crate::offset::Offset;
use crate::storage::chain::read::{LogRead, RecordSource};
use crate::storage::chain::NodeSource;
use crate::storage::chunk::{Chunk, Message, ReadError};
use crate::storage::files::analysis::{analyze_file, FileAnalysis};
use crate::storage::files::clean_ends::{self, CleanEnds};
use crate::storage::files::recovery::{file_bytes, list_stream_files};
use crate::storage::files::source::FileSource;
use crate::storage::files::{stream_path, SUFFIX_MAX};
use crate::storage::manifest::{MANIFEST_COPY_NAME, MANIFEST_NAME};
use crate::storage::open::stale_window_bytes;
use crate::storage::open::{shard_dir, LOCK_NAME};
use crate::storage::vfs::read_only::ReadOnly;
use crate::storage::vfs::real::RealVfs;
use crate::storage::vfs::{read_file, Vfs};
use crate::storage::wal::checkpoint::{checkpoint_path, Checkpoint, PREVIOUS_CHECKPOINT_NAME};
use crate::storage::wal::recovery::{analyze, Analysis};
use crate::storage::wal::source::WalSource;
use crate::storage::wal::SegmentTable;
use crate::storage::StorageMode;

pub use crate::meta::StreamSnapshot;
pub use crate::storage::files::recovery::FileEntry;
pub use crate::storage::manifest::{FileProblem, Manifest, FORMAT_VERSION};
pub use crate::storage::record::codec::{flag_names, Header as RecordHeader, Kind as RecordKind};
pub use crate::storage::record::scan::{next_header, RecordScan, ScanEnd, Scanned};
pub use crate::storage::wal::segment::Segment;

/// An opened data directory.
pub struct Store {
    pub dir: PathBuf,
    pub manifest: Manifest,
    /// What was wrong with the manifest's two files when the store was opened.
    manifest_problems: Vec<FileProblem>,
    vfs: Arc<dyn Vfs>,
    /// Where each stream file ended at the last clean stop (file modes), if saved.
    clean_ends: CleanEnds,
    /// How far past a failed record an acid log can hold a torn batch (as the server
    /// judges it for the largest record it takes: [`Store::with_record_bytes_max`]).
    torn_window_bytes: u64,
    /// The shared lock (none under `force`).
    _lock: Option<Box<dyn Any + Send + Sync>>,
}

/// Why a directory cannot be inspected.
#[derive(Debug)]
pub enum InspectError {
    Missing(PathBuf),
    NotADataDirectory(PathBuf),
    Manifest(io::Error),
    Locked(PathBuf),
}

impl fmt::Display for InspectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InspectError::Missing(dir) => write!(f, "{} does not exist", dir.display()),
            InspectError::NotADataDirectory(dir) => {
                write!(
                    f,
                    "{} is not a ds data directory (it has no {MANIFEST_NAME} nor {MANIFEST_COPY_NAME})",
                    dir.display()
                )
            }
            InspectError::Manifest(error) => write!(f, "{error}"),
            InspectError::Locked(dir) => write!(
                f,
                "{} is in use by a running server; stop it, or pass --force to read a consistent prefix",
                dir.display()
            ),
        }
    }
}

impl std::error::Error for InspectError {}

/// Opens `dir` on the real file system, read-only.
pub fn open_dir(dir: &Path, force: bool) -> Result<Store, InspectError> {
    open(Arc::new(RealVfs), dir, force)
}

/// Opens `dir` on `vfs`, read-only.
pub fn open(vfs: Arc<dyn Vfs>, dir: &Path, force: bool) -> Result<Store, InspectError> {
    let vfs: Arc<dyn Vfs> = Arc::new(ReadOnly(vfs));
    if !vfs.exists(dir) {
        return Err(InspectError::Missing(dir.to_path_buf()));
    }
    let (manifest, manifest_problems) =
        Manifest::read(vfs.as_ref(), dir).map_err(|error| match error.kind() {
            // Neither file is there.
            io::ErrorKind::NotFound => InspectError::NotADataDirectory(dir.to_path_buf()),
            _ => InspectError::Manifest(error),
        })?;
    // A server always holds the lock file; a directory without one (restored or copied
    // without it) has no server to wait for.
    let lock_path = dir.join(LOCK_NAME);
    let lock = match force || !vfs.exists(&lock_path) {
        true => None,
        false => Some(vfs.lock_shared(&lock_path).map_err(|_| InspectError::Locked(dir.to_path_buf()))?),
    };
    // Saved only by the file modes at a clean stop.
    let clean_ends = match manifest.mode {
        StorageMode::Acid => CleanEnds::new(),
        _ => clean_ends::load(vfs.as_ref(), dir),
    };
    let torn_window_bytes = stale_window_bytes(Limits::default().record_bytes_max());
    Ok(Store {
        dir: dir.to_path_buf(),
        manifest,
        manifest_problems,
        vfs,
        clean_ends,
        torn_window_bytes,
        _lock: lock,
    })
}

/// One acid shard's log, analyzed.
pub struct ShardLog {
    pub shard: u32,
    pub dir: PathBuf,
    pub analysis: Analysis,
    /// Reads records and stream data from the shard's segments.
    pub source: WalSource,
    /// The checkpoint files there are, each readable or with why not.
    pub checkpoints: Vec<(PathBuf, Result<(), String>)>,
}

/// One stream file, read and checked.
pub struct StreamFile {
    pub path: PathBuf,
    pub suffix: u8,
    pub bytes: Bytes,
    pub analysis: FileAnalysis,
    source: Option<FileSource>,
}

/// A stream found by name, ready to read (a fork's inherited messages through its source).
pub struct StreamReader {
    pub snapshot: StreamSnapshot,
    source: Source,
    /// A fork's source, found by the name and id its reference holds (`None`: not a fork,
    /// or its source is gone and its inherited messages read as damaged).
    inherited: Option<Box<StreamReader>>,
}

enum Source {
    Wal(WalSource),
    File(FileSource),
}

impl Store {
    /// Judges torn ends as a server whose largest record holds `record_bytes_max` bytes of
    /// data does (`DS_LIMITS__MAX_APPEND_BYTES`, at most the stream limit); by default, as
    /// one with the default limits.
    pub fn with_record_bytes_max(mut self, record_bytes_max: u64) -> Store {
        self.torn_window_bytes = stale_window_bytes(record_bytes_max);
        self
    }

    pub fn mode(&self) -> StorageMode {
        self.manifest.mode
    }

    /// What is wrong with the manifest's two files (`MANIFEST`, `MANIFEST-COPY`): each
    /// file's name and state, where it is damaged, differs or (the manifest itself) is
    /// missing; the manifest read is the other's.
    pub fn manifest_problems(&self) -> &[FileProblem] {
        &self.manifest_problems
    }

    pub fn shard_count(&self) -> u32 {
        self.manifest.shards
    }

    /// The shard a stream name belongs to.
    pub fn shard_of(&self, name: &str) -> u32 {
        (xxh3_64(name.as_bytes()) & u64::from(self.shard_count() - 1)) as u32
    }

    /// Analyzes acid shard `shard` (an error in the file modes).
    pub fn shard(&self, shard: u32) -> io::Result<ShardLog> {
        if self.mode() != StorageMode::Acid || shard >= self.shard_count() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("there is no acid shard {shard} here"),
            ));
        }
        let dir = shard_dir(&self.dir, shard);
        let analysis = analyze(self.vfs.as_ref(), &dir, shard, self.torn_window_bytes)?;
        let table = Arc::new(SegmentTable::default());
        for segment in &analysis.segments {
            table.insert(Arc::clone(segment));
        }
        let checkpoints = [checkpoint_path(&dir), dir.join(PREVIOUS_CHECKPOINT_NAME)]
            .into_iter()
            .filter(|path| self.vfs.exists(path))
            .map(|path| {
                let readable = read_file(self.vfs.as_ref(), &path)
                    .map_err(|e| e.to_string())
                    .and_then(|bytes| Checkpoint::decode(&bytes).map(|_| ()).map_err(|e| format!("{e:?}")));
                (path, readable)
            })
            .collect();
        Ok(ShardLog { shard, dir, analysis, source: WalSource { table }, checkpoints })
    }

    /// The stream files, in path order (file modes; none in acid).
    pub fn stream_files(&self) -> io::Result<Vec<FileEntry>> {
        if self.mode() == StorageMode::Acid {
            return Ok(Vec::new());
        }
        Ok(list_stream_files(self.vfs.as_ref(), &self.dir)?.1)
    }

    /// Stream files there at the clean stop just before now (file modes) that are gone
    /// (or moved aside): each file's path and its stream's name.
    pub fn lost_stream_files(&self) -> Vec<(PathBuf, String)> {
        let lost = clean_ends::lost(self.vfs.as_ref(), &self.dir, &self.clean_ends);
        lost.into_iter().map(|(path, end)| (path, end.name.to_string())).collect()
    }

    /// Reads and checks one stream file.
    pub fn stream_file(&self, path: &Path, suffix: u8) -> io::Result<StreamFile> {
        let (file, bytes) = file_bytes(self.vfs.as_ref(), path)?;
        let clean = path.strip_prefix(&self.dir).ok().and_then(|relative| self.clean_ends.get(relative));
        let analysis = analyze_file(&bytes, suffix, self.mode() == StorageMode::FileDurable, clean);
        let source = analysis.snapshot.as_ref().map(|s| FileSource { file, stream: s.id });
        Ok(StreamFile { path: path.to_path_buf(), suffix, bytes, analysis, source })
    }

    /// The stream called `name`, if the directory holds it; a fork is opened with its
    /// sources (at most [`crate::FORK_DEPTH_MAX`] of them).
    pub fn open_stream(&self, name: &str) -> io::Result<Option<StreamReader>> {
        let Some(asked) = self.open_own(name)? else {
            return Ok(None);
        };
        // The stream, then its source, its source's source… up to a plain stream, or a fork
        // whose source is gone (its inherited messages then read as damaged).
        let mut chain = vec![asked];
        while let Some(reference) = chain.last().and_then(|last| last.snapshot.fork.clone()) {
            let source =
                self.open_own(&reference.origin.source)?.filter(|s| s.snapshot.id == reference.source_id);
            match source {
                Some(source) if chain.len() <= crate::FORK_DEPTH_MAX as usize => chain.push(source),
                _ => break,
            }
        }
        let mut reader = chain.pop().expect("the stream asked for is there");
        while let Some(mut fork) = chain.pop() {
            fork.inherited = Some(Box::new(reader));
            reader = fork;
        }
        Ok(Some(reader))
    }

    /// The stream called `name` alone, without its sources.
    fn open_own(&self, name: &str) -> io::Result<Option<StreamReader>> {
        let reader = |snapshot: StreamSnapshot, source| StreamReader { snapshot, source, inherited: None };
        if self.mode() == StorageMode::Acid {
            let log = self.shard(self.shard_of(name))?;
            let Some(snapshot) = log.analysis.streams().find(|s| &*s.name == name).cloned() else {
                return Ok(None);
            };
            return Ok(Some(reader(snapshot, Source::Wal(log.source))));
        }
        for suffix in 0..=SUFFIX_MAX {
            let path = stream_path(&self.dir, name, suffix);
            if !self.vfs.exists(&path) {
                return Ok(None);
            }
            let file = self.stream_file(&path, suffix)?;
            if let (Some(snapshot), Some(source)) = (file.analysis.snapshot, file.source) {
                if &*snapshot.name == name {
                    return Ok(Some(reader(snapshot, Source::File(source))));
                }
            }
        }
        Ok(None)
    }
}

impl ShardLog {
    /// Whether the record `stream`'s state names as its last is there, and is that record.
    pub fn holds_last_record_of(&self, stream: &StreamSnapshot) -> bool {
        self.source
            .reader()
            .node(stream.chain_tail)
            .is_ok_and(|node| node.stream == stream.id && node.n == stream.chain_n && node.end == stream.tail)
    }
}

impl StreamReader {
    /// Whole messages from `from`, about `bytes_max` stored bytes at most (at least one);
    /// a fork's inherited ones come alone, read from its source.
    pub fn chunk(&self, from: Offset, bytes_max: usize) -> Result<Chunk, ReadError> {
        self.chunk_until(from, self.snapshot.tail, bytes_max)
    }

    /// Single messages from `from`, about `bytes_max` stored bytes at most (at least one).
    pub fn messages(&self, from: Offset, bytes_max: usize) -> Result<Vec<Message>, ReadError> {
        self.messages_until(from, self.snapshot.tail, bytes_max)
    }

    fn chunk_until(&self, from: Offset, cap: Offset, bytes_max: usize) -> Result<Chunk, ReadError> {
        if let Some(reference) = self.fork_below(from) {
            let messages = self.inherited_messages(reference, from, bytes_max)?;
            let next = messages.last().map_or(from, |message| message.next);
            let slices = messages.into_iter().map(|message| message.stored).collect();
            return Ok(Chunk { next, messages: next.messages - from.messages, slices, copied: false });
        }
        match &self.source {
            Source::Wal(source) => self.read(&source.reader(), cap).chunk(from, bytes_max),
            Source::File(source) => self.read(source, cap).chunk(from, bytes_max),
        }
    }

    fn messages_until(&self, from: Offset, cap: Offset, bytes_max: usize) -> Result<Vec<Message>, ReadError> {
        if let Some(reference) = self.fork_below(from) {
            return self.inherited_messages(reference, from, bytes_max);
        }
        match &self.source {
            Source::Wal(source) => self.read(&source.reader(), cap).messages(from, bytes_max),
            Source::File(source) => self.read(source, cap).messages(from, bytes_max),
        }
    }

    /// The fork reference that serves `from`, if the stream is a fork and `from` inherited.
    fn fork_below(&self, from: Offset) -> Option<&ForkRef> {
        self.snapshot.fork.as_ref().filter(|reference| from < reference.start())
    }

    /// Inherited messages from `from`: the source's whole ones up to the fork point, then
    /// the cut one of a binary sub-offset.
    fn inherited_messages(
        &self,
        reference: &ForkRef,
        from: Offset,
        bytes_max: usize,
    ) -> Result<Vec<Message>, ReadError> {
        let source = self.inherited.as_deref().ok_or(ReadError::Damaged)?;
        if from < reference.until {
            return source.messages_until(from, reference.until, bytes_max);
        }
        let whole = source.messages_until(reference.until, source.snapshot.tail, 1)?;
        let first = whole.into_iter().next().ok_or(ReadError::Damaged)?;
        let cut = reference.partial_bytes as usize;
        if from != reference.until || first.stored.len() < cut {
            return Err(ReadError::Damaged);
        }
        Ok(vec![Message { stored: first.stored.slice(..cut), next: reference.start() }])
    }

    fn read<'a, S: RecordSource>(&self, source: &'a S, cap: Offset) -> LogRead<'a, S> {
        LogRead {
            source,
            stream: self.snapshot.id,
            start: self.snapshot.fork.as_ref().map_or(Offset::ZERO, ForkRef::start),
            tail_location: self.snapshot.chain_tail,
            tail_n: self.snapshot.chain_n,
            tail_end: self.snapshot.tail,
            until: cap.min(self.snapshot.tail),
            json: self.snapshot.config.content_type.is_json(),
        }
    }
}
