//! A worker: the OS thread that drives one or more shards.
//!
//! There are never more than two workers per CPU the process may use: more shards than that
//! would only take turns on the same cores, each paying its own wake-ups and syscalls for a
//! share of the load (two, so one worker's shards write while the other's wait for a
//! flush). A worker runs turns: every shard of its own with work collects and writes a batch
//! ([`Shard::write_step`]), then each starts its write-back ([`Shard::start_flush_step`]),
//! then each settles it ([`Shard::settle_step`]: waits for the device flush, publishes,
//! answers). Every shard writes before any waits, so one flush covers all the worker's
//! shards (and, through the shared flush group, the other workers' that wrote meanwhile);
//! the write-backs start back to back, so the block layer sends them to the device together
//! and device notifications take less of the core (docs/performance/code-choices.md). Each
//! shard stays the single writer of its log
//! and its streams; only the thread is shared.
//!
//! With nothing queued the worker parks on the doorbell its shards share, until an op
//! arrives or the earliest of their expiries (or idle work) is due. Every
//! [`FULL_TURN_MS`] each of its shards takes a step even without work, for what shards do
//! when idle (compaction's survey, readers' renewals); the process's aged kept catch-up
//! answers are dropped then too. A shard that was asked to stop, or
//! whose commit failed, is finished and leaves; the worker ends with its last shard.

use std::sync::Arc;
use std::time::Duration;

use super::doorbell::Doorbell;
use super::Shard;
use crate::time::Clock;

/// Workers per CPU: two, so that one worker's shards collect and write their next batches
/// while the other's wait for a device flush (docs/performance/code-choices.md).
const WORKERS_PER_CPU: usize = 2;
/// Longest a shard goes without a step, work or not (milliseconds).
const FULL_TURN_MS: u64 = 1000;

pub(crate) struct Worker {
    shards: Vec<Shard>,
    doorbell: Arc<Doorbell>,
    clock: Clock,
    /// When every shard next takes a step, with or without work (clock milliseconds).
    full_turn_due_ms: u64,
}

impl Worker {
    /// A worker for `shards`, which ring `doorbell` when an op arrives for any of them.
    pub(crate) fn new(shards: Vec<Shard>, doorbell: Arc<Doorbell>, clock: Clock) -> Worker {
        Worker { shards, doorbell, clock, full_turn_due_ms: 0 }
    }

    /// Runs turns until every shard has stopped. Never returns early on an error: errors
    /// that threaten durability abort the process inside a shard's commit.
    pub(crate) fn run(mut self) {
        self.doorbell.bind_to_current_thread();
        while !self.shards.is_empty() {
            let now_ms = self.clock.now_ms();
            let full = now_ms >= self.full_turn_due_ms;
            if full {
                self.full_turn_due_ms = now_ms + FULL_TURN_MS;
                crate::stream::kept_answers::drop_expired();
            }
            let worked = self.turn(full, now_ms).worked;
            self.retire_done();
            if !worked {
                self.sleep(now_ms);
            }
        }
    }

    /// One step of every shard (with work or not), for engines whose caller drives the
    /// shards; returns whether an op was taken. Shards that stopped or failed leave, as
    /// under threads (their queues close: later requests are refused at once).
    pub(crate) fn step_all(&mut self) -> bool {
        let now_ms = self.clock.now_ms();
        let took_op = self.turn(true, now_ms).took_op;
        self.retire_done();
        took_op
    }

    /// Finishes every shard (the clean end, or what a crash leaves when dropped instead).
    pub(crate) fn finish(self) {
        self.shards.into_iter().for_each(Shard::finish);
    }

    /// Steps every shard with work (every shard on a full turn): all write, then all start
    /// their write-back (back to back, so the device takes them as one burst), then all settle.
    fn turn(&mut self, full: bool, now_ms: u64) -> Turn {
        let mut turn = Turn::default();
        for shard in &mut self.shards {
            let has_work = shard.has_work(now_ms);
            if full || has_work {
                turn.worked |= has_work;
                turn.took_op |= shard.write_step();
            }
        }
        for shard in &mut self.shards {
            shard.start_flush_step();
        }
        for shard in &mut self.shards {
            shard.settle_step();
        }
        turn
    }

    /// Finishes the shards that were asked to stop or failed.
    fn retire_done(&mut self) {
        if !self.shards.iter().any(Shard::is_done) {
            return;
        }
        let (done, running): (Vec<Shard>, Vec<Shard>) =
            std::mem::take(&mut self.shards).into_iter().partition(Shard::is_done);
        self.shards = running;
        done.into_iter().for_each(Shard::finish);
    }

    /// Parks until an op arrives for any shard, or the first one has something due.
    fn sleep(&self, now_ms: u64) {
        let until_full_ms = self.full_turn_due_ms.saturating_sub(now_ms);
        let wait_ms = self.shards.iter().map(|shard| shard.idle_ms(now_ms)).fold(until_full_ms, u64::min);
        let shards = &self.shards;
        crate::scheduling::batch_scheduling();
        self.doorbell.sleep(Duration::from_millis(wait_ms.max(1)), || shards.iter().all(Shard::queues_empty));
    }
}

/// What one turn did.
#[derive(Default)]
struct Turn {
    /// Some shard had work.
    worked: bool,
    /// Some shard took an op from its queue.
    took_op: bool,
}

/// How many workers drive `shard_count` shards: [`WORKERS_PER_CPU`] per CPU the process may
/// use, at most one per shard.
pub(crate) fn worker_count(shard_count: usize) -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |count| count.get());
    shard_count.clamp(1, (cpus * WORKERS_PER_CPU).max(1))
}
