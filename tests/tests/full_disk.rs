//! A full disk, for real: the server's data directory on a small file system of its own — a
//! tmpfs, and an ext4 image on a loop device (the file system acid is tuned for: there its
//! shards share each device flush and zero-fill their segments ahead, and both meet the full
//! disk).
//!
//! Writes fill it until they get 507 (a problem document); every acknowledged write stays
//! readable, reads go on, a delete goes through; freeing space lets writes resume by
//! themselves; a stop and a restart on the full disk work and lose nothing. In acid and
//! file-durable mode. Mounting needs root (as the tests run here and in CI), and the ext4
//! image `mkfs.ext4` and a loop device; where one is missing the test says so on stderr and
//! checks nothing.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ds_tests::scratch::{skipped, start_server, Scratch};
use ds_tests::Server;

/// A file that takes space on it, removed to give space back.
const FILLER_BYTES: usize = 6 << 20;
const BODY_BYTES: usize = 32 << 10;

/// Appends to streams `{prefix}-0`, `{prefix}-1`, … until the disk refuses; what each holds.
fn fill(server: &Server, prefix: &str) -> Vec<(String, Vec<u8>)> {
    let client = server.client();
    let mut filled: Vec<(String, Vec<u8>)> = Vec::new();
    for i in 0..100_000 {
        if filled.last().is_none_or(|(_, stored)| stored.len() + BODY_BYTES > 256 << 10) {
            let path = format!("/v1/stream/{prefix}-{}", filled.len());
            let created = client.put(&path, "application/octet-stream", b"");
            if created.status == 507 {
                return filled;
            }
            assert_eq!(created.status, 201, "{}", created.text());
            filled.push((path, Vec::new()));
        }
        let (path, stored) = filled.last_mut().unwrap();
        let body = vec![(i % 251) as u8; BODY_BYTES];
        let answer = client.post(path, "application/octet-stream", &body);
        match answer.status {
            204 => stored.extend_from_slice(&body),
            507 => {
                assert_eq!(answer.header("content-type"), Some("application/problem+json"));
                assert!(answer.text().contains("disk-full"), "{}", answer.text());
                return filled;
            }
            status => panic!("append {i}: {status} {}", answer.text()),
        }
    }
    panic!("the disk never filled");
}

fn assert_all_there(server: &Server, filled: &[(String, Vec<u8>)], when: &str) {
    let client = server.client();
    for (path, stored) in filled {
        let read = client.get(path);
        assert_eq!(read.status, 200, "{path} {when}");
        assert!(read.body == *stored, "{path} {when}: {} bytes of {}", read.body.len(), stored.len());
    }
}

/// Appends to `path` until one goes through (space came back), within `timeout`.
fn wait_for_writes(server: &Server, path: &str, timeout: Duration) {
    let client = server.client();
    let deadline = Instant::now() + timeout;
    loop {
        let status = client.post(path, "text/plain", b"after;").status;
        if status == 204 {
            return;
        }
        assert_eq!(status, 507);
        assert!(Instant::now() < deadline, "writes did not resume once space came back");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn filler(scratch: &Scratch, name: &str) -> PathBuf {
    let path = scratch.path().join(name);
    std::fs::write(&path, vec![7u8; FILLER_BYTES]).unwrap();
    path
}

#[test]
fn a_full_tmpfs_is_back_pressure_not_death() {
    match Scratch::tmpfs() {
        Some(scratch) => back_pressure_not_death(&scratch, false),
        None => skipped("a_full_tmpfs_is_back_pressure_not_death", "cannot mount a tmpfs (not root?)"),
    }
}

#[test]
fn a_full_ext4_is_back_pressure_not_death() {
    match Scratch::ext4("defaults") {
        Some(scratch) => back_pressure_not_death(&scratch, true),
        None => skipped(
            "a_full_ext4_is_back_pressure_not_death",
            "cannot make and mount an ext4 image (no mkfs.ext4, no loop device, or not root)",
        ),
    }
}

/// `shared_flush`: whether acid's shards share each device flush there (ext4: they do).
fn back_pressure_not_death(scratch: &Scratch, shared_flush: bool) {
    for mode in ["acid", "file-durable"] {
        let data = scratch.path().join(mode);
        let fillers =
            [filler(scratch, &format!("{mode}-filler-1")), filler(scratch, &format!("{mode}-filler-2"))];
        let mut server = start_server(mode, &data);
        let client = server.client();
        if mode == "acid" {
            assert_eq!(server.metric("ds_flush_shared"), u64::from(shared_flush), "{mode}: ds_flush_shared");
        }
        assert_eq!(client.put("/v1/stream/kept", "text/plain", b"kept;").status, 201);
        let mut filled = fill(&server, "first");
        assert!(filled.len() > 2, "{mode}: the disk took some writes first");
        assert_all_there(&server, &filled, &format!("{mode} on the full disk"));
        assert_eq!(client.get("/v1/stream/kept").text(), "kept;", "{mode}: reads go on");
        let (gone, _) = filled.remove(0);
        assert_eq!(client.delete(&gone).status, 204, "{mode}: a delete goes through");

        std::fs::remove_file(&fillers[0]).unwrap();
        wait_for_writes(&server, "/v1/stream/kept", Duration::from_secs(10));
        filled.extend(fill(&server, "second"));

        // A stop on the full disk (its checkpoint may not fit), and a start on it.
        assert!(server.terminate().success(), "{mode}: a clean stop on a full disk");
        server.restart();
        assert_all_there(&server, &filled, &format!("{mode} after a restart on the full disk"));
        assert_eq!(server.client().get(&gone).status, 404, "{mode}: the delete held");
        std::fs::remove_file(&fillers[1]).unwrap();
        wait_for_writes(&server, "/v1/stream/kept", Duration::from_secs(10));
        assert!(server.terminate().success());
        std::fs::remove_dir_all(&data).unwrap();
    }
}
