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
