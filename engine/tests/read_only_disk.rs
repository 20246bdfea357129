//! A file system gone read-only (ext4 remounts itself so after an error) stops writes, not
//! the process: on a simulated disk that refuses every change while reads go on, the write
//! that meets it is refused (`StorageFailed`) with nothing of it acknowledged, every
//! acknowledged write stays readable, the shard refuses every later write the same way, a
//! clean stop on the read-only disk neither panics nor aborts, and a restart once the disk
//! takes writes again has every acknowledged write and takes new ones. In every disk mode,
//! under the policy a server runs with: a sync that fails aborts the process, so an abort
//! here (a write failure taken for a sync failure) ends this test's process.

mod support;

use ds_engine::{IoErrorPolicy, OpError, StorageMode};
use support::{append_request, plain_config, Harness};

const SEGMENT_BYTES: u64 = 64 << 10;

#[test]
fn a_read_only_file_system_refuses_writes_and_keeps_reads() {
    for mode in [StorageMode::Acid, StorageMode::FileDurable, StorageMode::FileFast] {
        let mut harness = Harness::with_mode(mode, SEGMENT_BYTES);
        harness.shutdown();
        harness.io_error_policy = IoErrorPolicy::Abort;
        harness.start();
        harness.create("kept", plain_config()).unwrap();
        let mut acknowledged = String::new();
        for i in 0..20 {
            let body = format!("kept-{i};");
            harness.append(append_request("kept", &body)).unwrap();
            acknowledged.push_str(&body);
        }
        assert_eq!(harness.engine().stats().shards_failed, 0, "{mode}");

        harness.disk.set_read_only(true);
        let refused = harness.append(append_request("kept", "never-stored;"));
        assert_eq!(refused.err(), Some(OpError::StorageFailed), "{mode}: the write that met it");
        assert_eq!(harness.read("kept").as_deref(), Some(acknowledged.as_str()), "{mode}: reads go on");
        assert_eq!(harness.engine().stats().shards_failed, 1, "{mode}");
        // Every later write is refused alike, whatever it is.
        let again = harness.append(append_request("kept", "later;"));
        assert_eq!(again.err(), Some(OpError::StorageFailed), "{mode}: a later append");
        assert_eq!(harness.create("new", plain_config()).err(), Some(OpError::StorageFailed), "{mode}");
        assert_eq!(harness.delete("kept").err(), Some(OpError::StorageFailed), "{mode}: a delete");
        assert_eq!(harness.read("kept").as_deref(), Some(acknowledged.as_str()), "{mode}: still read");
        harness.shutdown();

        harness.disk.set_read_only(false);
        harness.start();
        assert_eq!(harness.read("kept").as_deref(), Some(acknowledged.as_str()), "{mode}: after a restart");
        harness.append(append_request("kept", "resumed;")).unwrap();
        acknowledged.push_str("resumed;");
        assert_eq!(harness.read("kept").as_deref(), Some(acknowledged.as_str()), "{mode}: writes resume");
        assert_eq!(harness.engine().stats().shards_failed, 0, "{mode}");
    }
}

/// An acid batch that does not fit its segment seals it and moves to the next: on the
/// read-only disk the seal's write is what fails, and that too stops the shard, not the
/// process.
#[test]
fn a_batch_that_starts_a_new_segment_on_a_read_only_disk_is_refused() {
    // Segments whose first zero-filled step holds a whole append, so the append that does
    // not fit the first segment needs no zeros the read-only disk could refuse.
    const SEGMENT_BYTES: u64 = 1 << 20;
    let body = |i: usize| format!("{i:04}{}", "k".repeat(20_000));
    let fill = |harness: &Harness, count: usize| -> String {
        let mut acknowledged = String::new();
        for i in 0..count {
            harness.append(append_request("kept", &body(i))).unwrap();
            acknowledged.push_str(&body(i));
        }
        acknowledged
    };
    // How many appends the first segment takes, on a disk that stays writable.
    let trial = Harness::new(SEGMENT_BYTES);
    trial.create("kept", plain_config()).unwrap();
    let rotated_at = (1..200).find(|_| {
        fill(&trial, 1);
        trial.segments().len() > 1
    });
    let fitting = rotated_at.expect("the first segment fills") - 1;

    let mut harness = Harness::new(SEGMENT_BYTES);
    harness.shutdown();
    harness.io_error_policy = IoErrorPolicy::Abort;
    harness.start();
    harness.create("kept", plain_config()).unwrap();
    let acknowledged = fill(&harness, fitting);
    assert_eq!(harness.segments().len(), 1, "they fit the first segment");
    harness.disk.set_read_only(true);
    let refused = harness.append(append_request("kept", &body(fitting)));
    assert_eq!(refused.err(), Some(OpError::StorageFailed));
    assert_eq!(harness.read("kept").as_deref(), Some(acknowledged.as_str()), "reads go on");
    harness.shutdown();
    harness.disk.set_read_only(false);
    harness.start();
    assert_eq!(harness.read("kept").as_deref(), Some(acknowledged.as_str()), "after a restart");
}
