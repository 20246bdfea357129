//! A file system that goes read-only under the server, for real: an ext4 image mounted
//! `errors=remount-ro` (the default of many distributions) is made to record an error
//! (`/sys/fs/ext4/DEVICE/trigger_fs_error`), which turns it read-only at once, as a device or
//! metadata error would.
//!
//! The server stays up. Each write that meets it gets a 503 problem document and no
//! acknowledged byte changes; reads of every stream go on; `ds_shards_failed` counts the
//! shards that stopped writing; a clean stop works. Once the file system is repaired and
//! mounted again, a restart has every acknowledged write and takes new ones. In acid and
//! file-durable mode. Needs root, `mkfs.ext4`, `e2fsck` and a loop device (else SKIPPED).

use std::path::Path;

use ds_tests::scratch::{skipped, start_server, Scratch};
use ds_tests::Server;

const TEST: &str = "a_file_system_gone_read_only_stops_writes_not_reads";
const STREAMS: usize = 8;

/// Every stream holds what was acknowledged for it.
fn assert_all_there(server: &Server, held: &[String], when: &str) {
    let client = server.client();
    for (i, expected) in held.iter().enumerate() {
        let read = client.get(&format!("/v1/stream/s{i}"));
        assert_eq!((read.status, read.text()), (200, expected.clone()), "s{i} {when}");
    }
}

#[test]
fn a_file_system_gone_read_only_stops_writes_not_reads() {
    for mode in ["acid", "file-durable"] {
        let Some(scratch) = Scratch::ext4("errors=remount-ro") else {
            return skipped(
                TEST,
                "cannot make and mount an ext4 image (no mkfs.ext4, no loop device, or not root)",
            );
        };
        let trigger = scratch
            .ext4_device()
            .map(|device| Path::new("/sys/fs/ext4").join(device).join("trigger_fs_error"));
        let Some(trigger) = trigger.filter(|path| path.exists()) else {
            return skipped(TEST, "the kernel has no /sys/fs/ext4/DEVICE/trigger_fs_error");
        };
        let data = scratch.path().join(mode);
        let mut server = start_server(mode, &data);
        let client = server.client();
        let mut held = Vec::new();
        for i in 0..STREAMS {
            let path = format!("/v1/stream/s{i}");
            assert_eq!(client.put(&path, "text/plain", format!("first-{i};").as_bytes()).status, 201);
            assert_eq!(client.post(&path, "text/plain", format!("second-{i};").as_bytes()).status, 204);
            held.push(format!("first-{i};second-{i};"));
        }

        std::fs::write(&trigger, "ds test: read-only from here").unwrap();
        for i in 0..STREAMS {
            let refused = client.post(&format!("/v1/stream/s{i}"), "text/plain", b"never;");
            assert_eq!(refused.status, 503, "{mode}: s{i}: {}", refused.text());
            assert_eq!(refused.header("content-type"), Some("application/problem+json"), "{mode}");
        }
        let created = client.put("/v1/stream/new", "text/plain", b"");
        assert_eq!(created.status, 503, "{mode}: a create: {}", created.text());
        assert_all_there(&server, &held, &format!("{mode} on the read-only file system"));
        assert!(server.metric("ds_shards_failed") >= 1, "{mode}: ds_shards_failed");
        assert_eq!(client.get("/healthz").status, 200, "{mode}: the server is up");
        assert!(server.terminate().success(), "{mode}: a clean stop on a read-only file system");

        assert!(scratch.ext4_remount_repaired("defaults"), "{mode}: the file system repaired");
        server.restart();
        assert_all_there(&server, &held, &format!("{mode} after a restart"));
        let client = server.client();
        for i in 0..STREAMS {
            assert_eq!(
                client.post(&format!("/v1/stream/s{i}"), "text/plain", b"third;").status,
                204,
                "{mode}"
            );
        }
        assert_eq!(server.metric("ds_shards_failed"), 0, "{mode}");
        assert!(server.terminate().success());
    }
}
