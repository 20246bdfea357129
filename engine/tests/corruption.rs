//! Recovery from damaged logs: a flipped byte, a zeroed tail, a truncated segment, a torn
//! batch, lost checkpoints, a damaged segment header. A torn write (the unacknowledged end a crash leaves) is cut;
//! damage to bytes written whole is stepped over: the damaged stream is marked, read up to
//! the damage and after it, and refuses writes; every other stream goes on. Recovery reports
//! what it found, and the log stays writable and recoverable afterwards.

mod support;

use std::path::Path;

use ds_engine::testing::Vfs;
use ds_engine::OpError;
use ds_engine::ReadError;
use ds_engine::StorageMode;
use ds_engine::Upkeep;
use support::{append_request, plain_config, ten_records_in, Harness};

const SEGMENT_BYTES: u64 = 4 << 20;

/// A stream `s` with records `r00-…` to `r09-…`, each its own commit, left without a
/// clean shutdown (so recovery replays every record).
fn ten_records() -> (Harness, Vec<String>) {
    ten_records_in(StorageMode::Acid, SEGMENT_BYTES)
}

#[test]
fn a_flipped_byte_is_damage_and_the_records_around_it_stay() {
    let (mut harness, bodies) = ten_records();
    let segment = harness.segments()[0].clone();
    let at = harness.find(&segment, "r06-");
    harness.disk.corrupt(&segment, at + 10, b"X").unwrap();

    for restart in 0..2 {
        let report = harness.start();
        let damage = report.damage.first().expect("the damage is reported");
        assert_eq!(damage.file, segment);
        assert!(damage.reason.contains("checksum"), "{}", damage.reason);
        assert_eq!(report.stale_bytes, 0, "nothing is cut");
        assert_eq!(report.damaged_streams, 1);
        let six = Harness::offset_of(&bodies, 6);
        assert_eq!(harness.damage("s").map(|d| d.at), Some(six), "restart {restart}");
        let (before, error) = harness.read_from("s", ds_engine::Offset::ZERO);
        assert_eq!(
            (before, error),
            (bodies[..6].concat(), Some(ReadError::Damaged)),
            "the intact part, then the damage"
        );
        assert_eq!(
            harness.read_from("s", Harness::offset_of(&bodies, 7)),
            (bodies[7..].concat(), None),
            "and after it"
        );
        assert!(matches!(harness.append(append_request("s", "x")), Err(OpError::StreamDamaged { .. })));
        harness.stop_abruptly();
    }
}

/// Zeros from the middle of a record to the end of the log: no sector of the record reads
/// as zeros as a whole, so it is not a torn write but an acknowledged record damaged; its
/// stream is marked and read up to it.
#[test]
fn a_zeroed_tail_inside_a_sector_is_damage_not_a_torn_write() {
    let (mut harness, bodies) = ten_records();
    let segment = harness.segments()[0].clone();
    let at = harness.find(&segment, "r07-");
    let end = harness.find(&segment, "r09-") + bodies[9].len();
    harness.disk.corrupt(&segment, at + 5, &vec![0; end - at - 5]).unwrap();

    for _ in 0..2 {
        let report = harness.start();
        assert!(!report.damage.is_empty());
        assert_eq!(
            harness.read_from("s", ds_engine::Offset::ZERO),
            (bodies[..7].concat(), Some(ReadError::Damaged))
        );
        assert_eq!(harness.damage("s").map(|d| d.at), Some(Harness::offset_of(&bodies, 7)));
        harness.stop_abruptly();
    }
}

/// A whole sector of zeros where the last records were: what a crash leaves of a write
/// that never reached the disk. The torn end is cut; everything before it stays.
#[test]
fn a_torn_end_is_cut_and_the_records_before_it_stay() {
    let mut harness = Harness::new(SEGMENT_BYTES);
    harness.create("s", plain_config()).unwrap();
    let bodies: Vec<String> = (0..4).map(|i| format!("r{i}-{}", "x".repeat(700))).collect();
    for body in &bodies {
        harness.append(append_request("s", body)).unwrap();
    }
    harness.stop_abruptly();
    let segment = harness.segments()[0].clone();
    let at = harness.find(&segment, "r3-");
    let sector = at.div_ceil(512) * 512;
    harness.disk.corrupt(&segment, sector, &[0; 512]).unwrap();

    let report = harness.start();
    assert_eq!(harness.read("s").unwrap(), bodies[..3].concat());
    assert_eq!((report.damaged_streams, report.damage.len()), (0, 1), "the torn end is reported, not damage");
    harness.append(append_request("s", "after")).unwrap();
    harness.stop_abruptly();
    harness.start();
    assert_eq!(harness.read("s").unwrap(), bodies[..3].concat() + "after");
}

/// Zeros over a whole record (its header too) in the middle of the last segment, with the
/// records of later batches after it (each append its own batch, a millisecond apart):
/// those batches were written only once this one was durable, so the zeros are damage to an
/// acknowledged record, not the end of the log. Before, replay took the zeros for the end,
/// and every record after them was silently gone (and written over). The same zeros in a
/// stream file of file-durable.
#[test]
fn zeros_followed_by_later_batches_are_damage_not_the_end_of_the_log() {
    for mode in [StorageMode::Acid, StorageMode::FileDurable] {
        let mut harness = Harness::with_mode(mode, SEGMENT_BYTES);
        harness.create("s", plain_config()).unwrap();
        let bodies: Vec<String> = (0..10).map(|i| format!("r{i:02}-{}|", "x".repeat(600 + i))).collect();
        for body in &bodies {
            harness.clock.advance_ms(1);
            harness.append(append_request("s", body)).unwrap();
        }
        harness.stop_abruptly();
        let file = match mode {
            StorageMode::Acid => harness.segments()[0].clone(),
            _ => harness.stream_file("s"),
        };
        // Record 5 runs from where record 4's data ends (padded to 8 bytes) to where its own does.
        let end_of = |i: usize| (harness.find(&file, &bodies[i][..4]) + bodies[i].len()).next_multiple_of(8);
        let (from, to) = (end_of(4), end_of(5));
        harness.disk.corrupt(&file, from, &vec![0; to - from]).unwrap();

        for restart in 0..2 {
            let report = harness.start();
            assert!(!report.damage.is_empty(), "{mode:?}: the damage is reported");
            assert_eq!(report.damaged_streams, 1, "{mode:?}");
            let five = Harness::offset_of(&bodies, 5);
            assert_eq!(harness.damage("s").map(|d| d.at), Some(five), "{mode:?}, restart {restart}");
            assert_eq!(
                harness.read_from("s", ds_engine::Offset::ZERO),
                (bodies[..5].concat(), Some(ReadError::Damaged)),
                "{mode:?}: the intact part, then the damage"
            );
            assert_eq!(
                harness.read_from("s", Harness::offset_of(&bodies, 6)),
                (bodies[6..].concat(), None),
                "{mode:?}: the records after the zeros are kept"
            );
            harness.stop_abruptly();
        }
    }
}

/// The same after a clean stop and a restart that wrote on from where the clean checkpoint
/// ends the log (and crashed before its next checkpoint): the first record written after
/// the restart zeroed is damage, and every later batch is kept, not dropped as if the log
/// ended where the clean stop left it.
#[test]
fn zeros_where_a_clean_stop_ended_the_log_are_damage_when_later_batches_follow() {
    let mut harness = Harness::new(SEGMENT_BYTES);
    harness.create("s", plain_config()).unwrap();
    let bodies: Vec<String> = (0..10).map(|i| format!("r{i:02}-{}|", "x".repeat(600 + i))).collect();
    harness.append(append_request("s", &bodies[0])).unwrap();
    harness.shutdown();
    harness.start();
    for body in &bodies[1..] {
        harness.clock.advance_ms(1);
        harness.append(append_request("s", body)).unwrap();
    }
    harness.stop_abruptly();
    let file = harness.segments()[0].clone();
    // Record 1, the first after the restart, runs from where record 0's data ends.
    let end_of = |i: usize| (harness.find(&file, &bodies[i][..4]) + bodies[i].len()).next_multiple_of(8);
    let (from, to) = (end_of(0), end_of(1));
    harness.disk.corrupt(&file, from, &vec![0; to - from]).unwrap();
    let report = harness.start();
    assert_eq!(report.damaged_streams, 1, "{report:?}");
    assert_eq!(harness.damage("s").map(|d| d.at), Some(Harness::offset_of(&bodies, 1)));
    assert_eq!(
        harness.read_from("s", Harness::offset_of(&bodies, 2)),
        (bodies[2..].concat(), None),
        "the batches after the zeros are kept"
    );
}

#[test]
fn a_truncated_segment_keeps_the_records_before_the_cut() {
    let (mut harness, bodies) = ten_records();
    let segment = harness.segments()[0].clone();
    let cut = harness.find(&segment, "r05-") + 3;
    harness.disk.open(&segment).unwrap().set_len(cut as u64).unwrap();

    let report = harness.start();
    assert_eq!(harness.read("s").unwrap(), bodies[..5].concat());
    assert!(!report.damage.is_empty(), "the cut is reported");
    harness.append(append_request("s", "after")).unwrap();
    harness.shutdown();
    let report = harness.start();
    assert_eq!(report.damage, []);
    assert_eq!(harness.read("s").unwrap(), bodies[..5].concat() + "after");
}

/// A batch whose first record was torn (a sector of it never reached the disk) but whose
/// second survived: once a new record of the same size is written where the torn one was,
/// the old second record sits exactly where the next record would, with the next sequence
/// number and a valid checksum. It must never be replayed.
#[test]
fn a_record_left_behind_a_torn_one_is_never_replayed() {
    let mut harness = Harness::new(SEGMENT_BYTES);
    harness.create("s", plain_config()).unwrap();
    let first = format!("first-{}", "a".repeat(1200));
    let second = format!("second-{}", "b".repeat(1200));
    harness.append_in_one_batch("s", &[&first, &second]);
    harness.stop_abruptly();
    let segment = harness.segments()[0].clone();
    let at = harness.find(&segment, "first-");
    let sector = at.div_ceil(512) * 512;
    harness.disk.corrupt(&segment, sector, &[0; 512]).unwrap();

    let report = harness.start();
    assert_eq!(harness.read("s").unwrap(), "");
    assert!(!report.damage.is_empty());
    assert_eq!(report.damaged_streams, 0, "a torn write is no damage: it was never acknowledged");
    let again = format!("FIRST-{}", "c".repeat(1200));
    harness.append(append_request("s", &again)).unwrap();
    harness.stop_abruptly();
    harness.start();
    assert_eq!(harness.read("s").unwrap(), again, "the stale second record stays dead");
}

/// Appends `count` bodies of 1500 bytes to `stream`; returns what they add.
fn fill(harness: &Harness, stream: &str, count: usize) -> String {
    let mut added = String::new();
    for i in 0..count {
        let body = format!("{stream}{i:03}{}", "z".repeat(1500));
        harness.append(append_request(stream, &body)).unwrap();
        added.push_str(&body);
    }
    added
}

/// A first segment that only a deleted stream used, then enough appends to fill several
/// more small segments (each rotation writes a checkpoint), and one more checkpoint after
/// the deletes.
fn many_segments() -> (Harness, String) {
    let mut harness = Harness::new(96 << 10);
    for gone in ["gone", "gone2"] {
        harness.create(gone, plain_config()).unwrap();
        fill(&harness, gone, 40);
    }
    harness.create("kept", plain_config()).unwrap();
    harness.create("more", plain_config()).unwrap();
    let mut kept = fill(&harness, "kept", 30);
    fill(&harness, "more", 40);
    harness.delete("gone").unwrap();
    harness.delete("gone2").unwrap();
    // A checkpoint that counts the deleted streams' segments dead: they go at the next one
    // (the clean stop's), when no checkpoint a restart may read counts them live.
    harness.engine().request_upkeep(Upkeep::Seal);
    harness.engine().run_pending();
    kept += &fill(&harness, "kept", 20);
    harness.shutdown();
    (harness, kept)
}

#[test]
fn dead_segments_are_removed_and_a_damaged_checkpoint_falls_back() {
    let (mut harness, kept) = many_segments();
    let segments = harness.segments();
    assert!(segments.len() >= 2, "the test spans several segments: {segments:?}");
    assert!(
        !segments.contains(&Path::new(support::SHARD_DIR).join("0000000000000001.wal")),
        "the first segment held only the deleted stream's records and is gone: {segments:?}"
    );
    let checkpoint = Path::new(support::SHARD_DIR).join("checkpoint");
    harness.disk.corrupt(&checkpoint, 30, b"\xff\xff").unwrap();

    let report = harness.start();
    assert!(report.checkpoint_lsn.is_some(), "the previous checkpoint is used");
    assert!(report.records_replayed > 0, "and the records after it are replayed");
    assert_eq!(harness.read("kept").unwrap(), kept);
    assert_eq!(harness.read("gone"), None);
}

/// Two segments whose names were swapped: neither is replayed out of order. Both are set
/// aside as damage (their headers disagree with their names), the streams with records in
/// them are marked and read up to their intact end, and the log stays writable.
#[test]
fn reordered_segments_are_damage_never_replayed_out_of_order() {
    let (mut harness, kept) = many_segments();
    let segments = harness.segments();
    assert!(segments.len() >= 2, "the test spans several segments: {segments:?}");
    let (first, second) = (segments[0].clone(), segments[1].clone());
    let aside = first.with_extension("swap");
    for (from, to) in [(&first, &aside), (&second, &first), (&aside, &second)] {
        harness.disk.rename(from, to).unwrap();
    }

    for restart in 0..2 {
        let report = harness.start();
        assert!(report.damaged_streams >= 1, "restart {restart}: {report:?}");
        // First the swapped files are named and set aside; from then on they are missing.
        let why = if restart == 0 { "its name says" } else { "is missing" };
        assert!(report.damage.iter().any(|d| d.reason.contains(why)), "{restart}: {:?}", report.damage);
        let (read, error) = harness.read_from("kept", ds_engine::Offset::ZERO);
        assert!(kept.starts_with(&read), "restart {restart}: only an intact prefix is served");
        assert_eq!(error, Some(ReadError::Damaged), "restart {restart}");
        assert!(matches!(harness.append(append_request("kept", "x")), Err(OpError::StreamDamaged { .. })));
        harness.create("new", plain_config()).unwrap();
        harness.append(append_request("new", "fine")).unwrap();
        assert_eq!(harness.read("new").unwrap(), "fine".repeat(restart + 1));
        harness.stop_abruptly();
    }
}

/// A flipped byte in a segment's header (not in any record): the records in it pass their
/// own checks, so nothing is lost. The segment is read as the ordinal its neighbours place
/// it at, the damage is reported, and the log stays writable and recoverable: the first
/// segment (its ordinal from the checkpoint's ledger) and the last (the one after the one
/// before it), the last also with no checkpoint at all.
#[test]
fn a_damaged_segment_header_loses_no_record() {
    for (which, drop_checkpoints) in [(0usize, false), (usize::MAX, true), (usize::MAX, false)] {
        let (mut harness, mut kept) = many_segments();
        let segments = harness.segments();
        assert!(segments.len() >= 2, "the test spans several segments: {segments:?}");
        if drop_checkpoints {
            for name in ["checkpoint", "checkpoint.previous"] {
                harness.disk.remove_file(&Path::new(support::SHARD_DIR).join(name)).unwrap();
            }
        }
        let damaged = segments[which.min(segments.len() - 1)].clone();
        harness.disk.corrupt(&damaged, 13, b"\x5a").unwrap();
        for restart in 0..2 {
            let report = harness.start();
            let case =
                format!("segment {damaged:?}, checkpoints dropped {drop_checkpoints}, restart {restart}");
            if restart == 0 {
                assert!(
                    report.damage.iter().any(|d| d.reason.contains("segment header damaged")),
                    "{case}: {report:?}"
                );
            }
            assert_eq!(report.damaged_streams, 0, "{case}: {report:?}");
            assert!(harness.read("kept").as_deref() == Some(kept.as_str()), "{case}: every record read");
            harness.append(append_request("kept", "!")).unwrap();
            kept.push('!');
            harness.stop_abruptly();
            harness.start();
            assert!(harness.read("kept").as_deref() == Some(kept.as_str()), "{case}: written after");
            harness.shutdown();
        }
    }
}

#[test]
fn without_any_checkpoint_the_whole_log_is_replayed() {
    let (mut harness, kept) = many_segments();
    for name in ["checkpoint", "checkpoint.previous"] {
        harness.disk.remove_file(&Path::new(support::SHARD_DIR).join(name)).unwrap();
    }
    let report = harness.start();
    assert_eq!(report.checkpoint_lsn, None);
    assert_eq!(harness.read("kept").unwrap(), kept);
    assert_eq!(harness.read("gone"), None, "records of a deleted stream in a removed segment are skipped");
}

/// Zeros over a whole record in a segment before the last (sealed and synced before the
/// next began): replay steps over them to the records that follow in the segment. Before,
/// zeros there ended the segment's replay: a stream whose last records followed them came
/// back without them.
#[test]
fn zeros_in_an_earlier_segment_are_stepped_over() {
    let mut harness = Harness::new(64 << 10);
    harness.create("early", plain_config()).unwrap();
    harness.create("later", plain_config()).unwrap();
    let early: Vec<String> = (0..10).map(|i| format!("early{i:03}{}", "e".repeat(1500))).collect();
    for body in &early {
        harness.append(append_request("early", body)).unwrap();
    }
    let later = fill(&harness, "later", 80);
    harness.shutdown();
    for name in ["checkpoint", "checkpoint.previous"] {
        let _ = harness.disk.remove_file(&Path::new(support::SHARD_DIR).join(name));
    }
    let segments = harness.segments();
    assert!(segments.len() >= 2, "{segments:?}");
    let segment = segments[0].clone();
    let end_of = |i: usize| (harness.find(&segment, &early[i][..8]) + early[i].len()).next_multiple_of(8);
    let (from, to) = (end_of(4), end_of(5));
    harness.disk.corrupt(&segment, from, &vec![0; to - from]).unwrap();

    let report = harness.start();
    assert!(!report.damage.is_empty(), "the zeros are reported");
    assert_eq!(harness.read("later").unwrap(), later, "other streams are whole");
    assert_eq!(harness.damage("early").map(|d| d.at), Some(Harness::offset_of(&early, 5)));
    assert_eq!(
        harness.read_from("early", Harness::offset_of(&early, 6)),
        (early[6..].concat(), None),
        "the records after the zeros are kept, the stream's last ones among them"
    );
    assert_eq!(
        harness.engine().open(&support::name("early")).unwrap().status().unwrap().tail,
        Harness::offset_of(&early, 10)
    );
}

/// Data a checkpoint already covers is not replayed, so recovery cannot see damage there;
/// reads check every record they serve and refuse one that fails (small records are copied
/// into the response, large ones shared from the map: both paths check).
#[test]
fn a_damaged_record_is_never_served() {
    for body in ["small-record", &"large-record".repeat(1000)] {
        let mut harness = Harness::new(SEGMENT_BYTES);
        harness.create("s", plain_config()).unwrap();
        harness.append(append_request("s", body)).unwrap();
        harness.shutdown();
        let segment = harness.segments()[0].clone();
        let at = harness.find(&segment, &body[..12]);
        harness.disk.corrupt(&segment, at + 3, b"#").unwrap();
        let report = harness.start();
        assert!(report.clean_shutdown && report.records_replayed == 0, "the checkpoint covers the record");
        let handle = harness.engine().open(&support::name("s")).unwrap();
        let read = handle.read(ds_engine::StartAt::Beginning, usize::MAX);
        assert_eq!(read.err(), Some(ds_engine::ReadError::Damaged), "{} bytes", body.len());
    }
}
