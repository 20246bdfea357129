//! Files harmed under the running server, by another process or the operator: a log cut
//! short (its map faults: damage, not a crash), a log segment or a stream's file deleted,
//! the whole data directory removed or moved away. In each case the process lives, nothing is
//! acknowledged that a restart would not find, and what is intact is still served.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ds_tests::server::binary;
use ds_tests::Server;

/// A log cut short under the running server (another process truncating it; a device that
/// cannot read a page faults the map the same way): the process lives, the streams whose
/// bytes are gone are damaged (500, counted), a stream written afterwards lands in a new
/// segment (the writer finds its segment's header gone) and survives a restart, and
/// `ds-tool verify` names the damage.
#[test]
fn a_log_cut_under_the_running_server_is_damage_not_a_crash() {
    log_damaged_under_the_server(|segment| {
        std::fs::OpenOptions::new().write(true).open(segment).unwrap().set_len(0).unwrap();
    });
}

/// The same cut, then the file grown back to its size (as the log's zero-fill ahead may do):
/// no page faults, the bytes read as zeros, and the writer finds its segment's header gone.
#[test]
fn a_log_cut_and_grown_back_under_the_running_server_is_damage_too() {
    log_damaged_under_the_server(|segment| {
        let file = std::fs::OpenOptions::new().write(true).open(segment).unwrap();
        let size = file.metadata().unwrap().len();
        file.set_len(0).unwrap();
        file.set_len(size).unwrap();
    });
}

fn log_damaged_under_the_server(cut: impl FnOnce(&Path)) {
    let mut server = Server::start_in("acid", &[("DS_STORAGE__ACID_SHARD_COUNT", "1")]);
    let client = server.client();
    for name in ["/v1/stream/a", "/v1/stream/b"] {
        assert_eq!(client.put(name, "text/plain", b"first").status, 201);
        assert_eq!(client.post(name, "text/plain", b" second").status, 204);
    }
    let dir = server.data_dir().expect("acid has a directory").to_path_buf();
    cut(&first_segment(&dir));
    for name in ["/v1/stream/a", "/v1/stream/b"] {
        let read = client.get(&format!("{name}?offset=-1"));
        assert_eq!(read.status, 500, "{name}: {}", read.text());
        assert_eq!(read.json()["type"], "urn:ds:problem:stream-damaged");
    }
    // Where the log's zero-fill ahead had not finished, it extends the file again and the
    // cut pages read as zeros without a fault; either way the bytes fail their checks.
    assert!(server.client().get("/metrics").text().contains("\nds_map_faults_total "), "faults are counted");
    assert_eq!(server.metric("ds_damaged_streams"), 2);
    assert_eq!(client.get("/healthz").status, 200, "the process lives");
    assert_eq!(client.put("/v1/stream/c", "text/plain", b"after").status, 201);
    assert_eq!(client.post("/v1/stream/c", "text/plain", b" the cut").status, 204);
    assert_eq!(client.get("/v1/stream/c?offset=-1").body, b"after the cut");
    let stopped = server.terminate();
    assert!(stopped.success(), "{stopped}: {}", server.log());
    server.restart();
    let client = server.client();
    assert_eq!(
        client.get("/v1/stream/c?offset=-1").body,
        b"after the cut",
        "acknowledged after the cut: kept"
    );
    assert_eq!(client.get("/v1/stream/a?offset=-1").status, 500);
    stop_and_verify_damaged(&mut server, &dir);
}

/// The first log segment of a one-shard acid directory.
fn first_segment(dir: &Path) -> PathBuf {
    let mut segments: Vec<PathBuf> =
        std::fs::read_dir(dir.join("shard-000")).unwrap().map(|entry| entry.unwrap().path()).collect();
    segments.retain(|path| path.extension().is_some_and(|ext| ext == "wal"));
    segments.sort();
    segments.remove(0)
}

/// Stops the server cleanly; `ds-tool verify` then finds the damage in `dir`.
fn stop_and_verify_damaged(server: &mut Server, dir: &Path) {
    let stopped = server.terminate();
    assert!(stopped.success(), "{stopped}: {}", server.log());
    let verify = ds_tool_verify(dir);
    let stderr = String::from_utf8_lossy(&verify.stderr);
    assert_eq!(verify.status.code(), Some(1), "verify names the damage: {stderr}");
}

/// The active log segment deleted under the running server: the writer sees the deletion at
/// its next commit (it asks at most every 10 ms) and moves to a new segment, so everything
/// acknowledged afterwards survives the restart. Before, it went on writing and syncing the
/// deleted file and acknowledged records no restart could find. The deleted segment's own
/// records are still in its map, and its streams are the first moved out of it once the
/// shard idles; whether that happened before the stop or not, a stream of it is after the
/// restart either whole or damaged (500, and `ds-tool verify` says so), never served in part.
#[test]
fn a_log_segment_deleted_under_the_running_server_takes_nothing_acknowledged_after_it() {
    let mut server = Server::start_in("acid", &[("DS_STORAGE__ACID_SHARD_COUNT", "1")]);
    let client = server.client();
    assert_eq!(client.put("/v1/stream/a", "text/plain", b"first").status, 201);
    let last_commit = Instant::now();
    let dir = server.data_dir().expect("acid has a directory").to_path_buf();
    std::fs::remove_file(first_segment(&dir)).unwrap();
    past_the_check(last_commit, ACTIVE_SEGMENT_CHECK);
    assert_eq!(client.post("/v1/stream/a", "text/plain", b" second").status, 204);
    assert_eq!(client.put("/v1/stream/c", "text/plain", b"after").status, 201);
    assert_eq!(client.post("/v1/stream/c", "text/plain", b" the deletion").status, 204);
    assert_eq!(client.get("/v1/stream/a?offset=-1").body, b"first second", "still mapped until a restart");
    let stopped = server.terminate();
    assert!(stopped.success(), "{stopped}: {}", server.log());
    // Checked once stopped: the log's writer flushes its lines when it goes idle.
    assert!(server.log().contains("was deleted under the server"), "reported: {}", server.log());
    server.restart();
    let client = server.client();
    let c = client.get("/v1/stream/c?offset=-1");
    assert_eq!((c.status, c.body.as_slice()), (200, &b"after the deletion"[..]), "acknowledged after: kept");
    let a = client.get("/v1/stream/a?offset=-1");
    let stopped = server.terminate();
    assert!(stopped.success(), "{stopped}: {}", server.log());
    let verify = ds_tool_verify(&dir);
    match a.status {
        200 => {
            assert_eq!(a.body, b"first second", "moved out of the deleted segment: whole");
            assert_eq!(verify.status.code(), Some(0), "{}", String::from_utf8_lossy(&verify.stderr));
        }
        status => {
            assert_eq!(status, 500, "its first record went with the file: {}", a.text());
            assert_eq!(verify.status.code(), Some(1), "verify names the damage");
        }
    }
}

/// Small segments (4 MiB) and appends (1 MiB), on one shard.
const SMALL_SEGMENTS: [(&str, &str); 3] = [
    ("DS_STORAGE__ACID_SHARD_COUNT", "1"),
    ("DS_STORAGE__SEGMENT_BYTES", "4194304"),
    ("DS_LIMITS__MAX_APPEND_BYTES", "1048576"),
];

/// A deleted active segment whose stream fills half of it (compaction alone would leave a
/// segment over a quarter live where it is) is still moved out of its map first once the
/// shard idles: after a clean stop and a restart the stream is whole and nothing is damaged.
#[test]
fn a_deleted_segments_streams_are_moved_out_of_its_map() {
    let mut server = Server::start_in("acid", &SMALL_SEGMENTS);
    let client = server.client();
    let half = megabyte(b'a');
    assert_eq!(client.put("/v1/stream/a", "text/plain", &half).status, 201);
    assert_eq!(client.post("/v1/stream/a", "text/plain", &half).status, 204);
    let last_commit = Instant::now();
    let dir = server.data_dir().expect("acid has a directory").to_path_buf();
    std::fs::remove_file(first_segment(&dir)).unwrap();
    past_the_check(last_commit, ACTIVE_SEGMENT_CHECK);
    assert_eq!(client.post("/v1/stream/a", "text/plain", b"!").status, 204, "into a new segment");
    wait_for_moves(&dir, 1);
    let whole = [&half[..], &half[..], b"!"].concat();
    restart_and_read_whole(&mut server, &[("/v1/stream/a", &whole)]);
}

/// A sealed segment (not the one being written) deleted under the running server is found
/// when the shard idles (at most once a second) and its streams are moved out of its map:
/// whole after a restart.
#[test]
fn a_deleted_sealed_segments_streams_are_moved_out_of_its_map() {
    let mut server = Server::start_in("acid", &SMALL_SEGMENTS);
    let client = server.client();
    let (a, b, c) = (megabyte(b'a'), megabyte(b'b'), megabyte(b'c'));
    for (name, body) in [("/v1/stream/a", &a), ("/v1/stream/b", &b)] {
        assert_eq!(client.put(name, "text/plain", body).status, 201);
        assert_eq!(client.post(name, "text/plain", body).status, 204);
    }
    assert_eq!(client.put("/v1/stream/c", "text/plain", &c).status, 201, "into the second segment");
    let last_commit = Instant::now();
    let dir = server.data_dir().expect("acid has a directory").to_path_buf();
    std::fs::remove_file(first_segment(&dir)).unwrap();
    past_the_check(last_commit, SEALED_SEGMENTS_CHECK);
    assert_eq!(client.post("/v1/stream/c", "text/plain", b"!").status, 204);
    wait_for_moves(&dir, 2);
    let (a_whole, b_whole, c_whole) =
        ([&a[..], &a[..]].concat(), [&b[..], &b[..]].concat(), [&c[..], b"!"].concat());
    let expected = [("/v1/stream/a", &a_whole), ("/v1/stream/b", &b_whole), ("/v1/stream/c", &c_whole)];
    restart_and_read_whole(&mut server, &expected);
}

/// A megabyte of text that starts with `first`.
fn megabyte(first: u8) -> Vec<u8> {
    (0..1_000_000u32).map(|i| first + (i % 20) as u8).collect()
}

/// How often, at most, an acid shard asks whether its active segment still has its name
/// (before a commit), whether a sealed segment of it does (when it idles), and a file mode
/// whether a stream's file does (before its append).
const ACTIVE_SEGMENT_CHECK: Duration = Duration::from_millis(10);
const SEALED_SEGMENTS_CHECK: Duration = Duration::from_millis(1000);
const STREAM_FILE_CHECK: Duration = Duration::from_millis(10);

/// Waits until the server's next look (made at most every `interval`) cannot have been made
/// before a deletion done after `last`, the moment of its last look: the deletion is then
/// what that look finds.
fn past_the_check(last: Instant, interval: Duration) {
    let due = last + interval + Duration::from_millis(2);
    if let Some(left) = due.checked_duration_since(Instant::now()) {
        std::thread::sleep(left);
    }
}

/// Waits until the server has seen its data directory go: a create of a new stream is
/// refused with 503 (the directory is asked after, at most every 10 ms, so a few
/// creates may still be taken, where no restart finds them).
fn wait_until_writes_are_refused(client: &ds_tests::Client, mode: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    for probe in 0.. {
        if client.put(&format!("/v1/stream/probe-{probe}"), "text/plain", b"").status == 503 {
            return;
        }
        assert!(Instant::now() < deadline, "{mode}: writes are refused once the directory is gone");
    }
}

/// Waits until `count` streams of the running server in `dir` were moved (compaction).
fn wait_for_moves(dir: &Path, count: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while records_of_live_dir(dir).matches("move-end").count() < count {
        assert!(std::time::Instant::now() < deadline, "not moved: {}", records_of_live_dir(dir));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Stops and restarts the server; each stream of `expected` reads back whole; after a
/// last stop `ds-tool verify` finds nothing damaged.
fn restart_and_read_whole(server: &mut Server, expected: &[(&str, &Vec<u8>)]) {
    let stopped = server.terminate();
    assert!(stopped.success(), "{stopped}: {}", server.log());
    server.restart();
    for (name, whole) in expected {
        let read = server.client().get(&format!("{name}?offset=-1"));
        assert_eq!((read.status, read.body.len()), (200, whole.len()), "{name}: {}", read.text());
        assert!(read.body == **whole, "{name} reads back byte for byte");
    }
    let dir = server.data_dir().expect("acid has a directory").to_path_buf();
    let stopped = server.terminate();
    assert!(stopped.success(), "{stopped}: {}", server.log());
    let verify = ds_tool_verify(&dir);
    assert_eq!(verify.status.code(), Some(0), "{}", String::from_utf8_lossy(&verify.stderr));
}

/// `ds-tool records --force` of the directory of a running server.
fn records_of_live_dir(dir: &Path) -> String {
    let output =
        Command::new(binary("ds-tool")).args(["records", "--force"]).arg(dir).output().expect("ds-tool runs");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `ds-tool verify DIR` (its exit code: 1 when anything is damaged).
fn ds_tool_verify(dir: &Path) -> std::process::Output {
    Command::new(binary("ds-tool")).arg("verify").arg(dir).output().expect("ds-tool runs")
}

/// A stream's file deleted under the running server (file-durable, file-fast): before its
/// next append the file is written again from the one the server still holds open, so the
/// append is acknowledged into a file a restart finds and the stream survives whole. Without
/// that, the stream would be refused as damaged from then on and gone after a restart.
#[test]
fn a_stream_file_deleted_under_the_running_server_is_written_again() {
    for mode in ["file-durable", "file-fast"] {
        let mut server = Server::start_in(mode, &[]);
        let client = server.client();
        for name in ["/v1/stream/gone", "/v1/stream/kept"] {
            assert_eq!(client.put(name, "text/plain", b"first").status, 201);
            assert_eq!(client.post(name, "text/plain", b" second").status, 204);
        }
        let dir = server.data_dir().expect("a disk mode has a directory").to_path_buf();
        let file = file_holding(&dir.join("streams"), b"gone");
        let last_append = Instant::now();
        std::fs::remove_file(&file).unwrap();
        past_the_check(last_append, STREAM_FILE_CHECK);
        assert_eq!(client.post("/v1/stream/gone", "text/plain", b" third").status, 204, "{mode}");
        assert!(file.exists(), "{mode}: written again");
        assert_eq!(client.get("/v1/stream/gone?offset=-1").body, b"first second third", "{mode}");
        assert_eq!(client.post("/v1/stream/kept", "text/plain", b" third").status, 204);
        let stopped = server.terminate();
        assert!(stopped.success(), "{stopped}: {}", server.log());
        assert!(server.log().contains("written again from the open file"), "{mode}: {}", server.log());
        server.restart();
        let client = server.client();
        for name in ["/v1/stream/gone", "/v1/stream/kept"] {
            let read = client.get(&format!("{name}?offset=-1"));
            assert_eq!(
                (read.status, read.body.as_slice()),
                (200, &b"first second third"[..]),
                "{mode} {name}"
            );
        }
        let stopped = server.terminate();
        assert!(stopped.success(), "{stopped}: {}", server.log());
        let verify = ds_tool_verify(&dir);
        assert_eq!(verify.status.code(), Some(0), "{mode}: {}", String::from_utf8_lossy(&verify.stderr));
    }
}

/// The `LOCK` file deleted under a running server (a "stale lock" cleared by hand): a second
/// server started on the same directory is still refused, since the directory itself is
/// locked too, and the first goes on.
#[test]
fn a_lock_file_deleted_under_the_running_server_still_keeps_a_second_one_out() {
    let server = Server::start_in("acid", &[("DS_STORAGE__ACID_SHARD_COUNT", "1")]);
    let dir = server.data_dir().expect("acid has a directory").to_path_buf();
    std::fs::remove_file(dir.join("LOCK")).unwrap();
    let second = Command::new(binary("ds-server"))
        .env_clear()
        .env("DS_STORAGE__MODE", "acid")
        .env("DS_STORAGE__ACID_SHARD_COUNT", "1")
        .env("DS_STORAGE__DATA_DIR", &dir)
        .env("DS_SERVER__PORT", "0")
        .env("DS_SERVER__HOST", "127.0.0.1")
        .output()
        .expect("ds-server runs");
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "a second server opened the directory: {stderr}");
    assert!(stderr.contains("in use by another process"), "{stderr}");
    assert_eq!(server.client().put("/v1/stream/a", "text/plain", b"on").status, 201, "the first goes on");
}

/// The one file under `dir` (searched through its subdirectories) whose bytes hold `needle`.
fn file_holding(dir: &Path, needle: &[u8]) -> PathBuf {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if std::fs::read(&path).unwrap().windows(needle.len()).any(|w| w == needle) {
                found.push(path);
            }
        }
    }
    assert_eq!(found.len(), 1, "one file holds {:?}: {found:?}", String::from_utf8_lossy(needle));
    found.remove(0)
}

/// The data directory moved away under the running server (`mv` of it): the process still
/// holds its files, but a restart at the configured path would not find what it wrote there.
/// Writes are refused as for a removed directory; reads go on; the moved directory is left
/// as it was.
#[test]
fn a_data_directory_moved_under_the_running_server_takes_no_writes() {
    for mode in ["acid", "file-durable"] {
        let mut server = Server::start_in(mode, &[]);
        let client = server.client();
        assert_eq!(client.put("/v1/stream/a", "text/plain", b"first").status, 201, "{mode}");
        let dir = server.data_dir().expect("a disk mode has a directory").to_path_buf();
        let moved = dir.with_extension("moved");
        std::fs::rename(&dir, &moved).unwrap();
        wait_until_writes_are_refused(&client, mode);
        let refused = client.post("/v1/stream/a", "text/plain", b" second");
        assert_eq!(refused.status, 503, "{mode}: {}", refused.text());
        assert_eq!(refused.json()["type"], "urn:ds:problem:data-directory-removed", "{mode}");
        let read = client.get("/v1/stream/a?offset=-1");
        assert_eq!((read.status, read.body.as_slice()), (200, &b"first"[..]), "{mode}");
        let stopped = server.terminate();
        assert!(stopped.success(), "{mode}: {stopped}: {}", server.log());
        assert!(server.log().contains("removed (or moved)"), "{mode}: {}", server.log());
        assert!(!dir.exists(), "{mode}: nothing made the directory again");
        std::fs::remove_dir_all(&moved).unwrap();
    }
}

/// The whole data directory removed under the running server (an `rm -rf` of it), in every
/// disk mode: writes of every kind are refused (503 `data-directory-removed`) instead of
/// stopping the process (acid could not start a new segment) or being acknowledged into a
/// directory made anew that no restart would read (file modes created a new stream's file
/// there); what the process holds open is still served, it stops cleanly, and nothing makes
/// the directory again.
#[test]
fn a_data_directory_removed_under_the_running_server_takes_no_writes_and_serves_reads() {
    for mode in ["acid", "file-durable", "file-fast"] {
        let mut server = Server::start_in(mode, &[]);
        let client = server.client();
        for name in ["/v1/stream/a", "/v1/stream/b"] {
            assert_eq!(client.put(name, "text/plain", b"first").status, 201, "{mode}");
            assert_eq!(client.post(name, "text/plain", b" second").status, 204, "{mode}");
        }
        let dir = server.data_dir().expect("a disk mode has a directory").to_path_buf();
        std::fs::remove_dir_all(&dir).unwrap();
        wait_until_writes_are_refused(&client, mode);
        let refusals = [
            client.post("/v1/stream/a", "text/plain", b" third"),
            client.put("/v1/stream/new", "text/plain", b"new"),
            client.send("POST", "/v1/stream/b", &[("stream-closed", "true")], b""),
            client.delete("/v1/stream/b"),
        ];
        for refused in refusals {
            assert_eq!(refused.status, 503, "{mode}: {}", refused.text());
            assert_eq!(refused.json()["type"], "urn:ds:problem:data-directory-removed", "{mode}");
        }
        for name in ["/v1/stream/a", "/v1/stream/b"] {
            let read = client.get(&format!("{name}?offset=-1"));
            assert_eq!((read.status, read.body.as_slice()), (200, &b"first second"[..]), "{mode} {name}");
        }
        assert_eq!(client.get("/healthz").status, 200, "{mode}: the process lives");
        let stopped = server.terminate();
        assert!(stopped.success(), "{mode}: {stopped}: {}", server.log());
        // Checked once stopped: the log's writer flushes its lines when it goes idle.
        assert!(server.log().contains("data directory was removed"), "{mode}: {}", server.log());
        assert!(!dir.exists(), "{mode}: nothing made the directory again");
    }
}
