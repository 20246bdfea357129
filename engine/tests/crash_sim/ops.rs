//! How the simulation talks to the engine: an operation submitted as a future that the test
//! polls by hand (the shards run only when the test steps them), its answer classified, and
//! a stream observed byte for byte for the oracle.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use ds_engine::{
    AppendKind, AppendRequest, ContentType, CreateRequest, Engine, ForkRequest, OpError, StartAt,
    StreamConfig, StreamName,
};

use crate::model::{is_json_name, payload, ttl_of_name, Observed, SimOp};

/// What an operation's requester learned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    Ok {
        duplicate: bool,
    },
    Refused(OpError),
    /// No answer (the shard stopped or the engine went away), or its commit failed: not
    /// acknowledged, and a restart may or may not find it.
    Lost,
}

pub(crate) type Pending = Pin<Box<dyn Future<Output = Answer> + Send>>;

pub(crate) fn classify<T>(result: Result<T, OpError>, duplicate: impl FnOnce(&T) -> bool) -> Answer {
    match result {
        Ok(value) => Answer::Ok { duplicate: duplicate(&value) },
        Err(OpError::ShuttingDown | OpError::StorageFailed) => Answer::Lost,
        Err(error) => Answer::Refused(error),
    }
}

pub(crate) fn content_type(name: &str) -> ContentType {
    ContentType::parse(if is_json_name(name) { "application/json" } else { "application/octet-stream" })
        .unwrap()
}

pub(crate) fn submit(engine: &Engine, op: &SimOp) -> Pending {
    let engine = engine.clone();
    let name = StreamName::new(op.name()).expect("workload names are valid");
    let json = is_json_name(op.name());
    match op.clone() {
        SimOp::Create { initial, .. } => {
            let initial = initial.map(|body| payload(json, &body));
            let request = CreateRequest { config: config_of(&name), name, initial, closed: false };
            Box::pin(async move { classify(engine.create(request).await, |_| false) })
        }
        SimOp::Fork { source, at, .. } => {
            let create = CreateRequest { config: config_of(&name), name, initial: None, closed: false };
            let request = ForkRequest {
                create,
                inherit_expiry: false,
                source: StreamName::new(&source).expect("workload names are valid"),
                offset: at.map(|at| ds_engine::Offset::ZERO.advance(at.messages, at.bytes)),
                sub_offset: at.map_or(0, |at| at.sub_offset),
            };
            Box::pin(async move { classify(engine.fork(request).await, |_| false) })
        }
        SimOp::Append { body, close, producer, stream_seq, .. } => {
            let request = AppendRequest {
                content_type: Some(content_type(name.as_str())),
                payload: (!body.is_empty()).then(|| payload(json, &body)),
                close,
                producer: producer.map(|(id, epoch, seq)| ds_engine::ProducerTag {
                    id: id.into(),
                    epoch,
                    seq,
                }),
                stream_seq: stream_seq.map(String::into_boxed_str),
                name,
            };
            Box::pin(
                async move { classify(engine.append(request).await, |o| o.kind == AppendKind::Duplicate) },
            )
        }
        SimOp::Delete { .. } => Box::pin(async move { classify(engine.delete(name).await, |_| false) }),
    }
}

/// The configuration the workload gives `name` (see `model`).
pub(crate) fn config_of(name: &StreamName) -> StreamConfig {
    StreamConfig {
        content_type: content_type(name.as_str()),
        ttl_secs: ttl_of_name(name.as_str()),
        expires_at_ms: None,
    }
}

pub(crate) fn poll(pending: &mut Pending) -> Option<Answer> {
    match pending.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(answer) => Some(answer),
        Poll::Pending => None,
    }
}

/// What the engine shows of `name`: config, every stored byte, tail and closed flag.
pub(crate) fn observe(engine: &Engine, name: &str) -> Option<Observed> {
    let handle = engine.open(&StreamName::new(name).unwrap())?;
    // A soft-deleted stream still reads (its forks read it this way).
    let status = handle.status()?;
    // The simulated disk loses or tears what no sync covered and damages nothing: a
    // stream marked damaged is recovery misreading what a crash left.
    assert!(handle.damage().is_none(), "{name} is marked damaged: {:?}", handle.damage());
    let mut data = Vec::new();
    let mut at = ds_engine::Offset::ZERO;
    while at < status.tail {
        let read =
            handle.read(StartAt::At(at), usize::MAX).expect("stored data reads back").expect("still there");
        assert!(read.chunk.next > at, "a read makes progress");
        read.chunk.slices.iter().for_each(|slice| data.extend_from_slice(slice));
        at = read.chunk.next;
    }
    assert_eq!(status.tail.bytes, data.len() as u64, "{name}: the tail counts the stored bytes");
    Some(Observed {
        json: handle.config().content_type.is_json(),
        ttl_secs: handle.config().ttl_secs,
        data,
        messages: status.tail.messages,
        closed: status.closed,
        deleted: status.deleted,
    })
}
