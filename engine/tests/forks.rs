//! Forks survive restarts in every disk mode: a fork's reference to its source (inherited
//! bytes read back across the restart, through soft-deleted sources), soft deletes (the name
//! stays held, the bytes stay readable through the forks), the cascade when the last fork
//! goes, and a cascade a crash interrupted, which recovery finishes; a fork whose source is
//! lost is kept, damaged.

mod support;

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Waker};

use ds_engine::{Offset, OpError, ReadError, StartAt, StorageMode};
use support::{append_request, name, plain_config, Harness};

const SEGMENT_BYTES: u64 = 4 << 20;

#[derive(Clone, Copy, Debug)]
enum Restart {
    Clean,
    ProcessCrash,
    PowerLoss,
}

fn restart(harness: &mut Harness, how: Restart) {
    match how {
        Restart::Clean => harness.shutdown(),
        Restart::ProcessCrash => harness.stop_abruptly(),
        Restart::PowerLoss => harness.lose_power(7),
    }
    harness.start();
    // Cascades left over run in the first batches.
    for _ in 0..4 {
        harness.engine().run_pending();
    }
}

/// Every disk mode with the restarts it promises to survive.
fn cases() -> Vec<(StorageMode, Restart)> {
    let mut cases = Vec::new();
    for mode in [StorageMode::Acid, StorageMode::FileDurable, StorageMode::FileFast] {
        cases.extend([(mode, Restart::Clean), (mode, Restart::ProcessCrash)]);
        if mode != StorageMode::FileFast {
            cases.push((mode, Restart::PowerLoss));
        }
    }
    cases
}

#[test]
fn a_chain_of_forks_and_its_soft_deletes_survive_restarts_and_cascade_away() {
    for (mode, how) in cases() {
        let mut harness = Harness::with_mode(mode, SEGMENT_BYTES);
        harness.create("root", plain_config()).unwrap();
        harness.append(append_request("root", "abc")).unwrap();
        harness.append(append_request("root", "def")).unwrap();
        // A fork at an earlier offset, one at the tail, and a fork of a fork.
        harness.fork("early", "root", Some(Offset { messages: 1, bytes: 3 })).unwrap();
        harness.fork("middle", "root", None).unwrap();
        harness.append(append_request("middle", "ghi")).unwrap();
        harness.fork("leaf", "middle", None).unwrap();
        harness.append(append_request("leaf", "jk")).unwrap();
        harness.delete("root").unwrap();
        harness.delete("middle").unwrap();
        restart(&mut harness, how);

        let context = format!("{mode} after {how:?}");
        assert_eq!(harness.read("early").as_deref(), Some("abc"), "{context}");
        assert_eq!(harness.read("leaf").as_deref(), Some("abcdefghijk"), "{context}");
        assert_eq!(harness.soft_deleted("root"), Some(true), "{context}");
        assert_eq!(harness.soft_deleted("middle"), Some(true), "{context}");
        assert_eq!(harness.create("root", plain_config()).err(), Some(OpError::NameHeld), "{context}");
        assert_eq!(harness.fork("late", "middle", None).err(), Some(OpError::SourceDeleted), "{context}");
        assert!(harness.append(append_request("leaf", "l")).is_ok(), "{context}: the leaf takes appends");

        // The leaf goes: middle goes with it, root stays for `early`.
        harness.delete("leaf").unwrap();
        restart(&mut harness, how);
        assert_eq!(harness.soft_deleted("middle"), None, "{context}: the cascade reached middle");
        assert_eq!(harness.soft_deleted("root"), Some(true), "{context}: early still reads root");
        assert_eq!(harness.read("early").as_deref(), Some("abc"), "{context}");
        harness.delete("early").unwrap();
        restart(&mut harness, how);
        for name in ["root", "middle", "leaf", "early"] {
            assert_eq!(harness.soft_deleted(name), None, "{context}: {name} is gone");
        }
        harness.create("root", plain_config()).expect("the name is free again");
    }
}

/// Recovery builds every shard's streams in shard order, each fork after its source: here
/// sources sit in shards before and after their forks, chains reach across several shards,
/// and some sources are soft-deleted.
#[test]
fn chains_of_forks_across_shards_survive_restarts() {
    const ROOTS: usize = 6;
    const CHAIN: usize = 4;
    for (mode, how) in cases() {
        let mut harness = Harness::with_shards(mode, SEGMENT_BYTES, 8);
        let mut expected = Vec::new();
        for root in 0..ROOTS {
            let mut source = format!("root-{root}");
            harness.create(&source, plain_config()).unwrap();
            harness.append(append_request(&source, &format!("r{root};"))).unwrap();
            let mut text = format!("r{root};");
            for link in 0..CHAIN {
                let fork = format!("fork-{root}-{link}");
                harness.fork(&fork, &source, None).unwrap();
                harness.append(append_request(&fork, &format!("f{link};"))).unwrap();
                text.push_str(&format!("f{link};"));
                // Every other link's source goes, kept (soft-deleted) for the fork.
                let deleted = link % 2 == 0;
                expected.push((fork.clone(), text.clone(), deleted));
                if link % 2 == 1 {
                    harness.delete(&source).unwrap();
                }
                source = fork;
            }
        }
        restart(&mut harness, how);
        for (fork, text, deleted) in &expected {
            let context = format!("{mode} after {how:?}: {fork}");
            assert_eq!(harness.soft_deleted(fork), Some(*deleted), "{context}");
            if !deleted {
                assert_eq!(harness.read(fork).as_deref(), Some(text.as_str()), "{context}");
            }
        }
        let last = format!("fork-{}-{}", ROOTS - 1, CHAIN - 1);
        assert!(harness.append(append_request(&last, "more")).is_ok(), "{mode} after {how:?}: writable");
    }
}

/// A delete that starts a cascade is answered once the cascade has ended: every stream up
/// the chain that it removed is gone, its name free, for the requests that follow — with the
/// chain in one shard and spread over several.
#[test]
fn a_deletes_answer_waits_for_the_cascade_it_starts() {
    for (mode, shard_count) in [
        (StorageMode::Acid, 1),
        (StorageMode::FileFast, 1),
        (StorageMode::Acid, 8),
        (StorageMode::FileDurable, 8),
    ] {
        let harness = Harness::with_shards(mode, SEGMENT_BYTES, shard_count);
        let chain = ["root", "level-1", "level-2", "level-3", "leaf"];
        harness.create(chain[0], plain_config()).unwrap();
        harness.append(append_request(chain[0], "r")).unwrap();
        for pair in chain.windows(2) {
            harness.fork(pair[1], pair[0], None).unwrap();
        }
        for name in &chain[..4] {
            harness.delete(name).unwrap();
            assert_eq!(harness.soft_deleted(name), Some(true), "{mode}: {name} kept for its fork");
        }
        assert_eq!(harness.read("leaf").as_deref(), Some("r"));
        harness.delete("leaf").unwrap();
        let context = format!("{mode}, {shard_count} shards");
        for name in chain {
            assert_eq!(
                harness.soft_deleted(name),
                None,
                "{context}: {name} gone when the delete is answered"
            );
        }
        for name in chain {
            harness.create(name, plain_config()).unwrap_or_else(|e| panic!("{context}: {name} free: {e:?}"));
        }
    }
}

#[test]
fn a_cascade_a_crash_interrupts_finishes_at_restart() {
    for mode in [StorageMode::Acid, StorageMode::FileDurable, StorageMode::FileFast] {
        let mut harness = Harness::with_mode(mode, SEGMENT_BYTES);
        harness.create("source", plain_config()).unwrap();
        harness.append(append_request("source", "kept for the fork")).unwrap();
        harness.fork("fork", "source", None).unwrap();
        harness.delete("source").unwrap();
        // The fork's delete is committed; its source's removal waits for the next batch
        // (and the delete's answer with it), which the crash prevents.
        {
            let mut delete = pin!(harness.engine().delete(name("fork")));
            let mut context = Context::from_waker(Waker::noop());
            assert!(delete.as_mut().poll(&mut context).is_pending(), "submitted");
            harness.engine().run_pending();
            assert!(delete.as_mut().poll(&mut context).is_pending(), "{mode}: answered after the cascade");
        }
        assert_eq!(harness.soft_deleted("fork"), None, "{mode}: the fork is gone");
        assert_eq!(harness.soft_deleted("source"), Some(true), "{mode}: not removed yet");
        harness.stop_abruptly();
        harness.start();
        assert_eq!(harness.soft_deleted("source"), Some(true), "{mode}: recovered soft-deleted");
        harness.engine().run_pending();
        assert_eq!(harness.soft_deleted("source"), None, "{mode}: the first batch finished the cascade");
        harness.create("source", plain_config()).expect("the name is free again");
    }
}

#[test]
fn a_fork_whose_source_is_lost_keeps_its_own_messages_and_fails_the_inherited_ones() {
    use ds_engine::testing::Vfs;
    let mut harness = Harness::with_mode(StorageMode::FileDurable, SEGMENT_BYTES);
    harness.create("source", plain_config()).unwrap();
    harness.append(append_request("source", "inherited")).unwrap();
    harness.fork("fork", "source", None).unwrap();
    harness.append(append_request("fork", "own")).unwrap();
    harness.shutdown();
    // The source's file is lost (an operator's mistake, a disk that lost it).
    let source_file = harness.stream_file("source");
    harness.disk.remove_file(&source_file).unwrap();
    harness.start();
    let damage = harness.damage("fork").expect("the fork is marked damaged");
    assert!(damage.reason.contains("source"), "{damage:?}");
    let (own, error) = harness.read_from("fork", Offset { messages: 1, bytes: 9 });
    assert_eq!((own.as_str(), error), ("own", None), "its own messages are served");
    let (inherited, error) = harness.read_from("fork", Offset::ZERO);
    assert_eq!(
        (inherited.as_str(), error),
        ("", Some(ds_engine::ReadError::Damaged)),
        "nothing damaged is served"
    );
    let refused = harness.append(append_request("fork", "more"));
    assert!(
        matches!(refused, Err(OpError::StreamDamaged { .. })),
        "a damaged stream refuses writes: {refused:?}"
    );
}

/// The source's last record lost (its file cut, as a torn end is), the fork's create record
/// kept: the source comes back shorter than what the fork inherits. Both are marked damaged
/// where the source ends; before, the source took new appends at the offsets the fork
/// inherits, and the fork served them as its own history.
#[test]
fn a_fork_whose_source_came_back_shorter_never_reads_the_sources_new_appends() {
    use ds_engine::testing::Vfs;
    for mode in [StorageMode::FileDurable, StorageMode::FileFast] {
        let mut harness = Harness::with_mode(mode, SEGMENT_BYTES);
        harness.create("source", plain_config()).unwrap();
        for body in ["one;", "two;", "three;"] {
            harness.append(append_request("source", body)).unwrap();
        }
        harness.fork("fork", "source", None).unwrap();
        harness.append(append_request("fork", "own")).unwrap();
        harness.shutdown();
        let source_file = harness.stream_file("source");
        let cut = harness.find(&source_file, "three;") + 2;
        harness.disk.open(&source_file).unwrap().set_len(cut as u64).unwrap();
        harness.start();

        let two = Offset { messages: 2, bytes: 8 };
        for stream in ["source", "fork"] {
            let damage =
                harness.damage(stream).unwrap_or_else(|| panic!("{mode:?}: {stream} is marked damaged"));
            assert_eq!(damage.at, two, "{mode:?}: {stream} is damaged where the source now ends");
            let handle = harness.engine().open(&support::name(stream)).unwrap();
            let read = handle.read(StartAt::Beginning, usize::MAX).unwrap().unwrap();
            assert_eq!((read.chunk.next, read.up_to_date()), (two, false), "{mode:?}: {stream} is not whole");
            let at_damage = handle.read(StartAt::At(two), usize::MAX);
            assert_eq!(
                at_damage.err(),
                Some(ReadError::Damaged),
                "{mode:?}: {stream} read where it was lost"
            );
            let at_damage = handle.read_messages(two, usize::MAX);
            assert_eq!(at_damage.err(), Some(ReadError::Damaged), "{mode:?}: {stream}, single messages");
        }
        let (read, error) = harness.read_from("fork", Offset::ZERO);
        assert_eq!((read.as_str(), error), ("one;two;", Some(ReadError::Damaged)), "{mode:?}");
        let refused = harness.append(append_request("source", "new;"));
        assert!(matches!(refused, Err(OpError::StreamDamaged { .. })), "{mode:?}: {refused:?}");
        let (own, error) = harness.read_from("fork", Offset { messages: 3, bytes: 14 });
        assert_eq!((own.as_str(), error), ("own", None), "{mode:?}: the fork's own messages are served");
    }
}

/// A stopped engine lets go of its storage, cleanly stopped or not: a fork's stream holds
/// its source's shard and each shard holds its streams, so the stop must cut those links
/// (else every stopped engine's logs, maps and streams stayed in memory for good).
#[test]
fn a_stopped_engine_lets_go_of_its_storage_forks_and_all() {
    for mode in [StorageMode::Acid, StorageMode::FileDurable, StorageMode::FileFast] {
        for abruptly in [false, true] {
            let mut harness = Harness::with_mode(mode, SEGMENT_BYTES);
            harness.create("source", plain_config()).unwrap();
            harness.append(append_request("source", "inherited")).unwrap();
            harness.fork("fork", "source", None).unwrap();
            harness.fork("grandchild", "fork", None).unwrap();
            assert!(harness.storage_held(), "{mode:?}: the running engine holds its storage");
            match abruptly {
                true => harness.stop_abruptly(),
                false => harness.shutdown(),
            }
            assert!(!harness.storage_held(), "{mode:?}, abruptly {abruptly}: still held after the stop");
        }
    }
}
