//! The shard loop's own tests: batches, commits, publication and stop, on a memory-mode shard.

use super::*;
use crate::content_type::ContentType;
use crate::meta::StreamConfig;
use crate::name::StreamName;
use crate::offset::Offset;
use crate::op::{AppendRequest, CreateRequest};
use crate::payload::Payload;
use crate::storage::chunk::{Chunk, Message, ReadError};
use crate::stream::cascade::{HeldAnswer, Release};
use crate::stream::fork::{ForkBase, ForkSource};
use bytes::Bytes;
use tokio::sync::oneshot;

fn shard(queue_capacity: usize) -> (Shard, Arc<ShardShared>) {
    let settings = ShardSettings {
        index: 0,
        limits: Limits::default(),
        producer_idle_ms_max: None,
        batch_ops_max: 64,
        batch_bytes_max: 1 << 20,
        clock: Clock::manual(1_000),
        io_error_policy: IoErrorPolicy::Abort,
    };
    let budget = Arc::new(ByteBudget::new(Limits::default().total_bytes_max, u64::MAX));
    Shard::new(queue_capacity, budget, settings, OpenedShard::memory(), Arc::default())
}

fn create(name: &str) -> (Op, oneshot::Receiver<Result<CreateOutcome, OpError>>) {
    let (reply, answer) = oneshot::channel();
    let config = StreamConfig {
        content_type: ContentType::parse("text/plain").unwrap(),
        ttl_secs: None,
        expires_at_ms: None,
    };
    let request =
        CreateRequest { name: StreamName::new(name).unwrap(), config, initial: None, closed: false };
    (Op::Create(request, None, reply), answer)
}

fn append(name: &str, body: &'static [u8]) -> (Op, oneshot::Receiver<Result<AppendOutcome, OpError>>) {
    let (reply, answer) = oneshot::channel();
    let request = AppendRequest {
        name: StreamName::new(name).unwrap(),
        content_type: Some(ContentType::parse("text/plain").unwrap()),
        payload: Some(Payload::raw(Bytes::from_static(body))),
        close: false,
        producer: None,
        stream_seq: None,
    };
    (Op::Append(request, reply), answer)
}

/// Collects a batch that starts with `first` (and takes whatever is queued) and commits it.
fn run_batch(shard: &mut Shard, first: Op) {
    let (batch, _) = shard.collect(Some(first));
    shard.commit(batch);
}

#[test]
fn a_full_queue_refuses_at_once() {
    let (_shard, shared) = shard(1);
    let (first, _a) = create("a");
    let (second, _b) = create("b");
    assert!(shared.submit(first).is_ok());
    assert_eq!(shared.submit(second).err(), Some(OpError::Overloaded));
}

#[test]
fn a_batch_is_invisible_until_committed_and_publishes_each_stream_once() {
    let (mut shard, shared) = shard(16);
    let (first, mut created) = create("s");
    let mut answers = Vec::new();
    for body in [&b"a"[..], b"b", b"c"] {
        let (op, answer) = append("s", body);
        shared.submit(op).unwrap();
        answers.push(answer);
    }
    let (batch, keep_running) = shard.collect(Some(first));
    assert!(keep_running);
    assert_eq!(batch.records.len(), 4, "one record per accepted op");
    assert_eq!(batch.touched.len(), 1, "one stream, published once");
    assert!(shared.directory.get("s").is_none(), "the create is not visible before the commit");
    assert!(created.try_recv().is_err(), "nothing is acknowledged before the commit");
    let stream = Arc::clone(&batch.touched[0]);
    assert_eq!(stream.read_state().published.tail, Offset::ZERO);

    shard.commit(batch);
    assert!(created.try_recv().unwrap().unwrap().created);
    let tails: Vec<_> = answers.iter_mut().map(|a| a.try_recv().unwrap().unwrap().tail.messages).collect();
    assert_eq!(tails, [1, 2, 3]);
    assert!(shared.directory.get("s").is_some());
    assert_eq!(stream.read_state().published.tail.bytes, 3);
}

#[test]
fn delete_and_recreate_in_one_batch_leave_the_new_stream() {
    let (mut shard, shared) = shard(16);
    run_batch(&mut shard, create("s").0);
    let old = shared.directory.get("s").unwrap();
    let (reply, deleted) = oneshot::channel();
    shared.submit(Op::Delete(StreamName::new("s").unwrap(), reply)).unwrap();
    let (recreate, mut recreated) = create("s");
    shared.submit(recreate).unwrap();
    let (op, _) = append("s", b"new");
    let (batch, _) = shard.collect(Some(op));
    assert!(shared.directory.get("s").is_some_and(|s| Arc::ptr_eq(&s, &old)), "old stream until commit");
    shard.commit(batch);
    drop(deleted);
    assert!(recreated.try_recv().unwrap().unwrap().created);
    let new = shared.directory.get("s").unwrap();
    assert_ne!(new.id, old.id);
    assert!(old.read_state().published.gone);
    assert_eq!(
        new.read_state().published.tail.bytes,
        0,
        "the append went to the old stream, before the delete"
    );
}

#[test]
fn stop_ends_the_loop_after_the_batch() {
    let (mut shard, shared) = shard(16);
    let (first, mut created) = create("s");
    shared.submit(first).unwrap();
    shared.stop();
    let first = shard.ops.try_recv().ok();
    let (batch, keep_running) = shard.collect(first);
    assert!(!keep_running);
    shard.commit(batch);
    assert!(created.try_recv().unwrap().is_ok(), "ops before Stop are answered");
}

/// A fork source that notes, when its fork is released, whether the fork's delete had been
/// answered by then.
struct WatchedSource {
    delete_answer: std::sync::Mutex<Option<oneshot::Receiver<Result<(), OpError>>>>,
    answered_before_release: std::sync::Mutex<Option<bool>>,
}

impl ForkSource for WatchedSource {
    fn read_below(&self, _: Offset, _: Offset, _: usize) -> Result<Chunk, ReadError> {
        unreachable!("the fork is never read")
    }

    fn messages_below(&self, _: Offset, _: Offset, _: usize) -> Result<Vec<Message>, ReadError> {
        unreachable!("the fork is never read")
    }

    fn release_fork(&self, answer: Option<HeldAnswer>) {
        let held = answer.expect("the delete's answer goes up with the release");
        let mut answer = self.delete_answer.lock().unwrap();
        let answered = answer.as_mut().expect("the delete was sent").try_recv().is_ok();
        *self.answered_before_release.lock().unwrap() = Some(answered);
        // The source counted it and stays: the cascade stops here, and the answer is sent.
        drop(held);
    }
}

/// A client that deletes a fork and then, on its answer, the fork's source must find the
/// source with one fork fewer: the delete's answer goes up with the release and is sent
/// where the source has counted it (here, a source that stays).
#[test]
fn a_removed_forks_source_is_released_before_the_delete_is_answered() {
    let (mut shard, _shared) = shard(16);
    let source = Arc::new(WatchedSource {
        delete_answer: std::sync::Mutex::new(None),
        answered_before_release: std::sync::Mutex::new(None),
    });
    let reference = crate::meta::ForkRef {
        origin: crate::meta::ForkOrigin { source: "source".into(), offset: Offset::ZERO, sub_offset: 0 },
        source_id: crate::ids::StreamId::FIRST,
        until: Offset::ZERO,
        partial_bytes: 0,
    };
    let base = ForkBase { source: Arc::clone(&source) as _, reference, depth: 1 };
    let (Op::Create(request, None, reply), mut created) = create("fork") else { unreachable!() };
    run_batch(&mut shard, Op::Create(request, Some(base), reply));
    assert!(created.try_recv().unwrap().unwrap().created);

    let (reply, deleted) = oneshot::channel();
    *source.delete_answer.lock().unwrap() = Some(deleted);
    run_batch(&mut shard, Op::Delete(StreamName::new("fork").unwrap(), reply));
    assert_eq!(*source.answered_before_release.lock().unwrap(), Some(false), "released, then answered");
    let answer = source.delete_answer.lock().unwrap().take().unwrap();
    assert!(matches!(answer.blocking_recv(), Ok(Ok(()))), "the delete is answered");
}

/// A release may now land in the batch that soft-deleted its source (it arrived while the
/// batch was collected): the source is then deleted for good in that batch, after its soft
/// delete — two delete records in order, the stream published gone, its name free.
#[test]
fn a_release_in_the_batch_of_the_sources_soft_delete_removes_it_for_good() {
    let (mut shard, shared) = shard(16);
    run_batch(&mut shard, create("s").0);
    let source = shared.directory.get("s").unwrap();
    source.write_state().writer.forks = 1;
    let (reply, mut deleted) = oneshot::channel();
    let (mut batch, _) = shard.collect(Some(Op::Delete(StreamName::new("s").unwrap(), reply)));
    assert!(source.read_state().writer.deleted, "soft-deleted while a fork reads it");
    let release = Release { name: "s".into(), id: source.id, answer: None };
    shard.apply_release(&mut batch, release);
    let softness: Vec<bool> = batch
        .records
        .iter()
        .map(|record| match record {
            Record::Delete { soft, .. } => *soft,
            _ => panic!("only deletes"),
        })
        .collect();
    assert_eq!(softness, [true, false], "the soft delete, then the delete for good");
    shard.commit(batch);
    assert!(deleted.try_recv().unwrap().is_ok());
    assert!(source.read_state().published.gone);
    assert!(shared.directory.get("s").is_none(), "the name is free");
    let (recreate, mut recreated) = create("s");
    run_batch(&mut shard, recreate);
    assert!(recreated.try_recv().unwrap().unwrap().created);
}
