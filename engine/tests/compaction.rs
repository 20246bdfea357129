//! Compaction in acid mode: a long-lived stream whose records sit in segments otherwise full
//! of deleted streams' records is moved to the head of the log, after which those segments
//! are removed — and the stream reads the same before and after, across restarts and crashes.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ds_engine::{inspect, Upkeep};
use support::{append_request, plain_config, Harness};

/// Small segments (the stream limit follows: 80 KiB).
const SEGMENT_BYTES: u64 = 96 << 10;

/// Appends `count` bodies of 1500 bytes to `stream`.
fn fill(harness: &Harness, stream: &str, count: usize) {
    for i in 0..count {
        harness.append(append_request(stream, &format!("{stream}{i:03}{}", "z".repeat(1500)))).unwrap();
    }
}

/// Segments full of short-lived streams' records, with a few of `long`'s in between.
fn mostly_dead_segments() -> (Harness, String) {
    let harness = Harness::new(SEGMENT_BYTES);
    harness.create("long", plain_config()).unwrap();
    let mut long = String::new();
    for round in 0..6 {
        let temporary = format!("tmp{round}");
        harness.create(&temporary, plain_config()).unwrap();
        fill(&harness, &temporary, 40);
        let body = format!("[long {round}]");
        harness.append(append_request("long", &body)).unwrap();
        long.push_str(&body);
        harness.delete(&temporary).unwrap();
    }
    (harness, long)
}

/// Lets the shard work while nothing else is queued (compaction moves one stream per batch).
fn idle(harness: &Harness, batches: usize) {
    for _ in 0..batches {
        harness.engine().run_pending();
    }
}

fn first_segment() -> PathBuf {
    PathBuf::from(support::SHARD_DIR).join("0000000000000001.wal")
}

#[test]
fn a_stream_in_mostly_dead_segments_is_moved_and_the_segments_go() {
    // The long-lived stream's first records are in the first segment.
    let (mut harness, long) = mostly_dead_segments();
    idle(&harness, 8);
    assert!(harness.engine().stats().moves >= 1, "compaction moved the long-lived stream");
    assert_eq!(harness.read("long").unwrap(), long);
    // Later checkpoints (at rotations) remove the segments nothing live points into.
    harness.create("more", plain_config()).unwrap();
    fill(&harness, "more", 50);
    harness.delete("more").unwrap();
    harness.create("again", plain_config()).unwrap();
    fill(&harness, "again", 50);
    idle(&harness, 8);
    assert!(
        !harness.segments().contains(&first_segment()),
        "the compacted segment is gone: {:?}",
        harness.segments()
    );
    assert_eq!(harness.read("long").unwrap(), long);

    harness.stop_abruptly();
    harness.start();
    assert_eq!(harness.read("long").unwrap(), long, "after a crash");
    harness.append(append_request("long", "[after]")).unwrap();
    harness.shutdown();
    harness.start();
    assert_eq!(harness.read("long").unwrap(), long + "[after]", "after a clean restart");
}

#[test]
fn a_move_replays_from_the_log_after_a_crash() {
    let (mut harness, long) = mostly_dead_segments();
    idle(&harness, 8);
    assert!(harness.engine().stats().moves >= 1);
    harness.append(append_request("long", "[tail]")).unwrap();
    // No checkpoint since the move: recovery replays the copies and the append after them.
    harness.lose_power(3);
    let report = harness.start();
    assert!(report.records_replayed > 0);
    assert_eq!(harness.read("long").unwrap(), long + "[tail]");
}

/// A stream moved twice, with appends between the moves: each move's copies end with one
/// `MOVE_END`, on the copy of the stream's last record (a copy of the first move's last
/// record is no end of the second), and a power cut after the second move replays both
/// into the stream as it was: nothing damaged, everything there, still writable.
#[test]
fn a_stream_moved_twice_keeps_one_move_end_per_move_and_replays_after_a_crash() {
    let mut harness = Harness::new(SEGMENT_BYTES);
    harness.create("long", plain_config()).unwrap();
    let mut long = String::new();
    for round in 0..2 {
        for i in 0..3 {
            let body = format!("[{round}.{i}]");
            harness.append(append_request("long", &body)).unwrap();
            long.push_str(&body);
        }
        let moves = harness.engine().stats().moves;
        // Its records sealed away, then compacted whatever their live share.
        harness.engine().request_upkeep(Upkeep::Seal);
        idle(&harness, 2);
        harness.engine().request_upkeep(Upkeep::Compact);
        idle(&harness, 4);
        assert_eq!(harness.engine().stats().moves, moves + 1, "round {round}: moved");
    }
    harness.append(append_request("long", "[tail]")).unwrap();
    long.push_str("[tail]");
    let (copies, ends) = moved_records(&harness);
    assert_eq!(copies, 4 + 7, "the first move copies 4 records, the second 7");
    assert_eq!(ends, vec![3, 10], "one MOVE_END per move, on its last copy");
    harness.lose_power(5);
    let report = harness.start();
    assert!(report.records_replayed > 0, "the moves are replayed");
    assert_eq!((report.damage.len(), report.damaged_streams), (0, 0), "{:?}", report.damage);
    assert_eq!(harness.read("long").unwrap(), long);
    assert!(harness.append(append_request("long", "+")).is_ok(), "still writable");
}

/// How many records of the log are compaction's copies, and which of them (counted in log
/// order) carry `MOVE_END`.
fn moved_records(harness: &Harness) -> (usize, Vec<usize>) {
    let store = inspect::open(Arc::new(harness.disk.clone()), Path::new("/data"), true).unwrap();
    let log = store.shard(0).unwrap();
    let mut copies = 0;
    let mut ends = Vec::new();
    for segment in &log.analysis.segments {
        let bytes = segment.map.slice(0, segment.readable_len() as usize);
        for record in inspect::RecordScan::new(bytes, inspect::Segment::records_start()) {
            let names = inspect::flag_names(record.header.kind, record.header.flags);
            if names.contains(&"moved") {
                if names.contains(&"move-end") {
                    ends.push(copies);
                }
                copies += 1;
            }
        }
    }
    (copies, ends)
}
