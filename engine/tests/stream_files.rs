//! Recovery of the file modes' stream files: a flipped byte, a cut, a lost create record;
//! and, after a clean stop, the saved file ends (`files/clean_ends.rs`) that tell a cut,
//! zeroed or lost file from a crash, and file-fast's clean stop that leaves nothing for a
//! power loss to take.

mod support;

use ds_engine::testing::Vfs;
use ds_engine::OpError;
use ds_engine::ReadError;
use ds_engine::StorageMode;
use support::{append_request, plain_config, ten_records_in, Harness};

const SEGMENT_BYTES: u64 = 4 << 20;

#[test]
fn a_flipped_byte_in_a_stream_file_is_damage_and_the_rest_of_the_file_stays() {
    for mode in [StorageMode::FileDurable, StorageMode::FileFast] {
        let (mut harness, bodies) = ten_records_in(mode, SEGMENT_BYTES);
        let file = harness.stream_file("s");
        let at = harness.find(&file, "r06-");
        harness.disk.corrupt(&file, at + 10, b"X").unwrap();

        for restart in 0..2 {
            let report = harness.start();
            let damage = report.damage.first().expect("the damage is reported");
            assert_eq!(damage.file, file);
            assert!(damage.reason.contains("checksum"), "{}", damage.reason);
            assert_eq!((report.stale_bytes, report.damaged_streams), (0, 1), "nothing is cut");
            let (before, error) = harness.read_from("s", ds_engine::Offset::ZERO);
            assert_eq!((before, error), (bodies[..6].concat(), Some(ReadError::Damaged)), "{mode}");
            let after = harness.read_from("s", Harness::offset_of(&bodies, 7));
            assert_eq!(after, (bodies[7..].concat(), None), "{mode} restart {restart}");
            assert!(matches!(harness.append(append_request("s", "x")), Err(OpError::StreamDamaged { .. })));
            harness.stop_abruptly();
        }
    }
}

#[test]
fn a_truncated_stream_file_keeps_the_records_before_the_cut() {
    let (mut harness, bodies) = ten_records_in(StorageMode::FileDurable, SEGMENT_BYTES);
    let file = harness.stream_file("s");
    let cut = harness.find(&file, "r05-") + 3;
    harness.disk.open(&file).unwrap().set_len(cut as u64).unwrap();
    let report = harness.start();
    assert_eq!(harness.read("s").unwrap(), bodies[..5].concat());
    assert_eq!(report.damage.len(), 1);
    assert!(report.stale_bytes > 0);
}

#[test]
fn a_stream_file_without_its_create_record_is_moved_aside() {
    let (mut harness, _) = ten_records_in(StorageMode::FileDurable, SEGMENT_BYTES);
    let file = harness.stream_file("s");
    harness.disk.corrupt(&file, 0, b"JUNK").unwrap();
    let report = harness.start();
    assert_eq!(harness.read("s"), None);
    assert!(!harness.disk.exists(&file));
    assert!(harness.disk.exists(&report.damage[0].file), "kept in dropped/ for inspection");
}

/// The file modes after a clean stop: a file cut (between records or inside one) or zeroed
/// to its end lost acknowledged records to damage, not to a crash. Its stream is marked
/// damaged where its intact data ends (read up to there, never up to date), at this start
/// and at every later one, clean or not.
#[test]
fn after_a_clean_stop_a_cut_or_zeroed_file_is_damage_not_a_shorter_stream() {
    let modes = [StorageMode::FileDurable, StorageMode::FileFast];
    let cases = ["cut between records", "cut inside a record", "zeros to the end"];
    for (mode, damage) in modes.into_iter().flat_map(|mode| cases.map(|damage| (mode, damage))) {
        let (mut harness, bodies) = ten_records_in(mode, SEGMENT_BYTES);
        harness.start();
        harness.shutdown();
        let file = harness.stream_file("s");
        let r05 = harness.find(&file, "r05-");
        // A record ends with its data and padding to 8 bytes.
        let r04_end = (harness.find(&file, "r04-") + bodies[4].len()).next_multiple_of(8);
        match damage {
            "cut between records" => harness.disk.open(&file).unwrap().set_len(r04_end as u64).unwrap(),
            "cut inside a record" => harness.disk.open(&file).unwrap().set_len(r05 as u64 + 3).unwrap(),
            _ => {
                let len = harness.disk.open(&file).unwrap().size().unwrap() as usize;
                harness.disk.corrupt(&file, r04_end, &vec![0; len - r04_end]).unwrap();
            }
        }
        for (start, clean) in [("first", true), ("after a clean stop", false), ("after a crash", false)] {
            let report = harness.start();
            assert_eq!(report.damaged_streams, 1, "{mode} {damage}, {start} start: {:?}", report.damage);
            assert!(!report.damage.is_empty() && report.damage.iter().all(|found| found.file == file));
            let handle = harness.engine().open(&support::name("s")).unwrap();
            let tail = handle.status().unwrap().tail;
            assert_eq!(tail, Harness::offset_of(&bodies, 5), "{damage}");
            assert_eq!(harness.read_from("s", ds_engine::Offset::ZERO), (bodies[..5].concat(), None));
            let at_tail = handle.read(ds_engine::StartAt::At(tail), usize::MAX);
            assert_eq!(at_tail.err(), Some(ReadError::Damaged), "{damage}: never up to date");
            assert!(matches!(harness.append(append_request("s", "x")), Err(OpError::StreamDamaged { .. })));
            match clean {
                true => harness.shutdown(),
                false => harness.stop_abruptly(),
            }
        }
    }
}

/// The start right after a clean stop names a stream whose file is gone; later starts do
/// not (a file may be gone because its stream was deleted since).
/// file-fast syncs nothing as it goes, but its clean stop makes everything durable: a power
/// loss right after it loses nothing.
#[test]
fn file_fast_loses_nothing_to_a_power_loss_after_a_clean_stop() {
    for seed in 0..8 {
        let (mut harness, bodies) = ten_records_in(StorageMode::FileFast, SEGMENT_BYTES);
        harness.start();
        harness.append(append_request("s", "r10-last|")).unwrap();
        harness.shutdown();
        harness.disk = harness.disk.crash(&mut ds_engine::testing::SimRng::new(seed));
        let report = harness.start();
        assert_eq!(report.damaged_streams, 0, "seed {seed}: {:?}", report.damage);
        assert_eq!(harness.read("s").unwrap(), bodies.concat() + "r10-last|", "seed {seed}");
    }
}

/// After a clean stop, a stream whose file is gone (deleted, or moved aside by recovery
/// because its create record no longer reads) is reported by name and keeps its name as a
/// damaged stream — reads and writes refused — at that start and every later one, clean or
/// not, until it is deleted; then the name is free. A stream that held nothing but its
/// create record lost nothing and comes back whole.
#[test]
fn after_a_clean_stop_a_lost_stream_file_keeps_its_name_as_a_damaged_stream() {
    let modes = [StorageMode::FileDurable, StorageMode::FileFast];
    for (mode, loss) in
        modes.into_iter().flat_map(|mode| ["deleted", "create record damaged"].map(|l| (mode, l)))
    {
        let (mut harness, _) = ten_records_in(mode, SEGMENT_BYTES);
        harness.start();
        harness.create("empty", plain_config()).unwrap();
        harness.shutdown();
        let (file, empty) = (harness.stream_file("s"), harness.stream_file("empty"));
        match loss {
            "deleted" => harness.disk.remove_file(&file).unwrap(),
            _ => harness.disk.corrupt(&file, 0, b"JUNK").unwrap(),
        }
        harness.disk.remove_file(&empty).unwrap();
        let report = harness.start();
        let named: Vec<_> =
            report.damage.iter().filter(|damage| damage.reason.contains("stream \"s\"")).collect();
        assert_eq!(named.len(), 1, "{mode} {loss}: {:?}", report.damage);
        assert_eq!((named[0].file.clone(), report.damaged_streams), (file.clone(), 1), "{mode} {loss}");
        assert_eq!(harness.read("empty").as_deref(), Some(""), "{mode} {loss}: nothing was lost");
        for (start, clean) in [("first", true), ("after a clean stop", false), ("after a crash", true)] {
            if start != "first" {
                let report = harness.start();
                assert_eq!(report.damaged_streams, 1, "{mode} {loss}, {start} start: {:?}", report.damage);
            }
            assert_eq!(
                read_from_start(&harness, "s"),
                Err(ReadError::Damaged),
                "{mode} {loss}, {start} start"
            );
            assert!(matches!(harness.append(append_request("s", "x")), Err(OpError::StreamDamaged { .. })));
            match clean {
                true => harness.shutdown(),
                false => harness.stop_abruptly(),
            }
        }
        harness.start();
        harness.delete("s").unwrap();
        harness.create("s", plain_config()).unwrap();
        harness.append(append_request("s", "afresh|")).unwrap();
        harness.stop_abruptly();
        assert!(harness.start().damage.is_empty());
        assert_eq!(harness.read("s").as_deref(), Some("afresh|"), "{mode} {loss}");
        harness.stop_abruptly();
    }
}

/// What a read of `stream` from its start finds: how many bytes, or the error.
fn read_from_start(harness: &Harness, stream: &str) -> Result<usize, ReadError> {
    let handle = harness.engine().open(&support::name(stream)).expect("the stream exists");
    let read = handle.read(ds_engine::StartAt::At(ds_engine::Offset::ZERO), usize::MAX)?;
    Ok(read.expect("it exists").chunk.len())
}

/// The lost file put back whole (from a copy) before a later start is read as before.
#[test]
fn a_lost_stream_file_put_back_whole_is_read_as_before() {
    let (mut harness, bodies) = ten_records_in(StorageMode::FileDurable, SEGMENT_BYTES);
    harness.start();
    harness.shutdown();
    let file = harness.stream_file("s");
    let copy = ds_engine::testing::read_file(&harness.disk, &file).unwrap();
    harness.disk.remove_file(&file).unwrap();
    harness.start();
    assert_eq!(read_from_start(&harness, "s"), Err(ReadError::Damaged));
    harness.stop_abruptly();
    harness.disk.remove_file(&file).unwrap();
    harness.disk.create_new(&file).unwrap().write_all_at(0, &[&copy]).unwrap();
    let report = harness.start();
    assert_eq!(report.damaged_streams, 0, "{:?}", report.damage);
    assert_eq!(harness.read("s").unwrap(), bodies.concat());
}

/// A saved end holds only what was written before it, and only the incarnation it was
/// saved for: a torn end written later is cut as ever, and a stream deleted and created
/// again is not held to its predecessor's length.
#[test]
fn saved_ends_hold_only_what_was_written_before_them() {
    let (mut harness, bodies) = ten_records_in(StorageMode::FileDurable, SEGMENT_BYTES);
    harness.start();
    harness.shutdown();
    harness.start();
    harness.append(append_request("s", "r10-after-the-restart|")).unwrap();
    harness.stop_abruptly();
    let file = harness.stream_file("s");
    let cut = harness.find(&file, "r10-") + 3;
    harness.disk.open(&file).unwrap().set_len(cut as u64).unwrap();
    let report = harness.start();
    assert_eq!((report.damaged_streams, report.damage.len()), (0, 1), "a torn end, cut");
    assert_eq!(harness.read("s").unwrap(), bodies.concat());
    harness.delete("s").unwrap();
    harness.create("s", plain_config()).unwrap();
    harness.append(append_request("s", "again|")).unwrap();
    harness.stop_abruptly();
    let report = harness.start();
    assert!(report.damage.is_empty(), "{:?}", report.damage);
    assert_eq!(harness.read("s").unwrap(), "again|");
}

/// A stream kept under its name after its file was lost keeps its TTL window: the reads
/// that renewed it before the stop count, not only its create record's time.
#[test]
fn a_lost_stream_file_kept_under_its_name_keeps_its_ttl_window() {
    let mut harness = Harness::with_mode(StorageMode::FileDurable, SEGMENT_BYTES);
    harness.start();
    let config = ds_engine::StreamConfig { ttl_secs: Some(30), ..plain_config() };
    harness.create("ttl", config).unwrap();
    harness.append(append_request("ttl", "x")).unwrap();
    harness.clock.advance_ms(20_000);
    assert_eq!(harness.read("ttl").as_deref(), Some("x"), "a read renews the window");
    harness.shutdown();
    harness.disk.remove_file(&harness.stream_file("ttl")).unwrap();
    harness.clock.advance_ms(20_000);
    harness.start();
    harness.engine().run_pending();
    assert_eq!(
        read_from_start(&harness, "ttl"),
        Err(ReadError::Damaged),
        "alive, damaged, within its window"
    );
    harness.clock.advance_ms(30_001);
    harness.engine().run_pending();
    assert!(harness.engine().open(&support::name("ttl")).is_none(), "and it runs out");
}
