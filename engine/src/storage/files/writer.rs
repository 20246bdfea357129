//! The commit step of the file modes: each record appended to its stream's own file.
//!
//! A create makes the stream's file (its directory first, if new) and writes the create
//! record at its start; an append writes one record (header and meta staged, a plain body
//! from the request's own buffer) at the file's end with one positional write; a delete
//! unlinks the file. file-durable then syncs each touched file once (fdatasync) and each
//! touched directory once (new and removed entries) before the batch is acknowledged;
//! file-fast acknowledges once the writes are in the page cache, so a process crash loses
//! nothing but a power loss may, except after a clean stop, which makes the file system
//! durable (`syncfs`). At a clean stop both save where each of the shard's files ends
//! (`clean_ends`), so that later starts can tell damage from a crash.
//!
//! Before a stream's first append of a batch, its file must still have its name: one deleted
//! under the process is written again from the open file (`rewrite`) rather than take
//! writes no restart finds.
//!
//! The writer remembers, for a bounded number of recently written streams (no more than the
//! shared handle cache holds, so the two together keep at most twice its files open), the
//! open file, its end and the chain levels; any other stream's file is opened again and its
//! levels rebuilt from its last record (at most 64 reads).

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::clean_ends::{self, CleanEnd};
use super::handles::Handles;
use super::rewrite::{rewrite, REWRITE_BYTES_MAX};
use super::source::FileSource;
use super::{
    incarnation, location, record_number, renewals_path, split_location, stream_dir, stream_path, SUFFIX_MAX,
};
use crate::ids::{ChainIndex, Location, StreamId};
use crate::limits::halve_when_over;
use crate::meta::StreamSnapshot;
use crate::storage::chain::{Chain, Levels, NodeSource};
use crate::storage::record::codec::{decode_record, Header, Kind, HEADER_BYTES};
use crate::storage::record::{encode, Record};
use crate::storage::renewals::{self, Renewal, RenewalStore};
use crate::storage::root_watch::RootWatch;
use crate::storage::vfs::{read_exact_at, Vfs, VfsFile};
use crate::storage::{write_failed, CommitError, Committing, NoRoom, Persist, Place, Purpose, Unprepared};

/// Streams whose writer state is kept between batches, at most (no more than the handle
/// cache holds files: each remembered stream keeps its file open).
const STREAMS_CACHED_MAX: usize = 4096;
/// Free disk space writes leave untouched: room for file system metadata, directories and
/// the blocks files round up to, so that a write the shard accepted finds its room.
const FREE_BYTES_KEPT: u64 = 8 << 20;
/// How often, at most, a stream's first append of a batch asks whether its file still has
/// its name (an `fstat`).
const LINKED_CHECK_INTERVAL: Duration = Duration::from_millis(10);

/// What the writer knows of a stream's file.
struct OpenStream {
    file: Arc<dyn VfsFile>,
    suffix: u8,
    /// Where the next record goes.
    end: u64,
    levels: Levels,
    /// When the file was last found to still have its name (`None`: never yet).
    linked_checked: Option<Instant>,
}

pub(crate) struct FileWriter {
    vfs: Arc<dyn Vfs>,
    root: PathBuf,
    /// Whether `root` is still there (no writes once it is not).
    root_watch: Arc<RootWatch>,
    /// The shard this writer serves (names its saved renewals).
    shard: u32,
    /// file-durable: sync files and directories before acknowledging.
    durable: bool,
    handles: Arc<Handles>,
    streams: HashMap<StreamId, OpenStream>,
    /// Stream directories known to exist (and to be durable in file-durable).
    dirs: BTreeSet<PathBuf>,
    staging: Vec<u8>,
    meta: Vec<u8>,
    /// This batch's written files and changed directories, to sync.
    touched_files: Vec<(StreamId, Arc<dyn VfsFile>)>,
    touched_dirs: BTreeSet<PathBuf>,
    /// Free bytes on the data directory's file system (read once per batch), and the bytes
    /// this batch's accepted ops will write.
    free_bytes: Option<u64>,
    reserved_bytes: u64,
    /// Saved ends that found files short at start (`clean_ends`): kept through the next
    /// clean stop, so the damage is found again at every start (paths under `root`).
    floors: HashMap<PathBuf, CleanEnd>,
}

impl FileWriter {
    pub(crate) fn new(
        vfs: Arc<dyn Vfs>,
        root: PathBuf,
        shard: u32,
        durable: bool,
        handles: Arc<Handles>,
        dirs: BTreeSet<PathBuf>,
        root_watch: Arc<RootWatch>,
    ) -> FileWriter {
        FileWriter {
            vfs,
            root,
            root_watch,
            shard,
            durable,
            handles,
            streams: HashMap::new(),
            dirs,
            staging: Vec::new(),
            meta: Vec::new(),
            touched_files: Vec::new(),
            touched_dirs: BTreeSet::new(),
            free_bytes: None,
            reserved_bytes: 0,
            floors: HashMap::new(),
        }
    }

    /// The saved ends that found this shard's files short at start (`FilesRecovered::floors`).
    pub(crate) fn with_floors(mut self, floors: Vec<(PathBuf, CleanEnd)>) -> FileWriter {
        self.floors = floors.into_iter().collect();
        self
    }

    fn write(&mut self, record: &Record, time_ms: u64) -> io::Result<Place> {
        match record {
            Record::Create { stream, name, .. } => {
                let (suffix, file) = self.create_file(name)?;
                let mut open =
                    OpenStream { file, suffix, end: 0, levels: Levels::default(), linked_checked: None };
                self.append_record(
                    &mut open,
                    record,
                    Chain { n: ChainIndex::CREATE, jumps: Vec::new() },
                    time_ms,
                )?;
                self.touched_files.push((*stream, Arc::clone(&open.file)));
                self.handles.insert(*stream, Arc::clone(&open.file));
                self.streams.insert(*stream, open);
                Ok(Place { location: location(suffix, 0), n: ChainIndex::CREATE })
            }
            Record::Append { stream, name, chain_tail, .. } => {
                let mut open = self.open_stream(*stream, name, *chain_tail)?;
                let chain = open.levels.next_chain();
                let place = Place { location: location(open.suffix, open.end), n: chain.n };
                let written = self.append_record(&mut open, record, chain, time_ms);
                self.touched_files.push((*stream, Arc::clone(&open.file)));
                self.streams.insert(*stream, open);
                written.map(|()| place)
            }
            Record::Delete { stream, name, chain_tail, soft: true, .. } => {
                let mut open = self.open_stream(*stream, name, *chain_tail)?;
                let written = self.append_soft_delete(&mut open, record, time_ms);
                self.touched_files.push((*stream, Arc::clone(&open.file)));
                self.streams.insert(*stream, open);
                written.map(|()| Place::default())
            }
            Record::Delete { stream, name, chain_tail, .. } => {
                let suffix =
                    self.streams.remove(stream).map_or(split_location(*chain_tail).0, |open| open.suffix);
                self.handles.remove(*stream);
                self.touched_files.retain(|(touched, _)| touched != stream);
                let path = stream_path(&self.root, name, suffix);
                match self.vfs.remove_file(&path) {
                    // A damaged stream's file may already be gone.
                    Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                    removed => removed?,
                }
                self.touched_dirs.insert(parent(&path));
                Ok(Place::default())
            }
        }
    }

    /// The writer state of `stream`, taken out of the map (put it back after writing).
    fn open_stream(&mut self, stream: StreamId, name: &str, chain_tail: Location) -> io::Result<OpenStream> {
        match self.streams.remove(&stream) {
            Some(open) => Ok(open),
            None => self.reopen(stream, name, chain_tail).map_err(|unprepared| {
                io::Error::other(format!("reopening a prepared stream: {unprepared:?}"))
            }),
        }
    }

    /// Appends a soft delete to `open`'s file, numbered as the next record but outside the
    /// chain: nothing follows it until the stream goes for good.
    fn append_soft_delete(&mut self, open: &mut OpenStream, record: &Record, time_ms: u64) -> io::Result<()> {
        let prepared = encode::prepare(record, None, &mut self.meta)?;
        self.staging.clear();
        let index = open.levels.next_index();
        let staged = encode::stage(&prepared, &self.meta, record_number(index), time_ms, &mut self.staging);
        debug_assert!(staged.body.is_none(), "a delete carries no data");
        open.file.write_all_at(open.end, &[&self.staging[staged.head], staged.padding])?;
        open.end += prepared.record_len as u64;
        Ok(())
    }

    /// Encodes `record` with `chain` and appends it to `open`'s file (one write).
    fn append_record(
        &mut self,
        open: &mut OpenStream,
        record: &Record,
        chain: Chain,
        time_ms: u64,
    ) -> io::Result<()> {
        let prepared = encode::prepare(record, Some(&chain), &mut self.meta)?;
        self.staging.clear();
        let staged = encode::stage(&prepared, &self.meta, record_number(chain.n), time_ms, &mut self.staging);
        let head = &self.staging[staged.head];
        match staged.body {
            Some(body) => open.file.write_all_at(open.end, &[head, body, staged.padding])?,
            None => open.file.write_all_at(open.end, &[head, staged.padding])?,
        }
        let at = location(open.suffix, open.end);
        if chain.n.is_create() {
            open.levels = Levels::started_at(at);
        } else {
            open.levels.push(at);
        }
        open.end += prepared.record_len as u64;
        debug_assert_eq!(open.levels.next_index(), chain.n.next(), "the chain grows by one");
        Ok(())
    }

    /// The writer state of a stream it does not remember: its file, end and chain levels.
    fn reopen(
        &mut self,
        stream: StreamId,
        name: &str,
        chain_tail: Location,
    ) -> Result<OpenStream, Unprepared> {
        let (suffix, _) = split_location(chain_tail);
        let path = stream_path(&self.root, name, suffix);
        let file = self.handles.get_or_open(stream, || self.vfs.open(&path)).map_err(|error| match error
            .kind()
        {
            io::ErrorKind::NotFound => Unprepared::Damaged(format!("its file {} is gone", path.display())),
            _ => Unprepared::Unavailable(error),
        })?;
        let end = file.size().map_err(Unprepared::Unavailable)?;
        let source = FileSource { file: Arc::clone(&file), stream };
        let tail = source.node(chain_tail).map_err(Unprepared::from)?;
        let levels = Levels::rebuild(&source, &tail).map_err(Unprepared::from)?;
        if tail.location.plus(tail.len) != location(suffix, end) {
            return Err(Unprepared::Damaged(format!(
                "its file {} does not end after its last record",
                path.display()
            )));
        }
        Ok(OpenStream { file, suffix, end, levels, linked_checked: None })
    }

    /// Creates the file of a new stream `name`: the first free suffix whose file does not
    /// belong to another name (a hash collision).
    fn create_file(&mut self, name: &str) -> io::Result<(u8, Arc<dyn VfsFile>)> {
        self.ensure_dir(&stream_dir(&self.root, name))?;
        for suffix in 0..=SUFFIX_MAX {
            let path = stream_path(&self.root, name, suffix);
            match self.vfs.create_new(&path) {
                Ok(file) => {
                    self.touched_dirs.insert(parent(&path));
                    return Ok((suffix, file));
                }
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                    if stream_name_in(self.vfs.as_ref(), &path).as_deref() == Some(name) {
                        // A leftover of this name (no live stream has it): replace it.
                        self.vfs.remove_file(&path)?;
                        let file = self.vfs.create_new(&path)?;
                        self.touched_dirs.insert(parent(&path));
                        return Ok((suffix, file));
                    }
                }
                Err(error) => return Err(error),
            }
        }
        Err(io::Error::other(format!("more than {SUFFIX_MAX} stream names share one hash")))
    }

    /// Creates a stream directory (and its parent) if needed; new entries are synced with
    /// the batch.
    fn ensure_dir(&mut self, dir: &Path) -> io::Result<()> {
        if self.dirs.contains(dir) {
            return Ok(());
        }
        let upper = parent(dir);
        for (path, holder) in [(upper.clone(), parent(&upper)), (dir.to_path_buf(), upper.clone())] {
            if !self.vfs.exists(&path) {
                // Making the directory would make the data directory again, were it gone
                // (the look that reserving room makes is at most every 10 ms).
                if self.root_watch.look_now() {
                    let gone = io::Error::new(
                        io::ErrorKind::NotFound,
                        "the data directory was removed under the server",
                    );
                    return Err(write_failed(gone));
                }
                self.vfs.create_dir_all(&path)?;
                self.touched_dirs.insert(holder);
            }
        }
        self.dirs.insert(dir.to_path_buf());
        Ok(())
    }

    /// Writes the file of `stream` (called `name`), deleted under the process, again from
    /// the open file; a stream too long for that, or a failure, makes it damaged: nothing
    /// more is acknowledged for it (what it holds is still read from the open file until
    /// the process stops).
    fn rewrite_deleted(&mut self, stream: StreamId, name: &str) -> Result<(), Unprepared> {
        let open = self.streams.get_mut(&stream).expect("a stream being prepared");
        let path = stream_path(&self.root, name, open.suffix);
        if open.end > REWRITE_BYTES_MAX {
            return Err(Unprepared::Damaged("its file was deleted under the server".to_string()));
        }
        match rewrite(self.vfs.as_ref(), &path, open.file.as_ref(), open.end, self.durable) {
            Ok(file) => {
                tracing::error!(
                    path = %path.display(),
                    bytes = open.end,
                    "a stream's file was deleted under the server; it was written again from the open file"
                );
                self.handles.replace(stream, Arc::clone(&file));
                open.file = file;
                Ok(())
            }
            Err(error) => Err(Unprepared::Damaged(format!(
                "its file was deleted under the server and could not be written again: {error}"
            ))),
        }
    }

    /// Where `stream`'s file ends now (or its saved end, where that found the file short),
    /// named by its path under the data directory; `None` when that cannot be told (its
    /// file cannot be read), which later starts then judge as after a crash.
    fn clean_end(&self, stream: &StreamSnapshot) -> Option<(PathBuf, CleanEnd)> {
        let (suffix, _) = split_location(stream.chain_tail);
        let path = stream_path(&self.root, &stream.name, suffix);
        let file = match self.streams.get(&stream.id) {
            Some(open) => Arc::clone(&open.file),
            None => self.vfs.open(&path).ok()?,
        };
        let mut header = [0; HEADER_BYTES];
        read_exact_at(file.as_ref(), 0, &mut header).ok()?;
        let (len, create_check) = (file.size().ok()?, clean_ends::create_check(&header)?);
        let relative = path.strip_prefix(&self.root).ok()?.to_path_buf();
        let mut end = CleanEnd {
            name: stream.name.as_ref().into(),
            len,
            create_check,
            deleted: stream.deleted,
            create_record: create_record_in(file.as_ref()).unwrap_or_default().into(),
            fresh: false,
        };
        if let Some(floor) = self.floors.get(&relative).filter(|floor| floor.create_check == create_check) {
            end.len = end.len.max(floor.len);
            end.deleted |= floor.deleted;
        }
        Some((relative, end))
    }

    /// file-durable: each touched file's data, then each changed directory.
    fn sync_touched(&mut self) -> io::Result<()> {
        if self.durable {
            self.touched_files.sort_by_key(|(stream, _)| *stream);
            self.touched_files.dedup_by_key(|(stream, _)| *stream);
            for (_, file) in &self.touched_files {
                file.sync_data()?;
            }
            // Deepest first: a new directory's own entries before its parent's entry for it.
            for dir in self.touched_dirs.iter().rev() {
                self.vfs.sync_dir(dir)?;
            }
        }
        self.touched_files.clear();
        self.touched_dirs.clear();
        Ok(())
    }
}

impl Persist for FileWriter {
    fn directory_removed(&self) -> bool {
        self.root_watch.look_now()
    }

    fn prepare_append(
        &mut self,
        stream: StreamId,
        name: &str,
        chain_tail: Location,
    ) -> Result<(), Unprepared> {
        if !self.streams.contains_key(&stream) {
            let open = self.reopen(stream, name, chain_tail)?;
            self.streams.insert(stream, open);
        }
        // A file deleted under the process would take appends (and syncs) that no restart
        // finds: it is written again from the open file first (`rewrite`).
        let open = self.streams.get_mut(&stream).expect("prepared above");
        if open.linked_checked.is_some_and(|at| at.elapsed() < LINKED_CHECK_INTERVAL) {
            return Ok(());
        }
        open.linked_checked = Some(Instant::now());
        // With the whole directory gone there is nowhere to write it: the store takes no
        // writes at all, which reserving room says (`root_watch`).
        if matches!(open.file.linked(), Ok(false)) && !self.root_watch.look_now() {
            self.rewrite_deleted(stream, name)?;
        }
        Ok(())
    }

    fn commit(&mut self, batch: Committing<'_>, places: &mut Vec<Place>) -> Result<(), CommitError> {
        debug_assert!(batch.moves.is_empty(), "stream files are never compacted");
        // Files and directories are made, written and removed first, synced only after.
        for record in batch.records {
            places.push(self.write(record, batch.time_ms).map_err(write_failed)?);
        }
        self.sync_touched()?;
        halve_when_over(&mut self.streams, STREAMS_CACHED_MAX.min(self.handles.capacity()));
        self.free_bytes = None;
        self.reserved_bytes = 0;
        Ok(())
    }

    /// Writes need the free space they take (a new file a block more) beyond what is kept
    /// free; deletes give space back and always may.
    fn reserve(&mut self, bytes: u64, purpose: Purpose, now_ms: u64) -> Result<(), NoRoom> {
        if self.root_watch.lost(now_ms) {
            return Err(NoRoom::DirectoryRemoved);
        }
        if purpose == Purpose::Delete {
            return Ok(());
        }
        let free = *self.free_bytes.get_or_insert_with(|| self.vfs.free_bytes(&self.root));
        let needed = self.reserved_bytes.saturating_add(bytes).saturating_add(FREE_BYTES_KEPT);
        if free < needed {
            return Err(NoRoom::OutOfSpace);
        }
        self.reserved_bytes += bytes;
        Ok(())
    }

    fn renewals(&mut self) -> Option<&mut dyn RenewalStore> {
        Some(self)
    }

    fn saves_clean_ends(&self) -> bool {
        !self.root_watch.known_lost()
    }

    /// Runs on the shard thread after its last commit: file-durable has synced every file;
    /// file-fast, which syncs nothing as it goes, makes the file system durable first (one
    /// `syncfs`), so that its clean stop leaves nothing to lose and its ends hold.
    fn stopped_cleanly(&mut self, streams: &[StreamSnapshot]) {
        if !self.durable {
            if let Err(error) = self.vfs.sync_file_system(&self.root) {
                tracing::error!(%error, shard = self.shard, "cannot make the stream files durable at the stop");
                return;
            }
        }
        let ends: Vec<(PathBuf, CleanEnd)> =
            streams.iter().filter_map(|stream| self.clean_end(stream)).collect();
        if let Err(error) = clean_ends::save(self.vfs.as_ref(), &self.root, self.shard, &ends) {
            tracing::warn!(%error, shard = self.shard, "cannot save where stream files end: the next start judges them as after a crash");
        }
    }
}

impl RenewalStore for FileWriter {
    fn incarnation(&self, _id: StreamId, chain_tail: Location) -> u64 {
        incarnation(chain_tail)
    }

    /// Saves on the shard thread: the file holds a few dozen bytes per stream with a TTL.
    fn save(&mut self, renewals: Vec<Renewal>, _wait: bool) {
        if self.root_watch.known_lost() {
            // Saving would make the directory again, without the store's manifest.
            return;
        }
        let path = renewals_path(&self.root, self.shard);
        if let Err(error) = renewals::save(self.vfs.as_ref(), &path, &renewals) {
            // A stream kept alive by reads alone may come back with its window restarted at
            // its last write (or last saved renewal).
            tracing::error!(%error, shard = self.shard, "cannot save TTL renewals");
        }
    }
}

fn parent(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

/// The stream a file's create record names, if it has a readable one.
pub(crate) fn stream_name_in(vfs: &dyn Vfs, path: &Path) -> Option<String> {
    let file = vfs.open(path).ok()?;
    let record = create_record_in(file.as_ref())?;
    let first = decode_record(&record).ok()?;
    first.meta.create.map(|create| create.name.into_string())
}

/// The bytes of the create record a stream file opens with, if it is readable (it passes
/// its checks) and no larger than a saved end keeps.
fn create_record_in(file: &dyn VfsFile) -> Option<Vec<u8>> {
    let mut raw = [0u8; HEADER_BYTES];
    read_exact_at(file, 0, &mut raw).ok()?;
    let header = Header::decode(&raw).ok()?;
    if header.kind != Kind::Create || header.record_len() > clean_ends::CREATE_RECORD_SAVED_MAX {
        return None;
    }
    let mut record = vec![0u8; header.record_len()];
    read_exact_at(file, 0, &mut record).ok()?;
    decode_record(&record).ok()?;
    Some(record)
}
