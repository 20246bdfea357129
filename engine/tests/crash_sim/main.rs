//! Deterministic model-based simulation of every mode, with crashes: memory, acid,
//! file-durable and file-fast.
//!
//! The engine runs on a simulated disk (`ds_engine::vfs::sim`) that loses or tears any write
//! an fsync did not cover, with its shards driven by this test (manual threading) and a
//! manual clock (a millisecond on at every step of the shards, so batches carry times of
//! their own, as recovery's torn-write rule expects), so one seed always produces the same run. Each seed plays rounds of random
//! operations (creates, appends with and without producers and `Stream-Seq`, closes,
//! forks, deletes, soft deletes of streams forks read, and the cascades when their last
//! fork goes); some rounds make the disk fail part-way (the failing shard stops, as the
//! process would), some crash between rounds, some restart cleanly, and now and then time
//! passes beyond every TTL (the streams that have one expire). Memory mode keeps nothing
//! over a restart or crash, and the model says so. After every crash the
//! engine recovers from what the disk kept (file-fast promises only to survive a process
//! crash, so its disk keeps every write; the other modes get a power loss), and the oracle
//! checks each stream:
//!
//! - every acknowledged operation is there, with the answer the model predicted;
//! - an operation that was never acknowledged is either wholly there or wholly absent, and
//!   only after every earlier operation of its stream (the stream matches one of the states
//!   the unacknowledged operations pass through, byte for byte).
//!
//! `DS_SIM_SEEDS=n` runs seeds `0..n` (default 128), `DS_SIM_SEED_FROM=f` shifts them to
//! `f..f+n` (a long run that explores seeds no earlier run tried); `DS_SIM_SEED=s` runs seed
//! `s` alone, which is how a failure printed by this test is reproduced. With `DS_SIM_TRACE`
//! it prints every operation, upkeep request and crash; with `DS_SIM_DUMP`, every record an
//! acid crash left on the disk.

mod dump;
mod model;
mod ops;
mod workload;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use ds_engine::testing::VfsHandle;
use ds_engine::testing::{SimRng, SimVfs};
use ds_engine::Clock;
use ds_engine::Limits;
use ds_engine::{Engine, EngineConfig, OpError, StorageMode};
use ds_engine::{IoErrorPolicy, Threading, Upkeep};
use model::{collect_cascades, forks_of, predict, ttl_of_name, SimOp, State};
use ops::{observe, poll, submit, Answer, Pending};

const T0: u64 = 1_700_000_000_000;
/// The TTL of the streams that have one (see `model::ttl_of_name`).
const TTL_SECS: u64 = 3600;
const STREAM_BYTES_MAX: u64 = 8 * 1024;
/// Small segments, so runs rotate, checkpoint and remove segments often.
const SEGMENT_BYTES: u64 = 20 * 1024;
/// The largest append: what the workload sends, so that segments can be small.
const APPEND_BYTES_MAX: u64 = 2 * 1024;
const ROUNDS: usize = 60;
const SEEDS_DEFAULT: u64 = 128;
/// The share of the shards' steps (percent) before which a compaction or a checkpoint is
/// asked for.
const UPKEEP_PERCENT: u64 = 15;
/// Most disk operations a failing round lets through before the disk stops.
const FAIL_AFTER_MAX: u64 = 60;
/// Batches every shard runs after a round or a restart, so that cascades (which hop from
/// shard to shard, one batch each) finish: more than the longest chain of forks.
const CASCADE_STEPS: usize = 2 * workload::NAMES.len() + 2;
const MODES: [StorageMode; 4] =
    [StorageMode::Memory, StorageMode::Acid, StorageMode::FileDurable, StorageMode::FileFast];

/// How much of the interesting ground a run covered (a simulation that never loses a write
/// or never meets a torn log proves nothing, so the test asserts it does).
#[derive(Debug, Default)]
struct Coverage {
    crashes: u64,
    /// Unacknowledged writes that a recovery kept, and that it dropped.
    lost_writes_kept: u64,
    lost_writes_dropped: u64,
    /// Recoveries that found damage or stale bytes after the last good record.
    torn_recoveries: u64,
    /// Recoveries that started from a checkpoint, and records replayed after one.
    from_checkpoint: u64,
    records_replayed: u64,
    /// Streams compaction moved (acid), and compactions or checkpoints asked for.
    moves: u64,
    upkeeps: u64,
    /// Streams that expired when time passed beyond their TTL.
    expiries: u64,
    /// Acknowledged forks and soft deletes, and soft-deleted streams removed by a cascade.
    forks: u64,
    /// Acknowledged forks at a boundary and a sub-offset (inside a message of a plain
    /// stream).
    sub_offset_forks: u64,
    soft_deletes: u64,
    cascades: u64,
    /// Commits made durable by another shard's device flush (acid's shared flushes).
    flushes_shared: u64,
}

struct Sim {
    coverage: Coverage,
    mode: StorageMode,
    seed: u64,
    rng: SimRng,
    disk: SimVfs,
    clock: Clock,
    engine: Option<Engine>,
    model: BTreeMap<String, State>,
    round: usize,
}

impl Sim {
    fn new(seed: u64, mode: StorageMode) -> Sim {
        let model = workload::NAMES.iter().map(|name| (name.to_string(), None)).collect();
        let mut sim = Sim {
            coverage: Coverage::default(),
            mode,
            seed,
            rng: SimRng::new(seed),
            disk: SimVfs::new(),
            clock: Clock::manual(T0),
            engine: None,
            model,
            round: 0,
        };
        sim.start();
        sim
    }

    fn config(&self) -> EngineConfig {
        EngineConfig {
            mode: self.mode,
            data_dir: PathBuf::from("/data"),
            shard_count: 4,
            limits: Limits {
                total_bytes_max: 1 << 30,
                stream_bytes_max: STREAM_BYTES_MAX,
                append_bytes_max: APPEND_BYTES_MAX,
                ..Limits::default()
            },
            segment_bytes: SEGMENT_BYTES,
            io_error_policy: IoErrorPolicy::Fail,
            threading: Threading::Manual,
            vfs: VfsHandle(Arc::new(self.disk.clone())),
            batch_ops_max: 4,
            clock: self.clock.clone(),
            ..EngineConfig::default()
        }
    }

    fn start(&mut self) {
        let engine = Engine::start(self.config()).unwrap_or_else(|error| {
            panic!("seed {} round {}: recovery failed: {error}", self.seed, self.round)
        });
        // Cascades a crash interrupted finish in the first batches.
        for _ in 0..CASCADE_STEPS {
            engine.run_pending();
        }
        for report in engine.recovery_reports() {
            assert_eq!(
                report.damaged_streams, 0,
                "seed {} round {}: recovery marked streams damaged on a disk that only loses unsynced writes: {:#?}",
                self.seed, self.round, report.damage
            );
            let damage: Vec<_> = report.damage.iter().filter(|damage| !damage.torn).collect();
            assert!(
                damage.is_empty(),
                "seed {} round {}: recovery found damage on a disk that only loses unsynced writes: {damage:#?}",
                self.seed,
                self.round
            );
            self.coverage.torn_recoveries += u64::from(!report.damage.is_empty() || report.stale_bytes > 0);
            self.coverage.from_checkpoint += u64::from(report.checkpoint_lsn.is_some());
            self.coverage.records_replayed += report.records_replayed;
        }
        self.engine = Some(engine);
    }

    fn engine(&self) -> &Engine {
        self.engine.as_ref().expect("the engine is running")
    }

    fn run(mut self) -> Coverage {
        for round in 0..ROUNDS {
            self.round = round;
            self.clock.advance_ms(5);
            let count = 1 + self.rng.below(12) as usize;
            let ops = workload::round(&mut self.rng, &self.model, count, STREAM_BYTES_MAX);
            let roll = self.rng.below(100);
            // Memory mode has no disk to fail.
            let disk_fails = roll < 20 && self.mode != StorageMode::Memory;
            let fail_after = disk_fails.then(|| self.rng.below(FAIL_AFTER_MAX));
            let answers = self.execute(&ops, fail_after);
            if fail_after.is_some() {
                self.crash();
                self.settle(&ops, &answers);
                continue;
            }
            self.settle(&ops, &answers);
            self.check_exact("after the round");
            match roll {
                20..=27 => {
                    self.crash();
                    self.check_exact("after a crash between rounds");
                }
                28..=32 => {
                    self.take_engine().shutdown();
                    self.start();
                    self.forget_if_in_memory();
                    self.check_exact("after a clean restart");
                }
                33..=36 => {
                    self.run_out_ttls();
                    self.check_exact("after every TTL ran out");
                }
                _ => {}
            }
        }
        self.coverage.moves += self.engine().stats().moves;
        self.coverage
    }

    /// Submits `ops`, then lets the shards run (the disk failing after `fail_after`
    /// operations, if given) until nothing more is taken.
    fn execute(&mut self, ops: &[SimOp], fail_after: Option<u64>) -> Vec<Answer> {
        let engine = self.engine().clone();
        let mut pending: Vec<Pending> = ops.iter().map(|op| submit(&engine, op)).collect();
        let mut answers: Vec<Option<Answer>> = vec![None; ops.len()];
        for ((future, answer), op) in pending.iter_mut().zip(&mut answers).zip(ops) {
            *answer = poll(future);
            // Only a fork can be answered before its shard runs (its source is checked first).
            assert!(answer.is_none() || matches!(op, SimOp::Fork { .. }), "{op:?} answered early");
        }
        if let Some(operations) = fail_after {
            self.disk.fail_after(operations);
        }
        // A fork takes two trips (its source's shard counts it, then its own creates it),
        // and a cascade one batch per stream: run the shards until both are done.
        for _ in 0..ops.len() + CASCADE_STEPS {
            // Each step's batches carry a time of their own, as batches do in a running
            // server: recovery tells a torn end from damage by the batches after it.
            self.clock.advance_ms(1);
            self.request_upkeep(&engine);
            engine.run_pending();
            for (future, answer) in pending.iter_mut().zip(&mut answers) {
                if answer.is_none() {
                    *answer = poll(future);
                }
            }
        }
        answers.into_iter().map(|answer| answer.unwrap_or(Answer::Lost)).collect()
    }

    /// Now and then asks the shards for a compaction (whatever the live share), a seal of
    /// the active segment or a checkpoint, so that moves, checkpoints covering them and
    /// crashes meet at every step.
    fn request_upkeep(&mut self, engine: &Engine) {
        if self.rng.chance(UPKEEP_PERCENT) {
            let upkeep = match self.rng.below(3) {
                0 => Upkeep::Compact,
                1 => Upkeep::Seal,
                _ => Upkeep::Checkpoint,
            };
            if std::env::var("DS_SIM_TRACE").is_ok() {
                eprintln!("TRACE {} round {}: upkeep {upkeep:?}", self.mode, self.round);
            }
            engine.request_upkeep(upkeep);
            self.coverage.upkeeps += 1;
        }
    }

    /// The running engine, its coverage counted.
    fn take_engine(&mut self) -> Engine {
        let engine = self.engine.take().expect("running");
        self.coverage.moves += engine.stats().moves;
        let flushes = engine.flush_stats();
        self.coverage.flushes_shared += flushes.commits - flushes.flushes;
        engine
    }

    /// A crash: the engine stops without its clean shutdown, the disk keeps what an fsync
    /// covered plus a seeded choice of the rest, and the engine recovers from it.
    fn crash(&mut self) {
        if std::env::var("DS_SIM_TRACE").is_ok() {
            eprintln!("TRACE {} round {}: crash", self.mode, self.round);
        }
        self.coverage.crashes += 1;
        self.take_engine().stop_abruptly();
        if self.mode == StorageMode::FileFast {
            self.disk.recover_from_failure();
        } else {
            self.disk = self.disk.crash(&mut self.rng);
        }
        if std::env::var("DS_SIM_DUMP").is_ok() && self.mode == StorageMode::Acid {
            eprintln!("DUMP round {}", self.round);
            dump::acid_records(&self.disk);
        }
        self.start();
        self.forget_if_in_memory();
    }

    /// Memory mode starts empty: the model forgets every stream.
    fn forget_if_in_memory(&mut self) {
        if self.mode == StorageMode::Memory {
            self.model.values_mut().for_each(|state| *state = None);
        }
    }

    /// Time passes beyond every TTL: the streams that have one expire (whatever the
    /// engine has written of their expiry when it crashes next).
    fn run_out_ttls(&mut self) {
        self.clock.advance_ms(2 * TTL_SECS * 1000);
        self.engine().run_pending();
        for _ in 0..CASCADE_STEPS {
            self.engine().run_pending();
        }
        for (name, state) in &mut self.model {
            if ttl_of_name(name).is_some() && state.take().is_some() {
                self.coverage.expiries += 1;
            }
        }
        self.collect_cascades();
    }

    /// Soft-deleted streams that no fork reads any more go, in the model as in the engine.
    fn collect_cascades(&mut self) {
        let before = self.model.values().flatten().count();
        collect_cascades(&mut self.model);
        self.coverage.cascades += (before - self.model.values().flatten().count()) as u64;
    }

    /// Checks each stream against the answers and, after a crash, picks the state it
    /// recovered to among those its unacknowledged operations allow.
    /// A soft-deleted candidate also matches a stream that is gone: a cascade may have
    /// removed it (whether it should have, the exact check after the round tells).
    fn settle(&mut self, ops: &[SimOp], answers: &[Answer]) {
        if std::env::var("DS_SIM_TRACE").is_ok() {
            for (op, answer) in ops.iter().zip(answers) {
                eprintln!("TRACE {} round {}: {op:?} -> {answer:?}", self.mode, self.round);
            }
        }
        let forks: BTreeMap<&str, u64> =
            workload::NAMES.iter().map(|name| (*name, forks_of(&self.model, name))).collect();
        for name in workload::NAMES {
            let mut candidates = self.candidates(name, ops, answers, forks[name]);
            let observed = observe(self.engine(), name);
            let matched = candidates.iter().position(|candidate| match candidate {
                Some(stream) if stream.deleted && observed.is_none() => true,
                candidate => candidate.as_ref().map(|s| s.observed()) == observed,
            });
            let Some(matched) = matched else {
                panic!(
                    "{}: recovered {observed:?}, which no sequence of acknowledged and unacknowledged writes explains: {:?}",
                    self.context(name),
                    candidates.iter().map(|c| c.as_ref().map(|s| s.observed())).collect::<Vec<_>>()
                );
            };
            self.coverage.lost_writes_kept += matched as u64;
            self.coverage.lost_writes_dropped += (candidates.len() - 1 - matched) as u64;
            let settled = candidates.swap_remove(matched);
            self.coverage.cascades += u64::from(settled.is_some() && observed.is_none());
            let settled = settled.filter(|_| observed.is_some());
            self.model.insert(name.to_string(), settled);
        }
        self.collect_cascades();
    }

    /// The states `name` may be in after `ops`: the one after its last acknowledged
    /// operation, then one more for each unacknowledged write after it (each of which may
    /// have landed or not). Checks every answer against the model's prediction on the way.
    fn candidates(&mut self, name: &str, ops: &[SimOp], answers: &[Answer], forks: u64) -> Vec<State> {
        let mut state = self.model[name].clone();
        let mut candidates = vec![state.clone()];
        for (op, answer) in ops.iter().zip(answers).filter(|(op, _)| op.name() == name) {
            let prediction = predict(&state, op, STREAM_BYTES_MAX, forks);
            if *answer == Answer::Lost {
                if let Some(after) = prediction.written {
                    state = after;
                    candidates.push(state.clone());
                }
                continue;
            }
            assert_eq!(
                candidates.len(),
                1,
                "{}: {op:?} answered after an unanswered write",
                self.context(name)
            );
            if *answer == Answer::Refused(OpError::Unavailable) {
                // The storage could not take it (the disk failing): refused, no effect.
                continue;
            }
            let agrees = match answer {
                Answer::Ok { duplicate } => prediction.ok && *duplicate == prediction.duplicate,
                Answer::Refused(_) => !prediction.ok,
                Answer::Lost => unreachable!("handled above"),
            };
            assert!(
                agrees,
                "{}: {op:?} was answered {answer:?}, the model predicted {prediction:?} of {:?}",
                self.context(name),
                state.as_ref().map(|s| (s.observed(), &s.parent))
            );
            if let (Answer::Ok { .. }, Some(after)) = (answer, &prediction.written) {
                self.coverage.forks += u64::from(matches!(op, SimOp::Fork { .. }));
                let partial = matches!(op, SimOp::Fork { at: Some(at), .. } if at.sub_offset > 0);
                self.coverage.sub_offset_forks += u64::from(partial);
                self.coverage.soft_deletes += u64::from(after.as_ref().is_some_and(|s| s.deleted));
            }
            if let Some(after) = prediction.written {
                state = after;
                candidates = vec![state.clone()];
            }
        }
        candidates
    }

    /// Every stream shows exactly what the model holds.
    fn check_exact(&self, when: &str) {
        for name in workload::NAMES {
            let expected = self.model[name].as_ref().map(|s| s.observed());
            assert_eq!(observe(self.engine(), name), expected, "{} {when}", self.context(name));
        }
    }

    fn context(&self, name: &str) -> String {
        format!("{} seed {} round {} stream {name}", self.mode, self.seed, self.round)
    }
}

fn seeds() -> Vec<u64> {
    if let Some(seed) = std::env::var("DS_SIM_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![seed];
    }
    let count = std::env::var("DS_SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(SEEDS_DEFAULT);
    let from: u64 = std::env::var("DS_SIM_SEED_FROM").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    (from..from.saturating_add(count)).collect()
}

#[test]
fn acknowledged_operations_survive_every_simulated_crash() {
    let seeds = seeds();
    let mut total = Coverage::default();
    let runs = seeds.iter().flat_map(|seed| MODES.map(|mode| (*seed, mode)));
    for (seed, mode) in runs {
        match std::panic::catch_unwind(|| Sim::new(seed, mode).run()) {
            Ok(coverage) => {
                total.crashes += coverage.crashes;
                total.lost_writes_kept += coverage.lost_writes_kept;
                total.lost_writes_dropped += coverage.lost_writes_dropped;
                total.torn_recoveries += coverage.torn_recoveries;
                total.from_checkpoint += coverage.from_checkpoint;
                total.records_replayed += coverage.records_replayed;
                total.moves += coverage.moves;
                total.upkeeps += coverage.upkeeps;
                total.expiries += coverage.expiries;
                total.forks += coverage.forks;
                total.sub_offset_forks += coverage.sub_offset_forks;
                total.soft_deletes += coverage.soft_deletes;
                total.cascades += coverage.cascades;
                total.flushes_shared += coverage.flushes_shared;
            }
            Err(panic) => {
                eprintln!("crash simulation failed in {mode}; reproduce with: DS_SIM_SEED={seed} cargo test -p ds-engine --test crash_sim");
                std::panic::resume_unwind(panic);
            }
        }
    }
    eprintln!("{} seeds: {total:?}", seeds.len());
    if seeds.len() >= 16 {
        let covered = [
            total.crashes,
            total.lost_writes_kept,
            total.lost_writes_dropped,
            total.torn_recoveries,
            total.from_checkpoint,
            total.records_replayed,
            total.moves,
            total.upkeeps,
            total.expiries,
            total.forks,
            total.sub_offset_forks,
            total.soft_deletes,
            total.cascades,
            total.flushes_shared,
        ];
        assert!(
            covered.iter().all(|count| *count > 0),
            "the simulation missed ground it must cover: {total:?}"
        );
    }
}
