//! `ds-tool` against real data directories: written through the engine (acid and
//! file-durable) and through a running server, then inspected with every subcommand, and
//! verified again after deliberate damage to copies of them.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::process::Command;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use bytes::Bytes;
use ds_engine::Limits;
use ds_engine::{
    AppendRequest, ContentType, CreateRequest, Engine, EngineConfig, Payload, ProducerTag, StorageMode,
    StreamConfig, StreamName,
};
use ds_tests::data_dir::DataDir;
use ds_tests::Server;
use serde_json::{json, Value};

/// Runs the built `ds-tool`; returns its exit code, stdout and stderr.
fn ds_tool(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_ds-tool")).args(args).output().expect("ds-tool runs");
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    (output.status.code().unwrap_or(-1), text(output.stdout), text(output.stderr))
}

fn json_of(args: &[&str]) -> Value {
    let (code, stdout, stderr) = ds_tool(args);
    assert_eq!(code, 0, "ds-tool {args:?}: {stderr}");
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("ds-tool {args:?} printed no JSON ({e}): {stdout}"))
}

/// Drives a future to completion on this thread (the engine's shards answer from theirs).
fn block_on<T>(future: impl Future<Output = T>) -> T {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(value) = future.as_mut().poll(&mut Context::from_waker(&waker)) {
            return value;
        }
        std::thread::park();
    }
}

fn config(content_type: &str, ttl_secs: Option<u64>) -> StreamConfig {
    StreamConfig { content_type: ContentType::parse(content_type).unwrap(), ttl_secs, expires_at_ms: None }
}

fn append(name: &str, body: &str, producer: Option<ProducerTag>) -> AppendRequest {
    AppendRequest {
        name: StreamName::new(name).unwrap(),
        content_type: Some(ContentType::parse("text/plain").unwrap()),
        payload: Some(Payload::raw(Bytes::copy_from_slice(body.as_bytes()))),
        close: false,
        producer,
        stream_seq: None,
    }
}

/// A data directory of `mode` written through the engine: `alpha` (text, a producer),
/// `beta` (JSON, a TTL), `closed`, and `gone` (deleted).
fn engine_dir(mode: StorageMode) -> DataDir {
    let dir = DataDir::new("ds-tool");
    let engine = Engine::start(EngineConfig {
        mode,
        data_dir: dir.path().to_path_buf(),
        shard_count: 2,
        segment_bytes: 1 << 20,
        limits: Limits { total_bytes_max: 1 << 30, stream_bytes_max: 512 << 10, ..Limits::default() },
        ..EngineConfig::default()
    })
    .expect("engine starts");
    let create = |name: &str, config: StreamConfig, initial: Option<Payload>, closed: bool| {
        let request = CreateRequest { name: StreamName::new(name).unwrap(), config, initial, closed };
        block_on(engine.create(request)).unwrap();
    };
    create("alpha", config("text/plain", None), Some(Payload::raw(Bytes::from_static(b"hello;"))), false);
    for seq in 0..3 {
        let producer = ProducerTag { id: "p1".into(), epoch: 2, seq };
        block_on(engine.append(append("alpha", &format!("world{seq};"), Some(producer)))).unwrap();
    }
    let json = Payload::json(Bytes::from_static(b"[1, 2, 3]"), true).unwrap();
    create("beta", config("application/json", Some(60)), Some(json), false);
    create("closed", config("text/plain", None), None, true);
    create("gone", config("text/plain", None), None, false);
    block_on(engine.delete(StreamName::new("gone").unwrap())).unwrap();
    engine.shutdown();
    dir
}

fn arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A copy of `from` in a new directory (for damaging).
fn copy_of(from: &Path) -> DataDir {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), &target).unwrap();
            }
        }
    }
    let dir = DataDir::new("ds-tool-copy");
    copy(from, dir.path());
    dir
}

/// The file under `dir` that contains `needle`, and where.
fn find(dir: &Path, needle: &[u8]) -> (PathBuf, usize) {
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in std::fs::read_dir(&current).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if let Some(at) =
                std::fs::read(&path).unwrap().windows(needle.len()).position(|w| w == needle)
            {
                return (path, at);
            }
        }
    }
    panic!("{needle:?} is in no file under {}", dir.display());
}

#[test]
fn info_describes_the_directory() {
    for mode in [StorageMode::Acid, StorageMode::FileDurable] {
        let dir = engine_dir(mode);
        let info = json_of(&["info", arg(dir.path()), "--json"]);
        assert_eq!(info["mode"], mode.as_str());
        assert_eq!(info["shards"], 2);
        assert_eq!(info["streams"], 3, "{mode}: {info}");
        assert_eq!(info["format"], 1);
        let (code, text, _) = ds_tool(&["info", arg(dir.path())]);
        assert_eq!(code, 0);
        assert!(text.lines().any(|l| l.starts_with("mode") && l.ends_with(mode.as_str())), "{text}");
        if mode == StorageMode::Acid {
            assert_eq!(info["clean_shutdown"], true, "the engine shut down cleanly");
            assert_eq!(info["shard_details"].as_array().unwrap().len(), 2);
            assert!(info["live_bytes"].as_u64().unwrap() > 0);
        }
    }
}

#[test]
fn streams_lists_every_stream_with_its_state() {
    for mode in [StorageMode::Acid, StorageMode::FileDurable] {
        let dir = engine_dir(mode);
        let streams = json_of(&["streams", arg(dir.path()), "--json"]);
        let by_name = |name: &str| streams.as_array().unwrap().iter().find(|s| s["name"] == name).cloned();
        let alpha = by_name("alpha").expect("alpha is listed");
        assert_eq!(alpha["messages"], 4, "{mode}");
        assert_eq!(alpha["bytes"], 6 + 3 * 7);
        assert_eq!(alpha["next_offset"], "0000000000000004_000000000000001b");
        assert_eq!(alpha["producers"], serde_json::json!([{"id": "p1", "epoch": 2, "seq": 2}]));
        assert_eq!(by_name("beta").unwrap()["ttl_secs"], 60);
        assert_eq!(by_name("beta").unwrap()["content_type"], "application/json");
        assert_eq!(by_name("closed").unwrap()["closed"], true);
        assert!(by_name("gone").is_none(), "a deleted stream is not listed");
        let (_, text, _) = ds_tool(&["streams", arg(dir.path())]);
        assert_eq!(text.lines().count(), 4, "a header and three rows: {text}");
        assert!(text.lines().next().unwrap().starts_with("messages"));
    }
}

#[test]
fn read_prints_messages_as_a_reader_gets_them() {
    for mode in [StorageMode::Acid, StorageMode::FileDurable] {
        let dir = engine_dir(mode);
        let read = |args: &[&str]| ds_tool(&[&["read", arg(dir.path())], args].concat());
        assert_eq!(read(&["alpha"]).1, "hello;world0;world1;world2;", "{mode}");
        assert_eq!(read(&["beta"]).1, "[1,2,3]\n");
        assert_eq!(
            read(&["alpha", "--offset", "0000000000000001_0000000000000006", "--limit", "2"]).1,
            "world0;world1;"
        );
        assert_eq!(read(&["beta", "--limit", "1"]).1, "[1]\n");
        let (code, _, stderr) = read(&["nope"]);
        assert_eq!(code, 2);
        assert!(stderr.contains("no stream called \"nope\""), "{stderr}");
        let (code, _, stderr) = read(&["alpha", "--offset", "banana"]);
        assert_eq!(code, 2, "{stderr}");
    }
}

#[test]
fn records_lists_the_log_in_order() {
    let dir = engine_dir(StorageMode::Acid);
    let records = json_of(&["records", arg(dir.path()), "--json"]);
    let kinds: Vec<&str> = records.as_array().unwrap().iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "create").count(), 4, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "append").count(), 3);
    assert_eq!(kinds.iter().filter(|k| **k == "delete").count(), 1);
    assert!(records.as_array().unwrap().iter().all(|r| r["check"] == "ok"));
    let alpha = json_of(&["records", arg(dir.path()), "--stream", "alpha", "--json"]);
    let alpha = alpha.as_array().unwrap();
    assert_eq!(alpha.len(), 4);
    assert_eq!(alpha[3]["producer"], "p1/2/2");
    let from = alpha[2]["seq"].as_u64().unwrap().to_string();
    let tail = json_of(&["records", arg(dir.path()), "--stream", "alpha", "--from", &from, "--json"]);
    assert_eq!(tail.as_array().unwrap().len(), 2);

    let files = engine_dir(StorageMode::FileDurable);
    let records = json_of(&["records", arg(files.path()), "--stream", "alpha", "--json"]);
    assert_eq!(records.as_array().unwrap().len(), 4, "file modes list a stream file's records");
}

#[test]
fn stats_reports_distributions() {
    let dir = engine_dir(StorageMode::Acid);
    let stats = json_of(&["stats", arg(dir.path()), "--json"]);
    let row =
        |name: &str| stats.as_array().unwrap().iter().find(|r| r["distribution"] == name).cloned().unwrap();
    assert_eq!(row("messages_per_stream")["count"], 3);
    assert_eq!(row("messages_per_stream")["max"], 4);
    assert_eq!(row("bytes_per_append")["count"], 3);
    assert_eq!(row("bytes_per_append")["min"], 7);
    assert_eq!(row("records_per_segment")["count"], 2);
}

#[test]
fn verify_is_clean_and_finds_each_kind_of_damage() {
    let dir = engine_dir(StorageMode::Acid);
    let (code, text, _) = ds_tool(&["verify", arg(dir.path())]);
    assert_eq!(code, 0, "{text}");
    assert!(text.starts_with("clean:"), "{text}");

    let flipped = copy_of(dir.path());
    let (segment, at) = find(flipped.path(), b"world1;");
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[at] ^= 0x20;
    std::fs::write(&segment, &bytes).unwrap();
    let (code, text, _) = ds_tool(&["verify", arg(flipped.path())]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("bad record: payload checksum mismatch"), "{text}");
    assert!(text.contains("DAMAGED"), "{text}");

    let zeroed = copy_of(dir.path());
    let (segment, at) = find(zeroed.path(), b"world2;");
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[at..at + 7].fill(0);
    std::fs::write(&segment, &bytes).unwrap();
    let verdict = json_of_exit(&["verify", arg(zeroed.path()), "--json"], 1);
    assert_eq!(verdict["clean"], false);
    assert!(!verdict["problems"].as_array().unwrap().is_empty());

    let truncated = copy_of(dir.path());
    let (segment, at) = find(truncated.path(), b"world0;");
    std::fs::OpenOptions::new().write(true).open(&segment).unwrap().set_len(at as u64).unwrap();
    let verdict = json_of_exit(&["verify", arg(truncated.path()), "--json"], 1);
    let problems = verdict["problems"].to_string();
    assert!(problems.contains("truncated"), "{problems}");
    for problem in verdict["problems"].as_array().unwrap() {
        let in_a_segment = problem["log"].as_str().unwrap().ends_with(".wal");
        assert_eq!(problem["position"].is_u64(), in_a_segment, "a position only in a log: {problems}");
    }

    let one_copy = copy_of(dir.path());
    std::fs::remove_file(one_copy.path().join("MANIFEST")).unwrap();
    let (code, report, stderr) = ds_tool(&["verify", arg(one_copy.path())]);
    assert_eq!(code, 1, "{report}{stderr}");
    assert!(report.contains("MANIFEST: ") && report.contains("missing"), "{report}");
    assert!(!report.contains(" at 0"), "a whole file's problem names no position: {report}");
    assert_eq!(ds_tool(&["info", arg(one_copy.path())]).0, 0, "read from MANIFEST-COPY");

    let unlabelled = copy_of(dir.path());
    std::fs::remove_file(unlabelled.path().join("MANIFEST")).unwrap();
    std::fs::remove_file(unlabelled.path().join("MANIFEST-COPY")).unwrap();
    let (code, _, stderr) = ds_tool(&["verify", arg(unlabelled.path())]);
    assert_eq!(code, 2);
    assert!(stderr.contains("not a ds data directory"), "{stderr}");
    let (code, _, stderr) = ds_tool(&["info", "/nonexistent/ds"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("does not exist"), "{stderr}");
}

#[test]
fn verify_finds_a_damaged_stream_file() {
    let dir = engine_dir(StorageMode::FileDurable);
    assert_eq!(ds_tool(&["verify", arg(dir.path())]).0, 0);
    let (file, at) = find(dir.path(), b"world1;");
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[at] ^= 1;
    std::fs::write(&file, &bytes).unwrap();
    let verdict = json_of_exit(&["verify", arg(dir.path()), "--json"], 1);
    let problems = verdict["problems"].to_string();
    assert!(problems.contains("payload checksum mismatch"), "{verdict}");
    assert!(
        problems.contains("stream damaged at offset 0000000000000002_"),
        "the stream is named: {verdict}"
    );
    assert_eq!(verdict["recovery_would_drop"], json!([]), "damage is not cut away: {verdict}");
}

/// file-durable after a clean stop: a stream file cut short is damage to the stream (not a
/// torn end to drop), and a stream file gone is named, as the next start would say.
#[test]
fn verify_holds_stream_files_to_where_they_ended_at_a_clean_stop() {
    let dir = engine_dir(StorageMode::FileDurable);
    let (alpha, at) = find(dir.path(), b"world2;");
    std::fs::OpenOptions::new().write(true).open(&alpha).unwrap().set_len(at as u64 + 3).unwrap();
    let (beta, _) = find(&dir.path().join("streams"), b"beta");
    std::fs::remove_file(&beta).unwrap();
    let verdict = json_of_exit(&["verify", arg(dir.path()), "--json"], 1);
    let problems = verdict["problems"].to_string();
    assert!(problems.contains("stream damaged at offset 0000000000000003_"), "alpha is named: {verdict}");
    assert!(
        problems.contains(r#"stream \"beta\": its file, there at the last clean stop, is lost"#),
        "{verdict}"
    );
}

fn json_of_exit(args: &[&str], expected: i32) -> Value {
    let (code, stdout, stderr) = ds_tool(args);
    assert_eq!(code, expected, "ds-tool {args:?}: {stdout}{stderr}");
    serde_json::from_str(&stdout).unwrap()
}

#[test]
fn a_running_server_keeps_it_out_unless_forced() {
    let mut server = Server::start_in("acid", &[]);
    let client = server.client();
    assert_eq!(client.put("/v1/stream/live", "text/plain", b"one;").status, 201);
    assert_eq!(client.post("/v1/stream/live", "text/plain", b"two;").status, 204);
    let dir = server.data_dir().unwrap().to_path_buf();
    let (code, _, stderr) = ds_tool(&["streams", arg(&dir)]);
    assert_eq!(code, 2);
    assert!(stderr.contains("in use by a running server"), "{stderr}");
    assert_eq!(ds_tool(&["read", arg(&dir), "live", "--force"]).1, "one;two;", "a consistent prefix");
    assert!(server.terminate().success());
    let streams = json_of(&["streams", arg(&dir), "--json"]);
    assert_eq!(streams[0]["name"], "live");
    assert_eq!(streams[0]["messages"], 2);
    assert_eq!(ds_tool(&["verify", arg(&dir)]).0, 0);
}
