//! An engine of a disk mode on a simulated disk, driven step by step: for restart and
//! corruption tests.
//!
//! Shards run only when the harness drives a request (manual threading), the clock is
//! manual, and the disk is a `SimVfs`, so a test can stop the engine without its clean
//! shutdown, damage exactly the bytes it means to, and start again on what is left.

#![allow(dead_code)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use ds_engine::testing::SimVfs;
use ds_engine::testing::Vfs;
use ds_engine::testing::VfsHandle;
use ds_engine::Clock;
use ds_engine::Limits;
use ds_engine::RecoveryReport;
use ds_engine::{
    AppendOutcome, AppendRequest, ContentType, CreateOutcome, CreateRequest, Engine, EngineConfig, OpError,
    Payload, ProducerTag, StartAt, StorageMode, StreamConfig, StreamName,
};
use ds_engine::{IoErrorPolicy, Threading, SEGMENT_OVERHEAD_BYTES};

pub(crate) const T0: u64 = 1_700_000_000_000;
pub(crate) const SHARD_DIR: &str = "/data/shard-000";
/// What one stream may hold: far more than a segment (streams span segments).
pub(crate) const STREAM_BYTES_MAX: u64 = 1 << 40;

pub(crate) struct Harness {
    pub mode: StorageMode,
    pub disk: SimVfs,
    pub clock: Clock,
    pub segment_bytes: u64,
    /// Shards of the engine (1 unless a test asks for more).
    pub shard_count: u32,
    /// What a failed sync does: stop the failing shard (crash tests), unless a test asks
    /// for the server's policy (the process aborts).
    pub io_error_policy: IoErrorPolicy,
    engine: Option<Engine>,
    /// The storage the last engine was given (to tell whether a stopped one let go of it).
    storage: Weak<dyn Vfs>,
}

pub(crate) fn name(text: &str) -> StreamName {
    StreamName::new(text).unwrap()
}

pub(crate) fn plain_config() -> StreamConfig {
    StreamConfig {
        content_type: ContentType::parse("text/plain").unwrap(),
        ttl_secs: None,
        expires_at_ms: None,
    }
}

pub(crate) fn append_request(stream: &str, body: &str) -> AppendRequest {
    AppendRequest {
        name: name(stream),
        content_type: Some(ContentType::parse("text/plain").unwrap()),
        payload: Some(Payload::raw(Bytes::copy_from_slice(body.as_bytes()))),
        close: false,
        producer: None,
        stream_seq: None,
    }
}

pub(crate) fn tagged(stream: &str, body: &str, producer: &str, epoch: u64, seq: u64) -> AppendRequest {
    AppendRequest {
        producer: Some(ProducerTag { id: producer.into(), epoch, seq }),
        ..append_request(stream, body)
    }
}

impl Harness {
    /// A one-shard acid engine on a new simulated disk, with segments of `segment_bytes`.
    pub(crate) fn new(segment_bytes: u64) -> Harness {
        Harness::with_mode(StorageMode::Acid, segment_bytes)
    }

    /// A one-shard engine of `mode` on a new simulated disk.
    pub(crate) fn with_mode(mode: StorageMode, segment_bytes: u64) -> Harness {
        Harness::with_shards(mode, segment_bytes, 1)
    }

    /// An engine of `mode` with `shard_count` shards on a new simulated disk.
    pub(crate) fn with_shards(mode: StorageMode, segment_bytes: u64, shard_count: u32) -> Harness {
        let mut harness = Harness {
            mode,
            disk: SimVfs::new(),
            clock: Clock::manual(T0),
            segment_bytes,
            shard_count,
            io_error_policy: IoErrorPolicy::Fail,
            engine: None,
            storage: Weak::<SimVfs>::new(),
        };
        harness.start();
        harness
    }

    pub(crate) fn config(&self) -> EngineConfig {
        EngineConfig {
            mode: self.mode,
            data_dir: PathBuf::from("/data"),
            shard_count: self.shard_count,
            limits: Limits {
                total_bytes_max: 1 << 30,
                stream_bytes_max: STREAM_BYTES_MAX,
                append_bytes_max: self.append_bytes_max(),
                ..Limits::default()
            },
            segment_bytes: self.segment_bytes,
            io_error_policy: self.io_error_policy,
            threading: Threading::Manual,
            vfs: VfsHandle(Arc::new(self.disk.clone())),
            clock: self.clock.clone(),
            ..EngineConfig::default()
        }
    }

    /// Starts (recovers) the engine on the disk as it is; returns the recovery report.
    pub(crate) fn start(&mut self) -> RecoveryReport {
        let config = self.config();
        self.storage = Arc::downgrade(&config.vfs.0);
        let engine = Engine::start(config).unwrap_or_else(|error| panic!("recovery failed: {error}"));
        let report = engine.recovery_reports().first().cloned().unwrap_or_default();
        self.engine = Some(engine);
        report
    }

    /// The largest append: as much as a segment can hold, at most 1 MiB.
    pub(crate) fn append_bytes_max(&self) -> u64 {
        (self.segment_bytes - SEGMENT_OVERHEAD_BYTES).min(1 << 20)
    }

    pub(crate) fn engine(&self) -> &Engine {
        self.engine.as_ref().expect("the engine is running")
    }

    /// Stops without the clean shutdown (no final checkpoint), as a crash would.
    pub(crate) fn stop_abruptly(&mut self) {
        self.engine.take().expect("running").stop_abruptly();
    }

    /// A power loss: the engine stops without its clean shutdown and the disk keeps only
    /// what was synced, plus a seeded choice of the rest.
    pub(crate) fn lose_power(&mut self, seed: u64) {
        self.stop_abruptly();
        self.disk = self.disk.crash(&mut ds_engine::testing::SimRng::new(seed));
    }

    /// Whether anything still holds the storage the last engine was given: after a stop,
    /// only a leak does.
    pub(crate) fn storage_held(&self) -> bool {
        self.storage.strong_count() > 0
    }

    /// Stops cleanly (final checkpoint).
    pub(crate) fn shutdown(&mut self) {
        self.engine.take().expect("running").shutdown();
    }

    /// Runs the shards until `future` (a request to the engine) is answered.
    pub(crate) fn drive<T>(&self, future: impl Future<Output = T>) -> T {
        let mut future = pin!(future);
        let mut context = Context::from_waker(Waker::noop());
        for _ in 0..1000 {
            if let Poll::Ready(value) = future.as_mut().poll(&mut context) {
                return value;
            }
            self.engine().run_pending();
        }
        panic!("a request was never answered");
    }

    pub(crate) fn create(&self, stream: &str, config: StreamConfig) -> Result<CreateOutcome, OpError> {
        let request = CreateRequest { name: name(stream), config, initial: None, closed: false };
        self.drive(self.engine().create(request))
    }

    pub(crate) fn append(&self, request: AppendRequest) -> Result<AppendOutcome, OpError> {
        self.drive(self.engine().append(request))
    }

    /// Forks `source` at its tail (or at `offset`) into `stream`, with `stream`'s own plain
    /// configuration.
    pub(crate) fn fork(
        &self,
        stream: &str,
        source: &str,
        offset: Option<ds_engine::Offset>,
    ) -> Result<CreateOutcome, OpError> {
        let create =
            CreateRequest { name: name(stream), config: plain_config(), initial: None, closed: false };
        let request = ds_engine::ForkRequest {
            create,
            inherit_expiry: false,
            source: name(source),
            offset,
            sub_offset: 0,
        };
        self.drive(self.engine().fork(request))
    }

    /// Whether `stream` is there but soft-deleted (`None`: it is not there).
    pub(crate) fn soft_deleted(&self, stream: &str) -> Option<bool> {
        Some(self.engine().open(&name(stream))?.status()?.deleted)
    }

    pub(crate) fn delete(&self, stream: &str) -> Result<(), OpError> {
        self.drive(self.engine().delete(name(stream)))
    }

    /// Appends every body in one batch (one commit).
    pub(crate) fn append_in_one_batch(&self, stream: &str, bodies: &[&str]) {
        let engine = self.engine();
        let mut pending: Vec<_> =
            bodies.iter().map(|body| Box::pin(engine.append(append_request(stream, body)))).collect();
        let mut context = Context::from_waker(Waker::noop());
        for future in &mut pending {
            assert!(
                future.as_mut().poll(&mut context).is_pending(),
                "nothing is answered before the shard runs"
            );
        }
        engine.run_pending();
        for future in &mut pending {
            match future.as_mut().poll(&mut context) {
                Poll::Ready(result) => {
                    result.expect("the append is stored");
                }
                Poll::Pending => panic!("the batch did not take every append"),
            }
        }
    }

    /// Every stored byte of `stream`, or `None` if it does not exist.
    pub(crate) fn read(&self, stream: &str) -> Option<String> {
        let handle = self.engine().open(&name(stream))?;
        let tail = handle.status()?.tail;
        let mut text = String::new();
        let mut at = ds_engine::Offset::ZERO;
        while at < tail {
            let read =
                handle.read(StartAt::At(at), usize::MAX).expect("stored data reads back").expect("exists");
            read.chunk.slices.iter().for_each(|slice| text.push_str(&String::from_utf8_lossy(slice)));
            at = read.chunk.next;
        }
        Some(text)
    }

    /// The bytes of `stream` from `from` on, read until its tail or until a read fails,
    /// with the error a read ended with.
    pub(crate) fn read_from(
        &self,
        stream: &str,
        from: ds_engine::Offset,
    ) -> (String, Option<ds_engine::ReadError>) {
        let handle = self.engine().open(&name(stream)).expect("the stream exists");
        let tail = handle.status().expect("the stream exists").tail;
        let (mut text, mut at) = (String::new(), from);
        while at < tail {
            match handle.read(StartAt::At(at), usize::MAX) {
                Ok(read) => {
                    let read = read.expect("exists");
                    read.chunk.slices.iter().for_each(|slice| text.push_str(&String::from_utf8_lossy(slice)));
                    assert!(read.chunk.next > at, "a read moves on");
                    at = read.chunk.next;
                }
                Err(error) => return (text, Some(error)),
            }
        }
        (text, None)
    }

    /// Damage the engine knows of in `stream`.
    pub(crate) fn damage(&self, stream: &str) -> Option<ds_engine::StreamDamage> {
        self.engine().open(&name(stream)).and_then(|handle| handle.damage().cloned())
    }

    /// The offset where the record holding `body` (one of `bodies`, appended in order to an
    /// empty stream, one record each) starts.
    pub(crate) fn offset_of(bodies: &[String], index: usize) -> ds_engine::Offset {
        let bytes: usize = bodies[..index].iter().map(String::len).sum();
        ds_engine::Offset { messages: index as u64, bytes: bytes as u64 }
    }

    /// The shard's segment files, oldest first.
    pub(crate) fn segments(&self) -> Vec<PathBuf> {
        let mut names: Vec<String> = self
            .disk
            .list(Path::new(SHARD_DIR))
            .unwrap()
            .into_iter()
            .filter(|n| n.ends_with(".wal"))
            .collect();
        names.sort();
        names.into_iter().map(|n| Path::new(SHARD_DIR).join(n)).collect()
    }

    /// The file of stream `stream` (file modes).
    pub(crate) fn stream_file(&self, stream: &str) -> PathBuf {
        ds_engine::testing::stream_path(Path::new("/data"), stream, 0)
    }

    pub(crate) fn file_bytes(&self, path: &Path) -> Vec<u8> {
        ds_engine::testing::read_file(&self.disk, path).expect("file reads")
    }

    /// Where `needle` first occurs in the file at `path`.
    pub(crate) fn find(&self, path: &Path, needle: &str) -> usize {
        let bytes = self.file_bytes(path);
        bytes
            .windows(needle.len())
            .position(|window| window == needle.as_bytes())
            .unwrap_or_else(|| panic!("{needle:?} is not in {}", path.display()))
    }
}

/// A stream `s` with records `r00-…` to `r09-…`, each its own commit, left without a
/// clean shutdown (so recovery replays every record).
pub(crate) fn ten_records_in(mode: StorageMode, segment_bytes: u64) -> (Harness, Vec<String>) {
    let mut harness = Harness::with_mode(mode, segment_bytes);
    harness.create("s", plain_config()).unwrap();
    let bodies: Vec<String> = (0..10).map(|i| format!("r{i:02}-{}|", "x".repeat(40 + i))).collect();
    for body in &bodies {
        harness.append(append_request("s", body)).unwrap();
    }
    harness.stop_abruptly();
    (harness, bodies)
}
