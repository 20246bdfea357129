//! The damage suite: data directories written through the server, damaged on copies, read
//! back in every read mode from every message boundary.
//!
//! The rule checked, for catch-up reads, long-poll reads, SSE and `ds-tool read`: only
//! bytes of records that pass their checks are served, starting exactly at the asked offset
//! and contiguous. A read into damage serves the intact messages before it, then answers an
//! error naming the damage (problem+json, 5xx; SSE ends after the intact events and the
//! reconnect gets the error; `ds-tool read` exits 1) — never a skip, never
//! `Stream-Up-To-Date` before the real tail. A read from after the damage serves the rest.
//! Besides: the server starts and serves every other stream, refuses writes to the damaged
//! one, logs it once, counts it in `/metrics`, and `ds-tool verify` exits 1.
//!
//! Damage: a flipped byte in the header, the metadata and the payload of a middle record
//! (acid and file-durable); the first and a middle segment missing, a segment truncated
//! (acid); a stream file cut mid-record (a torn end: cut, not damage) and flipped mid-file;
//! a stream file lost after a clean stop (its name kept, damaged); a damaged MANIFEST or
//! MANIFEST-COPY (written again from the other), both missing (the server refuses the
//! directory). Files harmed under the running
//! server are in `under_the_server.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ds_tests::client::Client;
use ds_tests::data_dir::DataDir;
use ds_tests::server::binary;
use ds_tests::Server;
use serde_json::Value;

const STREAM: &str = "/v1/stream/s";

/// How a directory is written and served.
struct Setup {
    mode: &'static str,
    messages: usize,
    /// Bytes of each message of `s` (its number first, so every message is unique).
    message_bytes: usize,
    /// Extra settings (small segments for the segment cases).
    env: &'static [(&'static str, &'static str)],
    /// Other streams written between `s`'s appends, and their message size.
    others: usize,
    other_bytes: usize,
}

const SMALL: Setup =
    Setup { mode: "acid", messages: 16, message_bytes: 6, env: &[], others: 1, other_bytes: 6 };

/// Segments of 128 KiB: `s` and four other streams fill about three of them.
const SEGMENTED: Setup = Setup {
    mode: "acid",
    messages: 40,
    message_bytes: 1000,
    env: &[("DS_STORAGE__SEGMENT_BYTES", "131072"), ("DS_LIMITS__MAX_STREAM_BYTES", "65536")],
    others: 4,
    other_bytes: 1400,
};

fn message(i: usize, bytes: usize) -> String {
    let head = format!("<m{i:03}>");
    head.clone() + &"x".repeat(bytes.saturating_sub(head.len()))
}

fn offset_of(setup: &Setup, i: usize) -> String {
    format!("{i:016}_{:016x}", i * setup.message_bytes)
}

/// The settings a server on `dir` runs with.
fn env_of(setup: &Setup, dir: &Path) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![
        ("DS_STORAGE__MODE".into(), setup.mode.into()),
        ("DS_STORAGE__DATA_DIR".into(), dir.display().to_string()),
        ("DS_STORAGE__ACID_SHARD_COUNT".into(), "1".into()),
        ("DS_SERVER__LONG_POLL_TIMEOUT_SECS".into(), "1".into()),
        ("DS_SERVER__SSE_RECONNECT_INTERVAL_SECS".into(), "2".into()),
    ];
    env.extend(setup.env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env
}

fn start(setup: &Setup, dir: &Path) -> Server {
    let env = env_of(setup, dir);
    let borrowed: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Server::start(&borrowed)
}

/// Writes `s` (each message its own record) and the other streams, then stops cleanly.
fn build(setup: &Setup) -> DataDir {
    let dir = DataDir::new("damage-source");
    let mut server = start(setup, dir.path());
    let client = server.client();
    for other in 0..setup.others {
        assert_eq!(client.put(&format!("/v1/stream/other{other}"), "text/plain", b"").status, 201);
    }
    assert_eq!(client.put(STREAM, "text/plain", message(0, setup.message_bytes).as_bytes()).status, 201);
    for i in 1..setup.messages {
        assert_eq!(client.post(STREAM, "text/plain", message(i, setup.message_bytes).as_bytes()).status, 204);
        for other in 0..setup.others {
            let body = format!("<o{other}-{i:03}>{}", "y".repeat(setup.other_bytes));
            assert_eq!(
                client.post(&format!("/v1/stream/other{other}"), "text/plain", body.as_bytes()).status,
                204
            );
        }
    }
    // Written last: whatever earlier part of the log is damaged, this stream is whole.
    assert_eq!(client.put("/v1/stream/late", "text/plain", b"late;").status, 201);
    let stopped = server.terminate();
    assert!(stopped.success(), "{stopped}: {}", server.log());
    dir
}

/// A copy of `source` to damage.
fn copy_of(source: &Path) -> DataDir {
    let copy = DataDir::new("damaged");
    let status =
        Command::new("cp").arg("-a").arg(format!("{}/.", source.display())).arg(copy.path()).status();
    assert!(status.expect("cp runs").success());
    copy
}

/// `ds-tool` with `args`: exit code, stdout, stderr.
fn ds_tool(args: &[&str]) -> (i32, Vec<u8>, String) {
    let output = Command::new(binary("ds-tool")).args(args).output().expect("ds-tool runs");
    (output.status.code().unwrap_or(-1), output.stdout, String::from_utf8_lossy(&output.stderr).into_owned())
}

/// The records of `s`, in chain order: (log file, position).
fn records_of_s(dir: &Path) -> Vec<(PathBuf, usize)> {
    records_of(dir, "s")
}

/// The records of stream `name`, in chain order: (log file, position).
fn records_of(dir: &Path, name: &str) -> Vec<(PathBuf, usize)> {
    let (code, stdout, stderr) =
        ds_tool(&["records", &dir.display().to_string(), "--stream", name, "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let rows: Vec<Value> = serde_json::from_slice(&stdout).expect("records as JSON");
    rows.iter()
        .filter(|row| matches!(row["kind"].as_str(), Some("create" | "append")))
        .map(|row| (dir.join(row["log"].as_str().unwrap()), row["position"].as_u64().unwrap() as usize))
        .collect()
}

fn flip(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 0x5a;
    std::fs::write(path, bytes).unwrap();
}

/// Where `needle` is in the file at `path`.
fn position_of(path: &Path, needle: &str) -> usize {
    let bytes = std::fs::read(path).unwrap();
    bytes.windows(needle.len()).position(|w| w == needle.as_bytes()).expect("the needle is there")
}

/// What a read from boundary `from` must give when the messages in `damaged` are damaged:
/// the intact messages up to the first damaged one at or after `from` and an error, or
/// everything to the tail.
fn expected(setup: &Setup, damaged: &[usize], from: usize) -> (String, bool) {
    let stop = damaged.iter().copied().filter(|d| *d >= from).min();
    let end = stop.unwrap_or(setup.messages);
    let text: String = (from..end).map(|i| message(i, setup.message_bytes)).collect();
    (text, stop.is_some())
}

/// Catch-up (or long-poll) reads from `offset`, following `Stream-Next-Offset`: what was
/// served, and whether the reads ended in an error rather than up to date.
fn read_all(client: &Client, offset: &str, live: &str) -> (String, bool) {
    let (mut text, mut at) = (String::new(), offset.to_string());
    for _ in 0..200 {
        let response = client.get(&format!("{STREAM}?offset={at}{live}"));
        if response.status >= 500 {
            assert_eq!(response.header("content-type"), Some("application/problem+json"));
            assert!(response.text().contains("stream-damaged"), "{}", response.text());
            return (text, true);
        }
        assert_eq!(response.status, 200, "read at {at}: {}", response.text());
        text.push_str(&response.text());
        at = response.next_offset();
        if response.header("stream-up-to-date") == Some("true") {
            return (text, false);
        }
    }
    panic!("reads from {offset} never ended");
}

/// An SSE read from `offset`: the data it carried, and whether it ended before the tail
/// with the reconnect (from the last `id:`) refused.
fn read_sse(client: &Client, offset: &str) -> (String, bool) {
    let mut response = client.open_stream(&format!("{STREAM}?offset={offset}&live=sse"), &[]);
    if response.status >= 500 {
        return (String::new(), true);
    }
    let text = response.read_until("\"upToDate\":true", Duration::from_secs(5));
    let (mut data, mut last_id) = (String::new(), offset.to_string());
    for event in text.split("\n\n").filter(|event| event.starts_with("event: data")) {
        for line in event.lines() {
            if let Some(payload) = line.strip_prefix("data:") {
                data.push_str(payload.strip_prefix(' ').unwrap_or(payload));
            }
            if let Some(id) = line.strip_prefix("id:") {
                last_id = id.to_string();
            }
        }
    }
    if text.contains("\"upToDate\":true") {
        return (data, false);
    }
    assert!(response.read_to_end(Duration::from_secs(5)), "an SSE read into damage ends");
    let again = client.get(&format!("{STREAM}?offset={last_id}&live=sse"));
    assert!(again.status >= 500, "the reconnect at the damage is refused: {}", again.status);
    (data, true)
}

/// Every read mode from every boundary, against `damaged` (message indices).
fn check_reads(setup: &Setup, dir: &Path, server: &Server, damaged: &[usize], case: &str) {
    let client = server.client();
    for from in 0..=setup.messages {
        let offset = offset_of(setup, from);
        let want = expected(setup, damaged, from);
        assert_eq!(read_all(&client, &offset, ""), want, "{case}: catch-up from message {from}");
        if from < setup.messages {
            assert_eq!(read_all(&client, &offset, "&live=long-poll"), want, "{case}: long-poll from {from}");
        }
        assert_eq!(read_sse(&client, &offset), want, "{case}: SSE from message {from}");
        let dir_text = dir.display().to_string();
        let (code, stdout, stderr) = ds_tool(&["read", &dir_text, "s", "--offset", &offset, "--force"]);
        let got = (String::from_utf8_lossy(&stdout).into_owned(), code == 1);
        assert_eq!(got, want, "{case}: ds-tool read from {from} (exit {code}: {stderr})");
    }
}

/// What must hold beside the reads: writes to `s` refused, the streams the damage did not
/// touch whole and writable, each damaged stream logged once and counted (`damaged_streams`
/// of them, `s` among them), `verify` failing.
fn check_containment(server: &Server, dir: &Path, whole: &[String], damaged_streams: usize, case: &str) {
    let client = server.client();
    let refused = client.post(STREAM, "text/plain", b"more");
    assert_eq!(refused.status, 500, "{case}: a write to the damaged stream: {}", refused.text());
    assert!(refused.text().contains("stream-damaged"), "{case}: {}", refused.text());
    for name in whole {
        let path = format!("/v1/stream/{name}");
        let read = client.get(&path);
        assert_eq!(read.status, 200, "{case}: {path}");
        assert_eq!(read.header("stream-up-to-date"), Some("true"), "{case}: {path}");
        assert_eq!(client.post(&path, "text/plain", b"more").status, 204, "{case}: {path} takes writes");
    }
    // Reading every other stream once finds whatever damage recovery could not see.
    for other in 0..8 {
        client.get(&format!("/v1/stream/other{other}"));
    }
    let metrics = client.get("/metrics").text();
    let line = metrics.lines().find(|l| l.starts_with("ds_damaged_streams ")).expect("the metric");
    assert_eq!(line, format!("ds_damaged_streams {damaged_streams}"), "{case}");
    let logged = server.log().matches("stream damaged").count();
    assert_eq!(logged, damaged_streams, "{case}: each logged once:\n{}", server.log());
    let (code, verified, stderr) = ds_tool(&["verify", &dir.display().to_string(), "--force"]);
    assert_eq!(code, 1, "{case}: verify finds it: {stderr}");
    assert_verify_agrees(&server.log(), &String::from_utf8_lossy(&verified), case);
}

/// What recovery marked a stream damaged for (offset and reason, as the server logs them)
/// is what `ds-tool verify` says of it, word for word: both read the log with the same
/// checks. (Damage a read found later is the server's alone: verify reports the record.)
fn assert_verify_agrees(server_log: &str, verified: &str, case: &str) {
    let marked =
        server_log.lines().filter(|line| line.contains("stream damaged") && line.contains(" stream=s "));
    for line in marked {
        let noted = line.split(" offset=").nth(1).expect("the damage's offset");
        let (offset, reason) = noted.split_once(" reason=").expect("the damage's reason");
        let reason = reason.trim_matches('"');
        if reason.starts_with("a read found") {
            continue;
        }
        let said = format!("damaged at offset {offset}: {reason}");
        assert!(
            verified.contains(&said),
            "{case}: the server marked s {said:?}; ds-tool verify says:\n{verified}"
        );
    }
}

/// Damages a copy of `source` with `damage` (which touches the messages `damaged` of `s`),
/// then checks it all; `lost` is the part of a segment the damage removed, if it did (the
/// other streams with records there are damaged too).
fn case(setup: &Setup, source: &Path, name: &str, damaged: &[usize], damage: impl FnOnce(&Path)) {
    case_losing(setup, source, name, damaged, None, damage)
}

fn case_losing(
    setup: &Setup,
    source: &Path,
    name: &str,
    damaged: &[usize],
    lost: Option<(&Path, usize)>,
    damage: impl FnOnce(&Path),
) {
    let others: Vec<String> =
        (0..setup.others).map(|other| format!("other{other}")).chain(["late".into()]).collect();
    let (whole, touched): (Vec<String>, Vec<String>) = others.into_iter().partition(|other| {
        lost.is_none_or(|(segment, from)| {
            !records_of(source, other).iter().any(|(file, at)| file == segment && *at >= from)
        })
    });
    let copy = copy_of(source);
    damage(copy.path());
    let mut server = start(setup, copy.path());
    check_reads(setup, copy.path(), &server, damaged, name);
    check_containment(&server, copy.path(), &whole, 1 + touched.len(), name);
    check_delete_and_restart(&mut server, &whole, touched.len(), name);
}

/// A damaged stream can be deleted and its name created afresh; the server restarts on what
/// that left, with the other streams as they were.
fn check_delete_and_restart(server: &mut Server, whole: &[String], other_damaged: usize, case: &str) {
    let client = server.client();
    assert_eq!(client.delete(STREAM).status, 204, "{case}: a damaged stream can be deleted");
    assert_eq!(server.metric("ds_damaged_streams"), other_damaged as u64, "{case}: one damaged stream fewer");
    assert_eq!(client.put(STREAM, "text/plain", b"fresh;").status, 201, "{case}");
    assert_eq!(client.post(STREAM, "text/plain", b"again;").status, 204, "{case}");
    assert!(server.terminate().success(), "{case}: a clean stop");
    server.restart();
    let client = server.client();
    assert_eq!(client.get(STREAM).text(), "fresh;again;", "{case}: the new stream after a restart");
    for name in whole {
        let read = client.get(&format!("/v1/stream/{name}"));
        assert_eq!((read.status, read.header("stream-up-to-date")), (200, Some("true")), "{case}: {name}");
    }
    assert_eq!(server.metric("ds_damaged_streams"), other_damaged as u64, "{case}: after the restart");
}

#[test]
fn a_flipped_byte_in_a_middle_record_is_read_around_in_every_mode() {
    for mode in ["acid", "file-durable"] {
        let setup = Setup { mode, ..SMALL };
        let source = build(&setup);
        let records = records_of_s(source.path());
        let middle = setup.messages / 2;
        let (file, at) = records[middle].clone();
        let file = |copy: &Path| copy.join(file.strip_prefix(source.path()).unwrap());
        case(&setup, source.path(), &format!("{mode}: header"), &[middle], |copy| flip(&file(copy), at + 20));
        case(&setup, source.path(), &format!("{mode}: metadata"), &[middle], |copy| {
            flip(&file(copy), at + 66)
        });
        let needle = message(middle, setup.message_bytes);
        case(&setup, source.path(), &format!("{mode}: payload"), &[middle], |copy| {
            let path = file(copy);
            flip(&path, position_of(&path, &needle) + 2)
        });
    }
}

#[test]
fn lost_and_truncated_segments_are_read_around() {
    let setup = SEGMENTED;
    let source = build(&setup);
    let records = records_of_s(source.path());
    let mut segments: Vec<PathBuf> = records.iter().map(|(file, _)| file.clone()).collect();
    segments.dedup();
    assert!(segments.len() >= 3, "the stream spans three segments: {segments:?}");
    let in_segment = |segment: &Path| -> Vec<usize> {
        records.iter().enumerate().filter(|(_, (file, _))| file == segment).map(|(i, _)| i).collect()
    };
    let relative = |segment: &Path| segment.strip_prefix(source.path()).unwrap().to_path_buf();
    let first = relative(&segments[0]);
    let damaged = in_segment(&segments[0]);
    let lost = Some((segments[0].as_path(), 0));
    case_losing(&setup, source.path(), "missing first segment", &damaged, lost, |copy| {
        std::fs::remove_file(copy.join(&first)).unwrap()
    });
    let middle = relative(&segments[1]);
    let damaged = in_segment(&segments[1]);
    let lost = Some((segments[1].as_path(), 0));
    case_losing(&setup, source.path(), "missing middle segment", &damaged, lost, |copy| {
        std::fs::remove_file(copy.join(&middle)).unwrap()
    });
    // Cut the second segment right after the first record of `s` in it.
    let kept = in_segment(&segments[1])[0];
    let cut_at = records[kept + 1].1;
    let damaged: Vec<usize> = in_segment(&segments[1]).into_iter().filter(|i| *i > kept).collect();
    let lost = Some((segments[1].as_path(), cut_at));
    case_losing(&setup, source.path(), "truncated segment", &damaged, lost, |copy| {
        let file = std::fs::OpenOptions::new().write(true).open(copy.join(&middle)).unwrap();
        file.set_len(cut_at as u64).unwrap();
    });
}

#[test]
fn a_stream_file_cut_mid_record_ends_there_and_one_flipped_mid_file_is_read_around() {
    let setup = Setup { mode: "file-durable", ..SMALL };
    let source = build(&setup);
    let records = records_of_s(source.path());
    let middle = setup.messages / 2;
    let (file, at) = records[middle].clone();
    let relative = file.strip_prefix(source.path()).unwrap().to_path_buf();

    // A file cut inside a record after a crash is a torn end (here: without the file ends a
    // clean stop saves): the stream ends before it (reported), and is otherwise whole and
    // writable. After the clean stop that saved them, the same cut is damage: the stream is
    // read up to it, then 500, and takes no appends.
    let whole: String = (0..middle).map(|i| message(i, setup.message_bytes)).collect();
    for clean_stop in [false, true] {
        let copy = copy_of(source.path());
        if !clean_stop {
            std::fs::remove_dir_all(copy.path().join("clean-ends")).unwrap();
        }
        std::fs::OpenOptions::new()
            .write(true)
            .open(copy.path().join(&relative))
            .unwrap()
            .set_len(at as u64 + 30)
            .unwrap();
        let server = start(&setup, copy.path());
        let client = server.client();
        assert_eq!(
            read_all(&client, "-1", ""),
            (whole.clone(), clean_stop),
            "after a clean stop: {clean_stop}"
        );
        let appended = client.post(STREAM, "text/plain", b"next").status;
        assert_eq!(appended, if clean_stop { 500 } else { 204 });
    }

    let needle = message(middle + 2, setup.message_bytes);
    case(&setup, source.path(), "stream file flipped mid-file", &[middle + 2], |copy| {
        let path = copy.join(&relative);
        flip(&path, position_of(&path, &needle) + 1)
    });
}

/// A stream file lost while the server was stopped (file-durable, after a clean stop): the
/// stream keeps its name as a damaged stream — its configuration answers `HEAD`, reads serve
/// what its create record held and then answer 500, writes answer 500 — until it is deleted, and every other stream is whole. Before, it
/// answered 404, and a client could create the name afresh over what it had been told was
/// stored.
#[test]
fn a_stream_file_lost_after_a_clean_stop_keeps_its_name() {
    let setup = Setup { mode: "file-durable", ..SMALL };
    let source = build(&setup);
    let (file, _) = records_of_s(source.path()).pop().expect("s has records");
    let copy = copy_of(source.path());
    std::fs::remove_file(copy.path().join(file.strip_prefix(source.path()).unwrap())).unwrap();
    let mut server = start(&setup, copy.path());
    let client = server.client();
    // The file comes back as its create record, which holds the create's body (message 0).
    let first = (message(0, setup.message_bytes), true);
    assert_eq!(read_all(&client, "-1", ""), first);
    assert_eq!(read_all(&client, "-1", "&live=long-poll"), first);
    assert_eq!(read_sse(&client, "-1"), first);
    let head = client.send("HEAD", STREAM, &[], b"");
    assert_eq!((head.status, head.header("content-type")), (200, Some("text/plain")));
    assert_eq!(client.put(STREAM, "application/json", b"").status, 409, "the name is taken");
    assert!(server.log().contains("stream \"s\": its file"), "named: {}", server.log());
    let whole = ["other0".to_string(), "late".to_string()];
    check_containment(&server, copy.path(), &whole, 1, "lost stream file");
    check_delete_and_restart(&mut server, &whole, 0, "lost stream file");
}

/// A source cut short under its fork (file-durable): the source's last record lost, the
/// fork's create record kept. Both read up to where the source now ends, then 500, never
/// up to date; the source takes no appends. Before, it took them at the offsets the fork
/// inherits, and the fork served them as its history.
#[test]
fn a_fork_never_reads_through_a_source_that_came_back_shorter() {
    let setup = Setup { mode: "file-durable", ..SMALL };
    let dir = DataDir::new("fork-source-cut");
    let mut server = start(&setup, dir.path());
    let client = server.client();
    assert_eq!(client.put(STREAM, "text/plain", b"one;").status, 201);
    for body in ["two;", "three;"] {
        assert_eq!(client.post(STREAM, "text/plain", body.as_bytes()).status, 204);
    }
    let fork = client.send("PUT", "/v1/stream/f", &[("Stream-Forked-From", STREAM)], b"");
    assert_eq!(fork.status, 201);
    assert!(server.terminate().success());
    let (file, last) = records_of_s(dir.path()).pop().expect("the record of three;");
    std::fs::OpenOptions::new().write(true).open(file).unwrap().set_len(last as u64 + 30).unwrap();

    let server = start(&setup, dir.path());
    let client = server.client();
    let lost_at = "0000000000000002_0000000000000008";
    for path in [STREAM, "/v1/stream/f"] {
        let read = client.get(&format!("{path}?offset=-1"));
        assert_eq!((read.status, read.text().as_str()), (200, "one;two;"), "{path}");
        assert_eq!(read.next_offset(), lost_at, "{path}");
        assert_eq!(read.header("stream-up-to-date"), None, "{path} is not whole");
        for live in ["", "&live=long-poll"] {
            let refused = client.get(&format!("{path}?offset={lost_at}{live}"));
            assert_eq!(refused.status, 500, "{path}{live}: {}", refused.text());
            assert!(refused.text().contains("stream-damaged"), "{}", refused.text());
        }
    }
    assert_eq!(client.post(STREAM, "text/plain", b"new;").status, 500, "the source takes no appends");
}

#[test]
fn a_lost_or_damaged_manifest_comes_back_from_its_copy_and_both_lost_is_refused() {
    let setup = SMALL;
    let source = build(&setup);
    let whole = (0..setup.messages).map(|i| message(i, setup.message_bytes)).collect::<String>();
    for (lost, kept) in [("MANIFEST", "MANIFEST-COPY"), ("MANIFEST-COPY", "MANIFEST")] {
        let copy = copy_of(source.path());
        let held = std::fs::read(copy.path().join(kept)).unwrap();
        std::fs::write(copy.path().join(lost), b"format=1\nmode=acid\nshards=7\n").unwrap();
        let server = start(&setup, copy.path());
        assert_eq!(read_all(&server.client(), "-1", ""), (whole.clone(), false), "{lost} damaged");
        assert_eq!(std::fs::read(copy.path().join(lost)).unwrap(), held, "{lost} written again");
        assert!(server.log().contains("manifest file written again"), "{}", server.log());
    }
    let copy = copy_of(source.path());
    std::fs::remove_file(copy.path().join("MANIFEST")).unwrap();
    std::fs::remove_file(copy.path().join("MANIFEST-COPY")).unwrap();
    let output = Command::new(binary("ds-server"))
        .env_clear()
        .envs(env_of(&setup, copy.path()))
        .env("DS_SERVER__PORT", "0")
        .env("DS_SERVER__HOST", "127.0.0.1")
        .output()
        .expect("ds-server runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no MANIFEST") && stderr.contains("acid data with 1 shards"), "{stderr}");
    assert!(!copy.path().join("MANIFEST").exists(), "nothing was written");
}
