//! Opening a data directory: the lock, the manifest, and each shard's recovered state.
//!
//! Memory mode opens nothing. acid locks `DS_STORAGE__DATA_DIR` (an exclusive fs2 lock, so
//! a second process is refused), checks or writes the manifest, starts the housekeeper, and
//! recovers every shard from `shard-NNN/` in parallel before any shard serves. Shards whose
//! directories are on one file system that allows it share device flushes (`flush`).

use std::any::Any;
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::manifest::Manifest;
use super::RecoveryReport;
use super::{LogStore, MemoryPersist, Persist};
use crate::ids::{Location, StreamId};
use crate::meta::StreamSnapshot;
use crate::storage::files;
use crate::storage::files::handles::Handles;
use crate::storage::files::source::FileStore;
use crate::storage::files::writer::FileWriter;
use crate::storage::flush::FlushGroup;
use crate::storage::flush_file;
use crate::storage::record::codec::{HEADER_BYTES, META_BYTES_MAX, RECORD_ALIGN};
use crate::storage::root_watch::RootWatch;
use crate::storage::vfs::{create_dir_durably, Vfs};
use crate::storage::wal::housekeeper::{Housekeeper, Task};
use crate::storage::wal::ledger::Ledger;
use crate::storage::wal::recovery::{self, Recovered, RecoverySettings};
use crate::storage::wal::writer::{WalWriter, SYNC_RUN_BYTES_MAX};
use crate::storage::wal::zero_waits::ZeroWaits;
use crate::storage::wal::ShardFiles;
use crate::storage::StorageMode;

/// Name of the lock file at the root of a data directory.
pub(crate) const LOCK_NAME: &str = "LOCK";
/// A record's header, meta and padding beyond its data, at most.
const RECORD_OVERHEAD_MAX: u64 = (HEADER_BYTES + META_BYTES_MAX + RECORD_ALIGN) as u64;

/// One shard's storage, ready to serve.
pub(crate) struct OpenedShard {
    pub persist: Box<dyn Persist>,
    pub log: Option<Arc<dyn LogStore>>,
    pub streams: Vec<StreamSnapshot>,
    pub stream_id_next: StreamId,
    pub report: Option<RecoveryReport>,
}

impl OpenedShard {
    /// A shard of memory mode: nothing to recover, nothing to write.
    pub(crate) fn memory() -> OpenedShard {
        OpenedShard {
            persist: Box::new(MemoryPersist),
            log: None,
            streams: Vec::new(),
            stream_id_next: StreamId::FIRST,
            report: None,
        }
    }
}

/// A data directory opened for a mode.
pub(crate) struct OpenedStore {
    pub shards: Vec<OpenedShard>,
    /// Held until the engine stops: the exclusive lock on the data directory.
    pub lock: Option<Box<dyn Any + Send + Sync>>,
    /// The housekeeper thread (it ends once the shards' writers are gone).
    pub housekeeper: Option<JoinHandle<()>>,
    /// How commits become durable, one group per file system (acid), for statistics.
    pub flush_groups: Vec<Arc<FlushGroup>>,
    /// How long the shards waited for zeros (acid), for statistics.
    pub zero_waits: Option<Arc<ZeroWaits>>,
}

/// What opening a data directory needs (the engine's configuration, as storage sees it).
pub(crate) struct StoreSettings {
    pub mode: StorageMode,
    pub data_dir: PathBuf,
    pub shard_count: u32,
    /// Size of each WAL segment (acid).
    pub segment_bytes: u64,
    /// The largest record's data (how far a torn write can reach).
    pub record_bytes_max: u64,
    /// Stream files kept open across all shards (file modes).
    pub file_handles_max: usize,
    /// Everything on the caller's thread, in a fixed order (deterministic tests): no
    /// housekeeper thread, no parallel recovery.
    pub inline: bool,
    pub vfs: Arc<dyn Vfs>,
    /// The time recovery takes as now (clock milliseconds).
    pub now_ms: u64,
    /// Shards on one file system share device flushes where it is safe (`flush`).
    pub shared_flush: bool,
}

/// Why a data directory could not be opened.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// The directory cannot be locked, labelled, read or recovered.
    Storage(String),
    /// The housekeeper thread could not be started.
    Spawn(std::io::Error),
}

fn storage_error(what: String) -> impl FnOnce(std::io::Error) -> OpenError {
    move |error| OpenError::Storage(format!("{what}: {error}"))
}

/// The directory of shard `index`.
pub(crate) fn shard_dir(data_dir: &Path, index: u32) -> PathBuf {
    data_dir.join(format!("shard-{index:03}"))
}

pub(crate) fn open(config: &StoreSettings) -> Result<OpenedStore, OpenError> {
    match config.mode {
        StorageMode::Memory => Ok(OpenedStore {
            shards: (0..config.shard_count).map(|_| OpenedShard::memory()).collect(),
            lock: None,
            housekeeper: None,
            flush_groups: Vec::new(),
            zero_waits: None,
        }),
        StorageMode::Acid => open_acid(config),
        StorageMode::FileFast | StorageMode::FileDurable => open_files(config),
    }
}

/// Creates the data directory if needed, takes its exclusive lock and checks (or writes)
/// its manifest; the lock, and the watch that tells when the directory is removed.
fn lock_data_dir(config: &StoreSettings) -> Result<(Box<dyn Any + Send + Sync>, Arc<RootWatch>), OpenError> {
    let vfs = config.vfs.as_ref();
    let dir = &config.data_dir;
    create_dir_durably(vfs, dir).map_err(storage_error(format!("cannot create {}", dir.display())))?;
    let lock_path = dir.join(LOCK_NAME);
    let lock = vfs.lock_exclusive(&lock_path).map_err(|error| match error.kind() {
        std::io::ErrorKind::WouldBlock => {
            OpenError::Storage(format!("{} is in use by another process", dir.display()))
        }
        _ => OpenError::Storage(format!("cannot lock {}: {error}", lock_path.display())),
    })?;
    Manifest::check_or_create(vfs, dir, &Manifest::new(config.mode, config.shard_count))
        .map_err(|error| OpenError::Storage(error.to_string()))?;
    let root = RootWatch::open(vfs, dir).map_err(storage_error(format!("cannot open {}", dir.display())))?;
    Ok((lock, Arc::new(root)))
}

/// file-fast and file-durable: every stream file read back, then one writer and one reader
/// view per shard over a shared cache of open files.
fn open_files(config: &StoreSettings) -> Result<OpenedStore, OpenError> {
    let (lock, root) = lock_data_dir(config)?;
    let vfs = Arc::clone(&config.vfs);
    let durable = config.mode == StorageMode::FileDurable;
    let threads = match config.inline {
        true => 1,
        false => std::thread::available_parallelism().map_or(1, |n| n.get()).min(8),
    };
    let recovered =
        files::recovery::recover(vfs.as_ref(), &config.data_dir, config.shard_count, durable, threads)
            .map_err(storage_error("recovering stream files".into()))?;
    let handles_per_shard = (config.file_handles_max / config.shard_count as usize).max(16);
    let mut report = Some(recovered.report);
    let mut floors = recovered.floors;
    let mut shards = Vec::with_capacity(recovered.shards.len());
    for (shard, streams) in (0..).zip(recovered.shards) {
        let handles = Arc::new(Handles::new(handles_per_shard));
        let writer = FileWriter::new(
            Arc::clone(&vfs),
            config.data_dir.clone(),
            shard,
            durable,
            Arc::clone(&handles),
            recovered.dirs.clone(),
            Arc::clone(&root),
        )
        .with_floors(std::mem::take(&mut floors[shard as usize]));
        let store = FileStore { vfs: Arc::clone(&vfs), root: config.data_dir.clone(), handles };
        let stream_id_next = streams.iter().map(|s| s.id.next()).max().unwrap_or(StreamId::FIRST);
        shards.push(OpenedShard {
            persist: Box::new(writer),
            log: Some(Arc::new(store)),
            streams,
            stream_id_next,
            report: report.take(),
        });
    }
    Ok(OpenedStore {
        shards,
        lock: Some(lock),
        housekeeper: None,
        flush_groups: Vec::new(),
        zero_waits: None,
    })
}

/// Bytes past the last good record of an acid log within which a crash can have left a torn
/// batch, when the largest record holds `record_bytes_max` bytes of data: a sync run and one
/// more record (a record beyond that is proof the log went on).
pub(crate) fn stale_window_bytes(record_bytes_max: u64) -> u64 {
    SYNC_RUN_BYTES_MAX + record_bytes_max + RECORD_OVERHEAD_MAX
}

/// Recovers every shard: in parallel, or one after another under manual threading (so a
/// simulated disk sees the same operations in the same order for the same seed).
fn recover_shards(config: &StoreSettings, vfs: &dyn Vfs) -> Vec<std::io::Result<Recovered>> {
    let stale_window_bytes = stale_window_bytes(config.record_bytes_max);
    let now_ms = config.now_ms;
    let dir = &config.data_dir;
    let recover = |shard: u32| {
        let settings =
            RecoverySettings { shard, segment_bytes: config.segment_bytes, stale_window_bytes, now_ms };
        recovery::recover(vfs, &shard_dir(dir, shard), &settings)
    };
    if config.inline {
        return (0..config.shard_count).map(recover).collect();
    }
    std::thread::scope(|scope| {
        let recover = &recover;
        let tasks: Vec<_> =
            (0..config.shard_count).map(|shard| scope.spawn(move || recover(shard))).collect();
        tasks.into_iter().map(|task| task.join().expect("recovery threads do not panic")).collect()
    })
}

fn open_acid(config: &StoreSettings) -> Result<OpenedStore, OpenError> {
    let (lock, root) = lock_data_dir(config)?;
    let vfs = Arc::clone(&config.vfs);
    let (housekeeper, thread) = match config.inline {
        false => {
            let (housekeeper, thread) = Housekeeper::start(Arc::clone(&vfs)).map_err(OpenError::Spawn)?;
            (housekeeper, Some(thread))
        }
        true => (Housekeeper::inline(Arc::clone(&vfs)), None),
    };
    let recovered = recover_shards(config, vfs.as_ref());
    let mut shards = Vec::with_capacity(recovered.len());
    let mut flush_groups = FlushGroups::default();
    let zero_waits = Arc::new(ZeroWaits::default());
    for (shard, result) in recovered.into_iter().enumerate() {
        let recovered = result.map_err(storage_error(format!("recovering shard {shard}")))?;
        let dir = shard_dir(&config.data_dir, shard as u32);
        let ledger = Arc::new(Ledger::from_state(recovered.ledger));
        let pending: Vec<Location> = ledger.snapshot().pending.into_iter().collect();
        let domain = config.shared_flush.then(|| vfs.flush_domain(&dir)).flatten();
        let flush = flush_groups
            .for_domain(domain, vfs.as_ref(), &dir)
            .map_err(storage_error(format!("opening the flush file in {}", dir.display())))?;
        let files = ShardFiles {
            vfs: Arc::clone(&vfs),
            flush,
            dir,
            shard: shard as u32,
            segment_bytes: config.segment_bytes,
            root: Arc::clone(&root),
            zero_waits: Arc::clone(&zero_waits),
        };
        let writer = WalWriter::new(
            files,
            Arc::clone(&recovered.table),
            Arc::clone(&ledger),
            housekeeper.clone(),
            recovered.position,
            recovered.checkpoint,
        );
        let source = writer.source();
        for tail in pending {
            housekeeper.send(Task::Reclaim { source: source.clone(), ledger: Arc::clone(&ledger), tail });
        }
        shards.push(OpenedShard {
            persist: Box::new(writer),
            log: Some(Arc::new(source)),
            streams: recovered.streams,
            stream_id_next: recovered.stream_id_next,
            report: Some(recovered.report),
        });
    }
    let flush_groups = flush_groups.all();
    let shared = flush_groups.iter().any(|group| group.is_shared());
    tracing::info!(
        shared,
        "device flushes {}",
        if shared { "shared by the shards of each file system" } else { "per shard" }
    );
    Ok(OpenedStore {
        shards,
        lock: Some(lock),
        housekeeper: thread,
        flush_groups,
        zero_waits: Some(zero_waits),
    })
}

/// One shared flush group per file system that allows it, one per-file group for the rest.
#[derive(Default)]
struct FlushGroups {
    shared: BTreeMap<u64, Arc<FlushGroup>>,
    per_file: Option<Arc<FlushGroup>>,
}

impl FlushGroups {
    /// The group of the shard in `dir`, on the file system `domain` names (`None`: per file).
    fn for_domain(
        &mut self,
        domain: Option<u64>,
        vfs: &dyn Vfs,
        dir: &Path,
    ) -> std::io::Result<Arc<FlushGroup>> {
        let group = match domain {
            Some(domain) => match self.shared.entry(domain) {
                Entry::Occupied(group) => group.into_mut(),
                Entry::Vacant(slot) => slot.insert(FlushGroup::shared(flush_file::open(vfs, dir)?)),
            },
            None => self.per_file.get_or_insert_with(FlushGroup::per_file),
        };
        Ok(Arc::clone(group))
    }

    fn all(self) -> Vec<Arc<FlushGroup>> {
        self.shared.into_values().chain(self.per_file).collect()
    }
}
