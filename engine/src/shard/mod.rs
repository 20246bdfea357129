//! A shard: the single writer of its streams, running one OS thread.
//!
//! The loop (group commit):
//! 1. block for the first op, then drain more without blocking, up to the batch limits;
//! 2. apply each op in order against the writer state ([`apply`]), turning each accepted op
//!    into one [`Record`];
//! 3. make the batch's records durable (memory mode: nothing to do);
//! 4. publish: copy each touched stream's writer state to its published view, fold creates
//!    and deletes into the directory, send the replies, wake each touched stream's live
//!    readers once.
//!
//! Nothing is replied, and nothing becomes visible to readers, before step 3 returns. A
//! failure in step 3 is fatal to the process: it never acknowledges what it could not store.

mod apply;
pub(crate) mod directory;
mod expiry;

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};

use crate::content_type::ContentType;
use crate::limits::{ByteBudget, Limits};
use crate::live::LiveRegistry;
use crate::op::{AppendOutcome, CreateOutcome, Op, OpError, Reply};
use crate::record::Record;
use crate::storage::Persist;
use crate::stream::{Published, Stream};
use crate::time::Clock;
use directory::{Directory, Overlay};
use expiry::ExpiryQueue;

/// Longest a shard sleeps without looking at its expiry queue.
const IDLE_WAKE_MS_MAX: u64 = 1000;
/// Most distinct content types a shard keeps shared copies of.
const CONTENT_TYPES_SHARED_MAX: usize = 64;

/// The parts of a shard that readers and the engine use from other threads.
pub(crate) struct ShardShared {
    pub directory: Directory,
    pub live: Arc<LiveRegistry>,
    ops: Sender<Op>,
}

impl ShardShared {
    /// Sends an op without waiting; returns it back when the queue is full or closed.
    pub fn submit(&self, op: Op) -> Result<(), OpError> {
        self.ops.try_send(op).map_err(|error| match error {
            TrySendError::Full(_) => OpError::Overloaded,
            TrySendError::Disconnected(_) => OpError::ShuttingDown,
        })
    }

    /// Best-effort housekeeping request (dropped when the queue is busy).
    pub fn request(&self, op: Op) {
        let _ = self.ops.try_send(op);
    }

    /// Asks the shard to finish its batch and stop, waiting for queue space if needed.
    pub fn stop(&self) {
        let _ = self.ops.send(Op::Stop);
    }
}

/// Batch limits and the clock of a shard.
#[derive(Clone, Debug)]
pub(crate) struct ShardSettings {
    pub limits: Limits,
    pub batch_ops_max: usize,
    pub batch_bytes_max: usize,
    pub clock: Clock,
}

pub(crate) struct Shard {
    shared: Arc<ShardShared>,
    ops: Receiver<Op>,
    budget: Arc<ByteBudget>,
    settings: ShardSettings,
    persist: Box<dyn Persist>,
    expiry: ExpiryQueue,
    content_types: Vec<ContentType>,
    stream_id_next: u64,
    batch_number: u64,
}

/// One group commit's worth of applied ops.
pub(crate) struct Batch {
    number: u64,
    now_ms: u64,
    records: Vec<Record>,
    touched: Vec<Arc<Stream>>,
    overlay: Overlay,
    replies: Vec<Pending>,
    payload_bytes: usize,
}

/// A reply that waits for the batch's commit.
enum Pending {
    Create(Reply<CreateOutcome>, Result<CreateOutcome, OpError>),
    Append(Reply<AppendOutcome>, Result<AppendOutcome, OpError>),
    Delete(Reply<()>, Result<(), OpError>),
}

impl Pending {
    fn send(self) {
        // A requester that went away (client disconnected) no longer needs the answer.
        let _ = match self {
            Pending::Create(reply, result) => reply.send(result).is_ok(),
            Pending::Append(reply, result) => reply.send(result).is_ok(),
            Pending::Delete(reply, result) => reply.send(result).is_ok(),
        };
    }
}

impl Shard {
    /// Builds a shard and the handle other threads use to reach it.
    pub fn new(
        queue_capacity: usize,
        budget: Arc<ByteBudget>,
        settings: ShardSettings,
        persist: Box<dyn Persist>,
    ) -> (Shard, Arc<ShardShared>) {
        let (sender, receiver) = crossbeam_channel::bounded(queue_capacity);
        let shared = Arc::new(ShardShared {
            directory: Directory::default(),
            live: Arc::new(LiveRegistry::default()),
            ops: sender,
        });
        let shard = Shard {
            shared: Arc::clone(&shared),
            ops: receiver,
            budget,
            settings,
            persist,
            expiry: ExpiryQueue::default(),
            content_types: Vec::new(),
            stream_id_next: 1,
            batch_number: 0,
        };
        (shard, shared)
    }

    /// Runs the loop until asked to stop. Never returns early on an error: errors that
    /// threaten durability abort the process inside [`Shard::commit`].
    pub fn run(mut self) {
        loop {
            let now_ms = self.settings.clock.now_ms();
            let wait_ms = self
                .expiry
                .wait_ms(now_ms)
                .unwrap_or(IDLE_WAKE_MS_MAX)
                .min(IDLE_WAKE_MS_MAX);
            let first = match self.ops.recv_timeout(Duration::from_millis(wait_ms.max(1))) {
                Ok(op) => Some(op),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => break,
            };
            if !self.run_batch(first) {
                break;
            }
        }
        self.shared.live.wake_all();
    }

    /// Applies `first` and whatever else is queued, then commits. False once asked to stop.
    fn run_batch(&mut self, first: Option<Op>) -> bool {
        self.batch_number += 1;
        let mut batch = Batch {
            number: self.batch_number,
            now_ms: self.settings.clock.now_ms(),
            records: Vec::new(),
            touched: Vec::new(),
            overlay: Overlay::default(),
            replies: Vec::new(),
            payload_bytes: 0,
        };
        let mut keep_running = true;
        let mut next = first;
        while let Some(op) = next.take() {
            if matches!(op, Op::Stop) {
                keep_running = false;
                break;
            }
            self.apply(&mut batch, op);
            if batch.replies.len() >= self.settings.batch_ops_max
                || batch.payload_bytes >= self.settings.batch_bytes_max
            {
                break;
            }
            next = self.ops.try_recv().ok();
        }
        self.expire_due(&mut batch);
        self.commit(batch);
        keep_running
    }

    /// Steps 3 and 4: make the batch durable, then publish it.
    fn commit(&mut self, mut batch: Batch) {
        if batch.records.is_empty() && batch.replies.is_empty() {
            return;
        }
        if let Err(error) = self.persist.commit(&batch.records) {
            tracing::error!(%error, "commit failed; stopping before acknowledging anything");
            std::process::abort();
        }
        for stream in &batch.touched {
            let mut state = stream.write_state();
            debug_assert!(
                state.published.tail <= state.writer.tail,
                "the published tail never moves back"
            );
            state.published = Published {
                tail: state.writer.tail,
                closed: state.writer.closed,
                gone: state.writer.gone,
            };
        }
        self.shared.directory.apply(&mut batch.overlay);
        for reply in batch.replies {
            reply.send();
        }
        self.shared
            .live
            .wake(batch.touched.iter().map(|stream| stream.id));
    }

    fn next_stream_id(&mut self) -> u64 {
        let id = self.stream_id_next;
        self.stream_id_next += 1;
        id
    }

    /// Makes `content_type` share the strings of an equal one this shard already holds.
    fn share_content_type(&mut self, content_type: &mut ContentType) {
        if let Some(known) = self
            .content_types
            .iter()
            .find(|known| *known == content_type)
        {
            content_type.share_with(known);
        } else if self.content_types.len() < CONTENT_TYPES_SHARED_MAX {
            self.content_types.push(content_type.clone());
        }
    }
}
