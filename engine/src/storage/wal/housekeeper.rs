//! The housekeeper: slow WAL work kept off the shard threads.
//!
//! One thread per engine, at the lowest priority (`crate::scheduling::background_priority`),
//! takes tasks in order: preparing segments before a shard needs them
//! and zero-filling active ones ahead of their records, writing the checkpoints shards
//! encode (then removing segments they made unnecessary), walking deleted streams' chains
//! to subtract their records from the ledger, and saving readers' TTL renewals. Nothing acknowledged depends on any of it: a
//! failed checkpoint leaves the previous one in force (and removes nothing), a failed
//! preparation is answered to the shard (which refuses writes that need the segment).

use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

use super::ledger::{DurableCheckpoint, Ledger};
use super::source::WalSource;
use super::{segment, split_location, SegmentTable};
use crate::ids::Location;
use crate::storage::chain::{hop, NodeSource};
use crate::storage::maintenance::Resident;
use crate::storage::renewals::{self, Renewal};
use crate::storage::vfs::{write_file_durably, Vfs, VfsFile};

/// Most tasks waiting for the housekeeper (senders wait beyond it).
const QUEUE_CAPACITY: usize = 1024;

pub(crate) enum Task {
    /// Create a segment file of `size` bytes, zero-filled over its first step, and report
    /// its path.
    Prepare { dir: PathBuf, ordinal: u32, size: u64, done: Sender<io::Result<PathBuf>> },
    /// Zero-fill `from..to` of an active segment (the shard writes nothing there meanwhile).
    ZeroFill { file: Arc<dyn VfsFile>, from: u64, to: u64, done: Sender<io::Result<()>> },
    /// Subtract the records of the deleted stream whose chain ends at `tail`.
    Reclaim { source: WalSource, ledger: Arc<Ledger>, tail: Location },
    /// Write a checkpoint (`written`: where it resumes, what it counts dead), keeping the
    /// last one as a fallback; once it is durable, it becomes `durable` and the segments the
    /// fallback (what `durable` held) lets go are removed, if they are dead now too.
    Checkpoint {
        dir: PathBuf,
        bytes: Vec<u8>,
        table: Arc<SegmentTable>,
        ledger: Arc<Ledger>,
        written: DurableCheckpoint,
        durable: Arc<Mutex<DurableCheckpoint>>,
    },
    /// Save readers' TTL renewals to `path` (`crate::storage::renewals`).
    SaveRenewals { path: PathBuf, renewals: Vec<Renewal> },
    /// List the streams with records in segment `ordinal` (compaction).
    Survey { source: WalSource, ordinal: u32, reply: Sender<Vec<Resident>> },
    /// Answer once every earlier task is done (tests and shutdown).
    Flush(Sender<()>),
}

/// A handle on the housekeeper; clones share it.
#[derive(Clone)]
pub(crate) enum Housekeeper {
    /// Tasks go to the housekeeper thread.
    Thread(Sender<Task>),
    /// Tasks run on the sender's thread at once (deterministic tests).
    Inline(Arc<Mutex<Worker>>),
}

/// What runs the tasks.
pub(crate) struct Worker {
    vfs: Arc<dyn Vfs>,
}

impl Housekeeper {
    /// Starts the housekeeper thread.
    pub(crate) fn start(vfs: Arc<dyn Vfs>) -> io::Result<(Housekeeper, JoinHandle<()>)> {
        let (tasks, queue) = crossbeam_channel::bounded(QUEUE_CAPACITY);
        let mut worker = Worker { vfs };
        let thread = std::thread::Builder::new().name("ds-housekeeper".into()).spawn(move || {
            crate::scheduling::background_priority();
            queue.into_iter().for_each(|task| worker.handle(task));
        })?;
        Ok((Housekeeper::Thread(tasks), thread))
    }

    /// A housekeeper that runs each task inside `send`.
    pub(crate) fn inline(vfs: Arc<dyn Vfs>) -> Housekeeper {
        Housekeeper::Inline(Arc::new(Mutex::new(Worker { vfs })))
    }

    pub(crate) fn send(&self, task: Task) {
        match self {
            // The thread only ends after every handle is gone, so a send cannot fail while we hold one.
            Housekeeper::Thread(tasks) => {
                let _ = tasks.send(task);
            }
            Housekeeper::Inline(worker) => worker.lock().expect("housekeeper lock").handle(task),
        }
    }

    /// Asks for a prepared segment; the answer arrives on the returned channel.
    pub(crate) fn prepare(&self, dir: PathBuf, ordinal: u32, size: u64) -> Receiver<io::Result<PathBuf>> {
        let (done, answer) = crossbeam_channel::bounded(1);
        self.send(Task::Prepare { dir, ordinal, size, done });
        answer
    }

    /// Asks for `from..to` of `file` to be zero-filled; the answer arrives on the channel.
    pub(crate) fn zero_fill(&self, file: Arc<dyn VfsFile>, from: u64, to: u64) -> Receiver<io::Result<()>> {
        let (done, answer) = crossbeam_channel::bounded(1);
        self.send(Task::ZeroFill { file, from, to, done });
        answer
    }

    /// Waits until every task sent so far is done.
    pub(crate) fn flush(&self) {
        let (done, finished) = crossbeam_channel::bounded(1);
        self.send(Task::Flush(done));
        let _ = finished.recv();
    }
}

impl Worker {
    fn handle(&mut self, task: Task) {
        let vfs = self.vfs.as_ref();
        match task {
            Task::Prepare { dir, ordinal, size, done } => {
                let _ = done.send(segment::prepare(vfs, &dir, ordinal, size));
            }
            Task::ZeroFill { file, from, to, done } => {
                let _ = done.send(segment::zero_fill(file.as_ref(), from, to));
            }
            Task::Reclaim { source, ledger, tail } => reclaim(&source, &ledger, tail),
            Task::Checkpoint { dir, bytes, table, ledger, written, durable } => {
                if let Err(error) = write_checkpoint(vfs, &dir, &bytes) {
                    // The previous checkpoint stays in force; nothing is removed.
                    tracing::error!(%error, dir = %dir.display(), "cannot write a checkpoint");
                    return;
                }
                let fallback =
                    std::mem::replace(&mut *durable.lock().expect("durable checkpoint lock"), written);
                if let Err(error) = remove_dead(vfs, &dir, &table, &ledger, &fallback) {
                    tracing::error!(%error, dir = %dir.display(), "cannot remove dead segments");
                }
            }
            Task::SaveRenewals { path, renewals } => {
                if let Err(error) = renewals::save(vfs, &path, &renewals) {
                    // A stream kept alive by reads alone may come back with its window
                    // restarted at its last write or checkpoint.
                    tracing::error!(%error, path = %path.display(), "cannot save TTL renewals");
                }
            }
            Task::Survey { source, ordinal, reply } => {
                let _ = reply.send(source.streams_in(ordinal));
            }
            Task::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

/// Replaces the checkpoint, keeping the one it replaces as `checkpoint.previous`.
fn write_checkpoint(vfs: &dyn Vfs, dir: &std::path::Path, bytes: &[u8]) -> io::Result<()> {
    let current = super::checkpoint::checkpoint_path(dir);
    if vfs.exists(&current) {
        vfs.rename(&current, &dir.join(super::checkpoint::PREVIOUS_CHECKPOINT_NAME))?;
    }
    write_file_durably(vfs, &current, bytes)
}

/// Walks a deleted chain back to its create and subtracts its records from the ledger. Every
/// step is checked ([`hop`]): a damaged chain subtracts nothing, so its segments stay (a
/// wrong step could subtract another stream's live records and lose them with a segment).
fn reclaim(source: &WalSource, ledger: &Ledger, tail: Location) {
    let mut removed: BTreeMap<u32, u64> = BTreeMap::new();
    let source = &source.reader();
    let walked = source.node(tail).and_then(|mut node| loop {
        *removed.entry(split_location(node.location).0).or_default() += node.len;
        if node.n.is_create() {
            return Ok(());
        }
        node = hop(source, &node, 0)?;
    });
    match walked {
        Ok(()) => ledger.reclaimed(tail, &removed),
        Err(error) => {
            tracing::warn!(?tail, %error, "a deleted stream's records cannot be walked; its segments stay");
        }
    }
}

/// Removes the segments that hold no live record and that `fallback`, the oldest checkpoint
/// a restart may read, lets go (a segment dead there is dead in every later ledger: sealed
/// segments only lose live bytes).
fn remove_dead(
    vfs: &dyn Vfs,
    dir: &std::path::Path,
    table: &SegmentTable,
    ledger: &Ledger,
    fallback: &DurableCheckpoint,
) -> io::Result<()> {
    let mut dead = ledger.dead_below(fallback.resume);
    dead.retain(|ordinal| fallback.lets_go(*ordinal));
    if dead.is_empty() {
        return Ok(());
    }
    for ordinal in &dead {
        if let Some(segment) = table.remove(*ordinal) {
            match vfs.remove_file(&segment.path) {
                Ok(()) => tracing::debug!(path = %segment.path.display(), "removed a dead segment"),
                // Deleted under the process (its live records were moved out of the map).
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => return Err(error),
            }
        }
        ledger.forget(*ordinal);
    }
    vfs.sync_dir(dir)
}
