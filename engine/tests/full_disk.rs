//! A full disk is back-pressure, not death: on a simulated disk with a fixed capacity,
//! writes that need space the disk does not have are refused (`InsufficientStorage`), every
//! acknowledged write stays readable, deletes still go through, a restart on the full disk
//! works, and writes resume by themselves once space comes back. In every disk mode.

mod support;

use ds_engine::{OpError, StorageMode};
use support::{append_request, plain_config, Harness};

const SEGMENT_BYTES: u64 = 64 << 10;

/// Appends 2 KiB bodies to streams `fill-0`, `fill-1`, … (each to its byte limit) until
/// the disk refuses one; what each stream acknowledged.
fn fill_until_refused(harness: &Harness) -> Vec<(String, String)> {
    let mut filled: Vec<(String, String)> = Vec::new();
    for i in 0..10_000 {
        if filled.last().is_none_or(|(_, stored)| stored.len() > 40 << 10) {
            let name = format!("fill-{}", filled.len());
            match harness.create(&name, plain_config()) {
                Ok(_) => filled.push((name, String::new())),
                Err(OpError::InsufficientStorage) => return filled,
                Err(error) => panic!("create {name}: {error}"),
            }
        }
        let (name, stored) = filled.last_mut().expect("a stream to fill");
        let body = format!("{name}:{i:05}{}", "f".repeat(2000));
        match harness.append(append_request(name, &body)) {
            Ok(_) => stored.push_str(&body),
            Err(OpError::InsufficientStorage) => return filled,
            Err(error) => panic!("append {i}: {error}"),
        }
    }
    panic!("the disk never filled");
}

fn assert_all_there(harness: &Harness, filled: &[(String, String)], when: &str) {
    for (name, stored) in filled {
        assert_eq!(harness.read(name).as_ref(), Some(stored), "{name} {when}");
    }
}

#[test]
fn a_full_disk_refuses_writes_keeps_every_acknowledged_one_and_recovers() {
    for mode in [StorageMode::Acid, StorageMode::FileDurable, StorageMode::FileFast] {
        let mut harness = Harness::with_mode(mode, SEGMENT_BYTES);
        harness.create("other", plain_config()).unwrap();
        harness.append(append_request("other", "other-data;")).unwrap();
        // The file modes keep 8 MiB free for file system metadata; acid needs new segments.
        let kept_free = if mode == StorageMode::Acid { 0 } else { 8 << 20 };
        let capacity = harness.disk.stored_bytes() + kept_free + 12 * SEGMENT_BYTES as usize;
        harness.disk.set_capacity(Some(capacity));
        let filled = fill_until_refused(&harness);
        assert!(filled.len() > 2, "{mode}: some appends went through first");

        // Reads go on; other writes are refused the same way; a delete still goes through.
        assert_all_there(&harness, &filled, &format!("{mode}: on the full disk"));
        let refused = harness.append(append_request("other", &"x".repeat(30_000)));
        assert_eq!(refused.err(), Some(OpError::InsufficientStorage), "{mode}");
        harness.delete(&filled[0].0).unwrap();

        // A restart on the full disk works, and nothing acknowledged is lost.
        harness.stop_abruptly();
        harness.start();
        assert_all_there(&harness, &filled[1..], &format!("{mode}: after a restart on the full disk"));
        assert_eq!(harness.read(&filled[0].0), None, "{mode}: the delete held");
        assert_eq!(harness.read("other").unwrap(), "other-data;");

        // Space comes back: writes resume (after the retry interval, by the engine's clock).
        harness.disk.set_capacity(None);
        harness.clock.advance_ms(2_000);
        harness.append(append_request("other", "after;")).unwrap();
        assert_eq!(harness.read("other").unwrap(), "other-data;after;", "{mode}");
        harness.shutdown();
    }
}
