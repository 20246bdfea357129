//! Deletes racing down a chain of forks: `root` soft-deleted (a fork reads it), `middle` a
//! fork of `root`, `leaf` a fork of `middle`, and `middle` and `leaf` deleted at the same
//! moment. Whichever shard decides first, once both deletes are answered the cascade has
//! //! ended: all three are gone and their names free for the next request. The race to guard
//! against: the leaf's delete answered once committed, while `middle`'s delete, decided on
//! a fork count the leaf's release had not reached yet, was soft; both answer 204 with
//! `root` still held.

mod support;

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use ds_engine::testing::{SimVfs, VfsHandle};
use ds_engine::{CreateRequest, Engine, EngineConfig, ForkRequest, Limits, OpError, StorageMode};
use support::{append_request, name, plain_config, Harness};

const SEGMENT_BYTES: u64 = 4 << 20;
const SHARDS: u32 = 8;
const MODES: [StorageMode; 2] = [StorageMode::Memory, StorageMode::Acid];

/// The chain's names in round `round`.
fn chain(round: usize) -> [String; 3] {
    [format!("root-{round}"), format!("middle-{round}"), format!("leaf-{round}")]
}

/// Every order the shards can take the two deletes in (one submitted some steps before the
/// other, either first), stepped by hand: the answers come only after the cascade.
#[test]
fn racing_deletes_are_answered_after_the_cascade_in_every_order() {
    for mode in MODES {
        let harness = Harness::with_shards(mode, SEGMENT_BYTES, SHARDS);
        let mut spread = 0;
        for round in 0..48 {
            let [root, middle, leaf] = chain(round);
            make_chain(&harness, &root, &middle, &leaf);
            let shards: Vec<usize> = [&root, &middle, &leaf].map(|n| harness.engine().shard_index(n)).into();
            spread += usize::from(shards[0] != shards[1] && shards[1] != shards[2]);
            let (first, second) = if round % 2 == 0 { (&middle, &leaf) } else { (&leaf, &middle) };
            let steps_between = round / 2 % 4;
            let engine = harness.engine().clone();
            let mut first_delete: Pin<Box<dyn Future<Output = _>>> = Box::pin(engine.delete(name(first)));
            let mut context = Context::from_waker(Waker::noop());
            let mut answers = [None, None];
            answers[0] = ready(first_delete.as_mut().poll(&mut context));
            for _ in 0..steps_between {
                engine.run_pending();
                answers[0] = answers[0].or_else(|| ready(first_delete.as_mut().poll(&mut context)));
            }
            let mut second_delete = pin!(engine.delete(name(second)));
            for _ in 0..100 {
                answers[0] = answers[0].or_else(|| ready(first_delete.as_mut().poll(&mut context)));
                answers[1] = answers[1].or_else(|| ready(second_delete.as_mut().poll(&mut context)));
                if answers.iter().all(Option::is_some) {
                    break;
                }
                engine.run_pending();
            }
            let context =
                format!("{mode}, round {round} ({first} first, {steps_between} steps before {second})");
            assert_eq!(answers, [Some(Ok(())), Some(Ok(()))], "{context}");
            assert_gone(&harness, [&root, &middle, &leaf], &context);
        }
        assert!(spread > 10, "{mode}: most chains span three shards ({spread} of 48)");
    }
}

/// The same race on running shards (threads), many times over.
#[test]
fn racing_deletes_on_running_shards_are_answered_after_the_cascade() {
    for mode in MODES {
        let config = EngineConfig {
            mode,
            data_dir: "/data".into(),
            shard_count: SHARDS,
            segment_bytes: SEGMENT_BYTES,
            limits: Limits { stream_bytes_max: 1 << 20, ..Limits::default() },
            vfs: VfsHandle(Arc::new(SimVfs::new())),
            ..EngineConfig::default()
        };
        let engine = Engine::start(config).expect("engine starts");
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for round in 0..200 {
            let [root, middle, leaf] = chain(round);
            runtime.block_on(async {
                engine.create(create(&root)).await.unwrap();
                engine.append(append_request(&root, "r")).await.unwrap();
                engine.fork(fork(&middle, &root)).await.unwrap();
                engine.fork(fork(&leaf, &middle)).await.unwrap();
                engine.delete(name(&root)).await.unwrap();
                let answers = tokio::join!(engine.delete(name(&middle)), engine.delete(name(&leaf)));
                assert_eq!(answers, (Ok(()), Ok(())), "{mode}, round {round}");
                for stream in [&root, &middle, &leaf] {
                    assert!(engine.open(&name(stream)).is_none(), "{mode}, round {round}: {stream} is gone");
                }
                engine.create(create(&root)).await.unwrap_or_else(|e| panic!("{mode}, round {round}: {e:?}"));
            });
        }
        engine.shutdown();
    }
}

fn ready<T>(poll: Poll<T>) -> Option<T> {
    match poll {
        Poll::Ready(value) => Some(value),
        Poll::Pending => None,
    }
}

fn create(stream: &str) -> CreateRequest {
    CreateRequest { name: name(stream), config: plain_config(), initial: None, closed: false }
}

fn fork(stream: &str, source: &str) -> ForkRequest {
    ForkRequest {
        create: create(stream),
        inherit_expiry: false,
        source: name(source),
        offset: None,
        sub_offset: 0,
    }
}

/// `root` ← `middle` ← `leaf`, with `root` soft-deleted.
fn make_chain(harness: &Harness, root: &str, middle: &str, leaf: &str) {
    harness.create(root, plain_config()).unwrap();
    harness.append(append_request(root, "r")).unwrap();
    harness.fork(middle, root, None).unwrap();
    harness.fork(leaf, middle, None).unwrap();
    harness.delete(root).unwrap();
    assert_eq!(harness.soft_deleted(root), Some(true), "kept for its fork");
}

/// Every stream of the chain is gone, and each name is free again.
fn assert_gone(harness: &Harness, names: [&String; 3], context: &str) {
    for stream in names {
        assert_eq!(harness.soft_deleted(stream), None, "{context}: {stream} is gone");
    }
    for stream in names {
        let created = harness.create(stream, plain_config());
        assert!(created.is_ok(), "{context}: {stream} is free: {:?}", created.err().map(|e: OpError| e));
    }
}
