//! Everything acknowledged survives a restart, in every disk mode: data and offsets,
//! content types, TTL and expiry times, closed streams, producer epochs and sequence
//! numbers, `Stream-Seq`, deletes and expiries. Each mode is restarted cleanly, after a
//! process crash, and (where the mode promises it) after a power loss.

mod support;

use bytes::Bytes;
use ds_engine::testing::Vfs;
use ds_engine::RENEWALS_SAVE_INTERVAL_MS as SAVE_INTERVAL_MS;
use ds_engine::{
    AppendKind, ContentType, CreateRequest, Offset, OpError, Payload, StorageMode, StreamConfig,
};
use std::path::{Path, PathBuf};
use support::{append_request, name, plain_config, tagged, Harness, SHARD_DIR, T0};

const SEGMENT_BYTES: u64 = 4 << 20;

#[derive(Clone, Copy, Debug)]
enum Restart {
    Clean,
    ProcessCrash,
    PowerLoss(u64),
}

fn restart(harness: &mut Harness, how: Restart) {
    match how {
        Restart::Clean => harness.shutdown(),
        Restart::ProcessCrash => harness.stop_abruptly(),
        Restart::PowerLoss(seed) => harness.lose_power(seed),
    }
    harness.start();
}

fn config(content_type: &str, ttl_secs: Option<u64>, expires_at_ms: Option<i64>) -> StreamConfig {
    StreamConfig { content_type: ContentType::parse(content_type).unwrap(), ttl_secs, expires_at_ms }
}

/// Acknowledged writes of every kind.
fn write_everything(harness: &Harness) {
    harness.create("plain", plain_config()).unwrap();
    harness.append(append_request("plain", "ab")).unwrap();
    harness.append(append_request("plain", "cde")).unwrap();

    let json = CreateRequest {
        name: name("json"),
        config: config("application/json", None, None),
        initial: Some(
            Payload::json(Bytes::from_static(b"[1, {\"big\":12345678901234567890}]"), true).unwrap(),
        ),
        closed: false,
    };
    harness.drive(harness.engine().create(json)).unwrap();

    harness.create("ttl", config("text/plain", Some(600), None)).unwrap();
    harness.create("until", config("text/plain", None, Some(T0 as i64 + 3_600_000))).unwrap();

    harness.create("closed", plain_config()).unwrap();
    harness.append(ds_engine::AppendRequest { close: true, ..append_request("closed", "last") }).unwrap();

    harness.create("producer", plain_config()).unwrap();
    for seq in 0..3 {
        harness.append(tagged("producer", &format!("p{seq}"), "writer-1", 3, seq)).unwrap();
    }
    harness.create("seq", plain_config()).unwrap();
    harness
        .append(ds_engine::AppendRequest { stream_seq: Some("0005".into()), ..append_request("seq", "s") })
        .unwrap();

    harness.create("deleted", plain_config()).unwrap();
    harness.append(append_request("deleted", "gone")).unwrap();
    harness.delete("deleted").unwrap();

    harness.create("expires", config("text/plain", Some(1), None)).unwrap();
    harness.clock.advance_ms(1_500);
    harness.engine().run_pending();
    assert!(harness.engine().open(&name("expires")).is_none(), "expired before the restart");
}

/// Checks everything `write_everything` wrote, as the restarted engine shows it.
fn check_everything(harness: &Harness, how: Restart) {
    let context = format!("{:?} after {how:?}", harness.mode);
    let engine = harness.engine();
    assert_eq!(harness.read("plain").as_deref(), Some("abcde"), "{context}");
    let plain = engine.open(&name("plain")).unwrap();
    assert_eq!(plain.status().unwrap().tail, Offset { messages: 2, bytes: 5 }, "{context}");
    assert_eq!(plain.config().content_type.as_str(), "text/plain");

    assert_eq!(harness.read("json").as_deref(), Some("1,{\"big\":12345678901234567890},"), "{context}");
    assert!(engine.open(&name("json")).unwrap().config().content_type.is_json());

    let ttl = engine.open(&name("ttl")).unwrap();
    assert_eq!(ttl.config().ttl_secs, Some(600), "{context}");
    assert!(ttl.ttl_remaining_secs().is_some_and(|left| left > 0 && left <= 600), "{context}");
    let until = engine.open(&name("until")).unwrap();
    assert_eq!(until.config().expires_at_ms, Some(T0 as i64 + 3_600_000), "{context}");

    let closed = engine.open(&name("closed")).unwrap().status().unwrap();
    assert!(closed.closed, "{context}");
    assert!(matches!(harness.append(append_request("closed", "more")), Err(OpError::StreamClosed { .. })));

    let retry = harness.append(tagged("producer", "p2", "writer-1", 3, 2)).unwrap();
    assert_eq!(retry.kind, AppendKind::Duplicate, "{context}: a retry of the last write is a duplicate");
    assert!(matches!(
        harness.append(tagged("producer", "x", "writer-1", 3, 4)),
        Err(OpError::SeqGap { expected: 3, .. })
    ));
    assert!(matches!(
        harness.append(tagged("producer", "x", "writer-1", 2, 0)),
        Err(OpError::StaleEpoch { current: 3 })
    ));
    assert_eq!(harness.append(tagged("producer", "p3", "writer-1", 3, 3)).unwrap().kind, AppendKind::Stored);
    assert_eq!(harness.read("producer").as_deref(), Some("p0p1p2p3"), "{context}");

    let regress = ds_engine::AppendRequest { stream_seq: Some("0004".into()), ..append_request("seq", "t") };
    assert_eq!(harness.append(regress).unwrap_err(), OpError::StreamSeqRegression, "{context}");

    assert!(engine.open(&name("deleted")).is_none(), "{context}: a delete stays deleted");
    assert!(engine.open(&name("expires")).is_none(), "{context}: an expiry stays expired");
    assert!(harness.create("deleted", plain_config()).unwrap().created, "{context}: the name is free");
    assert_eq!(harness.read("deleted").as_deref(), Some(""), "{context}: the new stream starts empty");
}

fn survives(mode: StorageMode, how: Restart) {
    let mut harness = Harness::with_mode(mode, SEGMENT_BYTES);
    write_everything(&harness);
    let charged = harness.engine().stats().charged_bytes;
    restart(&mut harness, how);
    let recharged = harness.engine().stats().charged_bytes;
    assert_eq!(recharged, charged, "{mode:?} after {how:?}: recovery charges what the writes were charged");
    check_everything(&harness, how);
    // And again: the state recovery rebuilt is itself durable.
    restart(&mut harness, how);
    assert_eq!(harness.read("producer").as_deref(), Some("p0p1p2p3"));
    assert_eq!(harness.read("deleted").as_deref(), Some(""));
}

#[test]
fn acid_keeps_everything_acknowledged() {
    for how in [Restart::Clean, Restart::ProcessCrash, Restart::PowerLoss(1), Restart::PowerLoss(2)] {
        survives(StorageMode::Acid, how);
    }
}

#[test]
fn file_durable_keeps_everything_acknowledged() {
    for how in [Restart::Clean, Restart::ProcessCrash, Restart::PowerLoss(1), Restart::PowerLoss(2)] {
        survives(StorageMode::FileDurable, how);
    }
}

/// file-fast acknowledges once writes reach the page cache: a process crash loses nothing.
#[test]
fn file_fast_keeps_everything_acknowledged_through_a_process_crash() {
    for how in [Restart::Clean, Restart::ProcessCrash] {
        survives(StorageMode::FileFast, how);
    }
}

#[test]
fn ttl_windows_keep_sliding_after_a_restart() {
    for mode in [StorageMode::Acid, StorageMode::FileDurable] {
        let mut harness = Harness::with_mode(mode, SEGMENT_BYTES);
        harness.create("ttl", config("text/plain", Some(10), None)).unwrap();
        harness.clock.advance_ms(8_000);
        harness.append(append_request("ttl", "renewed")).unwrap();
        restart(&mut harness, Restart::PowerLoss(7));
        harness.clock.advance_ms(8_000);
        assert!(harness.engine().open(&name("ttl")).is_some(), "{mode}: the append renewed the window");
        harness.clock.advance_ms(3_000);
        harness.engine().run_pending();
        assert!(harness.engine().open(&name("ttl")).is_none(), "{mode}: and it runs out");
    }
}

/// A stream holds far more than one append or one segment: its appends, each as large as
/// one may be, span segments, and all of it comes back after every restart; one byte more
/// than the largest append is refused (413 `append-too-large`) and stores nothing.
#[test]
fn streams_span_segments_and_appends_have_their_own_limit() {
    const SMALL_SEGMENT_BYTES: u64 = 256 << 10;
    for mode in [StorageMode::Acid, StorageMode::FileDurable, StorageMode::FileFast] {
        for how in restarts_of(mode) {
            let mut harness = Harness::with_mode(mode, SMALL_SEGMENT_BYTES);
            let append_bytes_max = harness.append_bytes_max() as usize;
            harness.create("long", plain_config()).unwrap();
            let mut expected = String::new();
            for i in 0..6 {
                let body = char::from(b'a' + i).to_string().repeat(append_bytes_max);
                harness.append(append_request("long", &body)).unwrap();
                expected.push_str(&body);
            }
            let too_large = "z".repeat(append_bytes_max + 1);
            assert_eq!(
                harness.append(append_request("long", &too_large)).err(),
                Some(OpError::AppendTooLarge { bytes_max: append_bytes_max as u64 }),
                "{mode:?}"
            );
            restart(&mut harness, how);
            let read = harness.read("long").unwrap();
            assert_eq!(read.len(), expected.len(), "{mode:?} after {how:?}");
            assert!(read == expected, "{mode:?} after {how:?}: every append reads back in order");
        }
    }
}

/// Every restart a mode promises to survive, for tests that go through each.
fn restarts_of(mode: StorageMode) -> Vec<Restart> {
    match mode {
        StorageMode::FileFast => vec![Restart::Clean, Restart::ProcessCrash],
        _ => vec![Restart::Clean, Restart::ProcessCrash, Restart::PowerLoss(11)],
    }
}

/// Where the one shard of `harness` saves its readers' renewals.
fn renewals_file(harness: &Harness) -> PathBuf {
    match harness.mode {
        StorageMode::Acid => Path::new(SHARD_DIR).join("renewals.bin"),
        _ => PathBuf::from("/data/renewals/shard-000.bin"),
    }
}

/// A stream kept alive by reads alone keeps its window through a restart: at a clean stop
/// the shard saves it, and before a crash it saved it once the save interval had passed.
#[test]
fn read_renewals_survive_restarts_and_crashes() {
    for mode in [StorageMode::Acid, StorageMode::FileDurable, StorageMode::FileFast] {
        for how in restarts_of(mode) {
            let mut harness = Harness::with_mode(mode, SEGMENT_BYTES);
            harness.create("read-only", config("text/plain", Some(30), None)).unwrap();
            harness.append(append_request("read-only", "kept alive by reads")).unwrap();
            harness.clock.advance_ms(20_000);
            assert_eq!(harness.read("read-only").as_deref(), Some("kept alive by reads"));
            harness.clock.advance_ms(SAVE_INTERVAL_MS);
            harness.engine().run_pending();
            restart(&mut harness, how);
            harness.clock.advance_ms(20_000);
            harness.engine().run_pending();
            let alive = harness.read("read-only");
            assert_eq!(alive.as_deref(), Some("kept alive by reads"), "{mode} {how:?}: the read renewed it");
            harness.clock.advance_ms(30_001);
            harness.engine().run_pending();
            assert!(harness.engine().open(&name("read-only")).is_none(), "{mode} {how:?}: and it runs out");
        }
    }
}

/// Only reads of streams with a TTL make a shard write its renewals, and only once the
/// save interval has passed.
#[test]
fn renewals_are_saved_only_when_reads_renewed_a_ttl_window() {
    for mode in [StorageMode::Acid, StorageMode::FileDurable] {
        let harness = Harness::with_mode(mode, SEGMENT_BYTES);
        let saved = || harness.disk.exists(&renewals_file(&harness));
        harness.create("no-ttl", config("text/plain", None, None)).unwrap();
        harness.create("ttl", config("text/plain", Some(60), None)).unwrap();
        harness.append(append_request("ttl", "written")).unwrap();
        harness.read("no-ttl");
        harness.engine().open(&name("ttl")).unwrap().status();
        harness.clock.advance_ms(SAVE_INTERVAL_MS);
        harness.engine().run_pending();
        assert!(!saved(), "{mode}: writes, reads without a TTL and status checks save nothing");
        harness.read("ttl");
        harness.engine().run_pending();
        assert!(!saved(), "{mode}: not before the interval has passed");
        harness.clock.advance_ms(SAVE_INTERVAL_MS);
        harness.engine().run_pending();
        assert!(saved(), "{mode}: a read of a stream with a TTL is saved");
    }
}
