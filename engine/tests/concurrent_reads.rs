//! Readers racing writers in the disk modes: every read, at any moment, returns whole
//! appended messages, ending exactly at the published tail it reports — never a record the
//! tail does not cover yet, never a torn one, never an answer kept from before the tail
//! moved. Appends go in groups, so batches hold several
//! records of the stream (the window in which a careless publish would show them early).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use ds_engine::testing::SimVfs;
use ds_engine::testing::VfsHandle;
use ds_engine::{
    AppendRequest, ContentType, CreateRequest, Engine, EngineConfig, Payload, StartAt, StorageMode,
    StreamConfig, StreamName,
};

const APPENDS: usize = 6400;
const GROUP: usize = 32;

fn body(i: usize) -> String {
    format!("<{i}:{}>", "x".repeat(i % 50))
}

fn race(mode: StorageMode) {
    let config = EngineConfig {
        mode,
        data_dir: "/data".into(),
        shard_count: 2,
        segment_bytes: 16 << 20,
        vfs: VfsHandle(Arc::new(SimVfs::new())),
        ..EngineConfig::default()
    };
    let engine = Engine::start(config).expect("engine starts");
    let name = StreamName::new("raced").unwrap();
    let content_type = ContentType::parse("text/plain").unwrap();
    let stream_config =
        StreamConfig { content_type: content_type.clone(), ttl_secs: None, expires_at_ms: None };
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    runtime
        .block_on(engine.create(CreateRequest {
            name: name.clone(),
            config: stream_config,
            initial: None,
            closed: false,
        }))
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (engine, name, done) = (engine.clone(), name.clone(), Arc::clone(&done));
            std::thread::spawn(move || read_until_done(&engine, &name, &done))
        })
        .collect();
    for group in 0..APPENDS / GROUP {
        let appends: Vec<_> = (0..GROUP)
            .map(|i| {
                let request = AppendRequest {
                    name: name.clone(),
                    content_type: Some(content_type.clone()),
                    payload: Some(Payload::raw(Bytes::from(body(group * GROUP + i)))),
                    close: false,
                    producer: None,
                    stream_seq: None,
                };
                let engine = engine.clone();
                runtime.spawn(async move { engine.append(request).await })
            })
            .collect();
        for append in appends {
            runtime.block_on(append).unwrap().unwrap();
        }
    }
    done.store(true, Ordering::Release);
    let reads: usize = readers.into_iter().map(|r| r.join().expect("no reader saw a bad read")).sum();
    eprintln!("{mode}: {reads} reads raced the appends");
    // Answers kept from the reads before the last appends (`stream::kept_answers`) are not
    // what a read gives now.
    let (handle, mut messages, mut from) = (engine.open(&name).unwrap(), 0, StartAt::Beginning);
    loop {
        let read = handle.read(from, usize::MAX).unwrap().unwrap();
        messages += read.chunk.messages as usize;
        if read.up_to_date() {
            break;
        }
        from = StartAt::At(read.chunk.next);
    }
    assert_eq!(messages, APPENDS, "{mode}: the whole stream, up to date");
    engine.shutdown();
}

/// Whether `text` is whole messages made by [`body`].
fn whole_messages(text: &str) -> bool {
    text.split_inclusive('>').all(|message| {
        let inner = message.strip_prefix('<').and_then(|m| m.strip_suffix('>'));
        let parsed =
            inner.and_then(|m| m.split_once(':')).and_then(|(i, x)| Some((i.parse::<usize>().ok()?, x)));
        parsed.is_some_and(|(i, x)| x.len() == i % 50 && x.bytes().all(|b| b == b'x'))
    })
}

/// Reads from the start again and again; checks each read.
fn read_until_done(engine: &Engine, name: &StreamName, done: &AtomicBool) -> usize {
    let mut reads = 0;
    loop {
        let last = done.load(Ordering::Acquire);
        let handle = engine.open(name).expect("the stream exists");
        let read = handle.read(StartAt::Beginning, usize::MAX).expect("reads succeed").expect("exists");
        let text: String =
            read.chunk.slices.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect();
        assert!(whole_messages(&text), "a read returned something other than whole messages");
        assert_eq!(read.chunk.messages as usize, text.matches('>').count());
        assert_eq!(read.chunk.next.bytes, text.len() as u64, "the next offset follows the bytes read");
        if read.up_to_date() {
            assert_eq!(read.tail.bytes, text.len() as u64, "an up-to-date read ends at the tail");
        }
        reads += 1;
        if last {
            return reads;
        }
    }
}

#[test]
fn acid_readers_see_whole_published_records() {
    race(StorageMode::Acid);
}

#[test]
fn file_readers_see_whole_published_records() {
    race(StorageMode::FileDurable);
}

/// An answer kept for the next reader from the same start (`stream::kept_answers`) is handed
/// out only while a read gives it: not once the tail it ended at has moved, and never to a
/// stream created afresh under the name.
#[test]
fn kept_answers_are_what_a_read_gives() {
    for mode in [StorageMode::Acid, StorageMode::FileDurable] {
        let config = EngineConfig {
            mode,
            data_dir: "/data".into(),
            vfs: VfsHandle(Arc::new(SimVfs::new())),
            ..EngineConfig::default()
        };
        let engine = Engine::start(config).expect("engine starts");
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let name = StreamName::new("kept").unwrap();
        let content_type = ContentType::parse("text/plain").unwrap();
        let create = || CreateRequest {
            name: name.clone(),
            config: StreamConfig { content_type: content_type.clone(), ttl_secs: None, expires_at_ms: None },
            initial: None,
            closed: false,
        };
        let append = |text: &str| {
            let request = AppendRequest {
                name: name.clone(),
                content_type: Some(content_type.clone()),
                payload: Some(Payload::raw(Bytes::from(text.to_string()))),
                close: false,
                producer: None,
                stream_seq: None,
            };
            runtime.block_on(engine.append(request)).unwrap();
        };
        let read = |bytes_max: usize| {
            let read = engine.open(&name).unwrap().read(StartAt::Beginning, bytes_max).unwrap().unwrap();
            read.chunk.slices.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect::<String>()
        };
        runtime.block_on(engine.create(create())).unwrap();
        append("one;");
        assert_eq!((read(1 << 20), read(1 << 20)), ("one;".into(), "one;".into()), "{mode}");
        append("two;");
        assert_eq!(read(1 << 20), "one;two;", "{mode}: the tail moved");
        assert_eq!(read(4), "one;", "{mode}: a read of one message");
        append("three;");
        assert_eq!(read(4), "one;", "{mode}: still what a read of one message gives");
        assert_eq!(read(1 << 20), "one;two;three;", "{mode}");
        runtime.block_on(engine.delete(name.clone())).unwrap();
        runtime.block_on(engine.create(create())).unwrap();
        append("afresh;");
        assert_eq!(read(1 << 20), "afresh;", "{mode}: a new stream under the name");
        engine.shutdown();
    }
}
