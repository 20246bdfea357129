//! Golden data directories (`tests/fixtures/`): written once by an earlier build and
//! committed, they must open and read back byte for byte with every later one.
//!
//! Each fixture is a data directory (`data/`) and what it holds (`expected.json`: every
//! stream's content type, stored bytes, next offset and closed flag, and the streams that
//! must be absent). The test copies it, checks it with `ds-tool verify`, starts the server on
//! the copy, reads every stream back, then writes to it (the format stays writable) and
//! restarts. `acid-crashed` was left by a `kill -9`, so recovery replays its log.
//! `acid-moved-twice` was left by a `kill -9` after compaction had moved streams more than
//! once, by a build whose copies kept the move marks of the records they copied: every
//! stream reads back and takes appends (that build's own restart marked three damaged).
//!
//! `DS_WRITE_FIXTURES=1 cargo test -p ds-tests --test fixtures -- --ignored` writes the
//! fixtures that do not exist yet (add a name to [`FIXTURES`] for a new format); it never
//! rewrites one: a fixture is a promise to users whose data directories that build wrote.

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;
use ds_tests::data_dir::DataDir;
use ds_tests::server::binary;
use ds_tests::{Client, Server};
use serde_json::{json, Value};

/// The fixtures, and the storage mode each was written in.
const FIXTURES: [(&str, &str); 4] = [
    ("acid", "acid"),
    ("acid-crashed", "acid"),
    ("acid-moved-twice", "acid"),
    ("file-durable", "file-durable"),
];

/// The settings every fixture was written with (and is opened with).
const SETTINGS: [(&str, &str); 3] = [
    ("DS_STORAGE__ACID_SHARD_COUNT", "2"),
    ("DS_STORAGE__SEGMENT_BYTES", "131072"),
    ("DS_LIMITS__MAX_STREAM_BYTES", "65536"),
];

fn fixture_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(name)
}

fn env_for(mode: &str, dir: &Path) -> Vec<(String, String)> {
    let mut env = vec![
        ("DS_STORAGE__MODE".to_string(), mode.to_string()),
        ("DS_STORAGE__DATA_DIR".to_string(), dir.display().to_string()),
    ];
    env.extend(SETTINGS.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env
}

fn start(mode: &str, dir: &Path) -> Server {
    let env = env_for(mode, dir);
    let borrowed: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Server::start(&borrowed)
}

#[test]
fn every_fixture_opens_and_reads_back_byte_for_byte() {
    for (name, mode) in FIXTURES {
        let expected: Value = serde_json::from_slice(
            &std::fs::read(fixture_dir(name).join("expected.json")).expect("the fixture's expectations"),
        )
        .expect("JSON");
        let copy = DataDir::new(&format!("fixture-{name}"));
        copy_tree(&fixture_dir(name).join("data"), copy.path());
        if name != "acid-crashed" {
            let verify = Command::new(binary("ds-tool")).arg("verify").arg(copy.path()).output().unwrap();
            assert!(verify.status.success(), "{name}: {}", String::from_utf8_lossy(&verify.stdout));
        }
        let mut server = start(mode, copy.path());
        check_streams(&server.client(), &expected, name);
        check_writable(&server.client(), &expected, name);
        // Still writable, and what is written survives a restart.
        let client = server.client();
        assert_eq!(client.post("/v1/stream/plain", "text/plain", b" and more").status, 204, "{name}");
        assert!(server.terminate().success(), "{name}");
        server.restart();
        let text = read_all(&server.client(), "/v1/stream/plain").1;
        assert!(text.ends_with(b" and more"), "{name}: {}", String::from_utf8_lossy(&text));
    }
}

/// Every stream `expected` lists reads back as listed; the absent ones are absent.
fn check_streams(client: &Client, expected: &Value, fixture: &str) {
    for stream in expected["streams"].as_array().expect("streams") {
        let path = format!("/v1/stream/{}", stream["path"].as_str().unwrap());
        let (head, body) = read_all(client, &path);
        let context = format!("{fixture}: {path}");
        assert_eq!(head.status, 200, "{context}");
        assert_eq!(head.header("content-type"), stream["content_type"].as_str(), "{context}");
        let stored =
            base64::engine::general_purpose::STANDARD.decode(stream["body"].as_str().unwrap()).unwrap();
        assert_eq!(body, stored, "{context}: the bytes");
        assert_eq!(head.header("stream-next-offset"), stream["next_offset"].as_str(), "{context}");
        assert_eq!(head.header("stream-closed").is_some(), stream["closed"].as_bool().unwrap(), "{context}");
    }
    for path in expected["absent"].as_array().expect("absent") {
        let path = format!("/v1/stream/{}", path.as_str().unwrap());
        assert_eq!(client.head(&path).status, 404, "{fixture}: {path} stays deleted");
    }
}

/// Every open stream `expected` lists takes an append: none was marked damaged.
fn check_writable(client: &Client, expected: &Value, fixture: &str) {
    let streams = expected["streams"].as_array().expect("streams");
    for stream in streams.iter().filter(|stream| stream["closed"] == false) {
        let path = format!("/v1/stream/{}", stream["path"].as_str().unwrap());
        let content_type = stream["content_type"].as_str().unwrap();
        let body: &[u8] = if content_type.starts_with("application/json") { b"{}" } else { b"+" };
        let response = client.post(&path, content_type, body);
        assert_eq!(response.status, 204, "{fixture}: {path} takes an append: {}", response.text());
    }
}

/// Reads a whole stream from the start (in as many reads as it takes): the last answer,
/// and every byte (a JSON stream's arrays joined back into stored form).
fn read_all(client: &Client, path: &str) -> (ds_tests::Response, Vec<u8>) {
    let mut offset = "-1".to_string();
    let mut body = Vec::new();
    loop {
        let response = client.get(&format!("{path}?offset={offset}"));
        if response.status != 200 {
            return (response, body);
        }
        body.extend(stored_form(&response));
        offset = response.next_offset();
        if response.header("stream-up-to-date").is_some() {
            return (response, body);
        }
    }
}

/// A response body as the stream stores it: JSON arrays become `m1,m2,…,` again.
fn stored_form(response: &ds_tests::Response) -> Vec<u8> {
    if response.header("content-type") != Some("application/json") {
        return response.body.clone();
    }
    let text = response.text();
    let inner = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')).expect("a JSON array");
    if inner.is_empty() {
        Vec::new()
    } else {
        format!("{inner},").into_bytes()
    }
}

fn copy_tree(from: &Path, to: &Path) {
    let status = Command::new("cp").arg("-a").arg(format!("{}/.", from.display())).arg(to).status();
    assert!(status.expect("cp runs").success());
}

/// Writes the fixtures that do not exist yet (see the module documentation).
#[test]
#[ignore = "writes tests/fixtures/; run only to add a fixture for a new format"]
fn write_fixtures() {
    assert_eq!(std::env::var("DS_WRITE_FIXTURES").as_deref(), Ok("1"), "set DS_WRITE_FIXTURES=1");
    for (name, mode) in FIXTURES {
        let root = fixture_dir(name);
        if root.exists() {
            continue;
        }
        std::fs::create_dir_all(root.join("data")).unwrap();
        let mut server = start(mode, &root.join("data"));
        let expected = write_streams(&server.client());
        if name == "acid-crashed" {
            server.kill();
        } else {
            assert!(server.terminate().success());
        }
        let text = serde_json::to_string_pretty(&expected).unwrap();
        std::fs::write(root.join("expected.json"), text + "\n").unwrap();
        let _ = std::fs::remove_file(root.join("data").join("LOCK"));
    }
}

/// Writes one stream of each kind the format holds; what a reader must find.
fn write_streams(client: &Client) -> Value {
    let ok = |response: ds_tests::Response| assert!(response.status < 300, "{}", response.text());
    ok(client.put("/v1/stream/plain", "text/plain", b"first"));
    for i in 0..40 {
        ok(client.post("/v1/stream/plain", "text/plain", format!(" line {i:02}\n").as_bytes()));
    }
    ok(client.put(
        "/v1/stream/events/json",
        "application/json",
        br#"[{"n":1},{"big":12345678901234567890}]"#,
    ));
    ok(client.post("/v1/stream/events/json", "application/json", br#"{"key order":"kept","a":[1,2]}"#));
    let bytes: Vec<u8> = (0..=255u8).collect();
    ok(client.put("/v1/stream/bytes", "application/octet-stream", &bytes));
    let producer = |seq: &str| {
        client.send(
            "POST",
            "/v1/stream/produced",
            &[
                ("Content-Type", "text/plain"),
                ("Producer-Id", "writer-1"),
                ("Producer-Epoch", "3"),
                ("Producer-Seq", seq),
                ("Stream-Seq", &format!("seq-{seq:0>4}")),
            ],
            format!("p{seq};").as_bytes(),
        )
    };
    ok(client.put("/v1/stream/produced", "text/plain", b""));
    for seq in ["0", "1", "2"] {
        ok(producer(seq));
    }
    ok(client.put("/v1/stream/closed", "text/plain", b"the end"));
    ok(client.send("POST", "/v1/stream/closed", &[("Stream-Closed", "true")], b""));
    ok(client.send(
        "PUT",
        "/v1/stream/expires",
        &[("Content-Type", "text/plain"), ("Stream-Expires-At", "2100-01-01T00:00:00Z")],
        b"until 2100",
    ));
    ok(client.put("/v1/stream/d%C3%A9j%C3%A0/vu", "text/plain", b"unicode name"));
    ok(client.put("/v1/stream/gone", "text/plain", b"deleted"));
    ok(client.delete("/v1/stream/gone"));
    let paths = ["plain", "events/json", "bytes", "produced", "closed", "expires", "d%C3%A9j%C3%A0/vu"];
    let streams: Vec<Value> = paths
        .iter()
        .map(|path| {
            let (head, body) = read_all(client, &format!("/v1/stream/{path}"));
            json!({
                "path": path,
                "content_type": head.header("content-type"),
                "body": base64::engine::general_purpose::STANDARD.encode(body),
                "next_offset": head.header("stream-next-offset"),
                "closed": head.header("stream-closed").is_some(),
            })
        })
        .collect();
    json!({ "streams": streams, "absent": ["gone"] })
}
