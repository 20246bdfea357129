//! The very first start of an empty data directory, with the power cut at every step.
//!
//! Nothing is durable yet when a new directory is first opened: the data directory's own
//! entry, the shard directories, the manifest and the first segment (or stream file) are all
//! new. The disk stops after `n` operations for every `n` until a run gets through, then
//! loses everything no fsync covered (a seeded choice of it); the engine must start again on
//! what is left, and every create and append it acknowledged must be there.

mod support;

use std::future::Future;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use ds_engine::testing::VfsHandle;
use ds_engine::testing::{SimRng, SimVfs};
use ds_engine::Clock;
use ds_engine::Limits;
use ds_engine::{Engine, EngineConfig, StartAt, StorageMode};
use ds_engine::{IoErrorPolicy, Threading};
use support::{append_request, name, plain_config};

const BODIES: [&str; 3] = ["one;", "two;", "three;"];

fn config(mode: StorageMode, disk: &SimVfs) -> EngineConfig {
    EngineConfig {
        mode,
        data_dir: PathBuf::from("/srv/data"),
        shard_count: 2,
        limits: Limits { total_bytes_max: 1 << 20, stream_bytes_max: 4096, ..Limits::default() },
        segment_bytes: 64 * 1024,
        io_error_policy: IoErrorPolicy::Fail,
        threading: Threading::Manual,
        vfs: VfsHandle(Arc::new(disk.clone())),
        clock: Clock::manual(support::T0),
        ..EngineConfig::default()
    }
}

/// Runs the engine's shards until `future` is answered (or they stop taking work).
fn drive<T>(engine: &Engine, future: impl Future<Output = T>) -> Option<T> {
    let mut future = pin!(future);
    let mut context = Context::from_waker(Waker::noop());
    for _ in 0..100 {
        if let Poll::Ready(value) = future.as_mut().poll(&mut context) {
            return Some(value);
        }
        engine.run_pending();
    }
    None
}

/// The first run: start, create `s`, append the bodies; what was acknowledged.
fn first_run(mode: StorageMode, disk: &SimVfs) -> Vec<&'static str> {
    let Ok(engine) = Engine::start(config(mode, disk)) else {
        return Vec::new();
    };
    let mut acknowledged = Vec::new();
    let created = drive(
        &engine,
        engine.create(ds_engine::CreateRequest {
            name: name("s"),
            config: plain_config(),
            initial: None,
            closed: false,
        }),
    );
    if !matches!(created, Some(Ok(_))) {
        engine.stop_abruptly();
        return acknowledged;
    }
    acknowledged.push("");
    for body in BODIES {
        match drive(&engine, engine.append(append_request("s", body))) {
            Some(Ok(_)) => acknowledged.push(body),
            _ => break,
        }
    }
    engine.stop_abruptly();
    acknowledged
}

/// What stream `s` holds after a restart on `disk` (`None`: it is not there).
fn read_back(mode: StorageMode, disk: &SimVfs) -> Option<String> {
    let engine =
        Engine::start(config(mode, disk)).unwrap_or_else(|error| panic!("the restart failed: {error}"));
    let handle = engine.open(&name("s"))?;
    let read = handle.read(StartAt::Beginning, usize::MAX).expect("stored data reads back").expect("there");
    assert!(read.up_to_date());
    Some(read.chunk.slices.iter().map(|slice| String::from_utf8_lossy(slice).into_owned()).collect())
}

#[test]
fn a_power_cut_at_any_step_of_the_first_start_loses_nothing_acknowledged() {
    for mode in [StorageMode::Acid, StorageMode::FileDurable] {
        let mut steps = 0;
        loop {
            let disk = SimVfs::new();
            disk.fail_after(steps);
            let acknowledged = first_run(mode, &disk);
            let got_through = !disk.has_failed();
            disk.recover_from_failure();
            for seed in 0..6 {
                let after = disk.crash(&mut SimRng::new(seed * 1000 + steps));
                let found = read_back(mode, &after);
                let case = format!("{mode}, power cut after {steps} operations, seed {seed}");
                match acknowledged.len() {
                    0 => {}
                    kept => {
                        let expected: String = acknowledged[..kept].concat();
                        let found =
                            found.unwrap_or_else(|| panic!("{case}: the acknowledged stream is gone"));
                        let unacknowledged = BODIES[kept - 1..].first().copied().unwrap_or("");
                        assert!(
                            found == expected || found == expected.clone() + unacknowledged,
                            "{case}: {found:?}, acknowledged {expected:?}"
                        );
                    }
                }
            }
            if got_through {
                assert!(steps > 20, "{mode}: the first run takes more than {steps} disk operations");
                break;
            }
            steps += 1;
        }
    }
}
