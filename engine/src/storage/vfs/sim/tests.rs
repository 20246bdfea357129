//! The simulated disk's crash model, pinned down.

use super::*;

fn file_bytes(vfs: &SimVfs, path: &str) -> Option<Vec<u8>> {
    vfs.open(Path::new(path)).ok().map(|f| {
        let mut buffer = vec![0; f.size().unwrap() as usize];
        f.read_at(0, &mut buffer).unwrap();
        buffer
    })
}

#[test]
fn synced_data_and_entries_survive_every_crash() {
    let vfs = SimVfs::new();
    vfs.create_dir_all(Path::new("/d")).unwrap();
    vfs.sync_dir(Path::new("/")).unwrap();
    let file = vfs.create_new(Path::new("/d/f")).unwrap();
    file.write_all_at(0, &[b"durable"]).unwrap();
    file.sync_data().unwrap();
    vfs.sync_dir(Path::new("/d")).unwrap();
    file.write_all_at(7, &[&[b'x'; 2000]]).unwrap();
    for seed in 0..50 {
        let after = vfs.crash(&mut SimRng::new(seed));
        let bytes = file_bytes(&after, "/d/f").expect("a synced entry survives");
        assert_eq!(&bytes[..7], b"durable");
        assert!(bytes[7..].iter().all(|b| *b == b'x' || *b == 0), "unsynced bytes are written or absent");
    }
}

#[test]
fn unsynced_writes_and_entries_may_vanish_or_tear_deterministically() {
    let vfs = SimVfs::new();
    vfs.create_dir_all(Path::new("/d")).unwrap();
    let file = vfs.create_new(Path::new("/d/f")).unwrap();
    file.write_all_at(0, &[&[7u8; 4096]]).unwrap();
    let outcomes: std::collections::HashSet<Option<usize>> = (0..200)
        .map(|seed| {
            file_bytes(&vfs.crash(&mut SimRng::new(seed)), "/d/f")
                .map(|b| b.iter().filter(|x| **x == 7).count())
        })
        .collect();
    assert!(outcomes.contains(&None), "an unsynced create can vanish");
    assert!(outcomes.contains(&Some(0)) && outcomes.contains(&Some(4096)), "{outcomes:?}");
    assert!(outcomes.iter().any(|o| o.is_some_and(|n| n > 0 && n < 4096)), "writes can tear");
    let again = |seed| file_bytes(&vfs.crash(&mut SimRng::new(seed)), "/d/f");
    assert_eq!(again(17), again(17), "same seed, same disk");
}

#[test]
fn a_rename_into_a_missing_directory_fails_and_keeps_the_source() {
    let vfs = SimVfs::new();
    vfs.create_dir_all(Path::new("/d")).unwrap();
    vfs.create_new(Path::new("/d/f")).unwrap().write_all_at(0, &[b"kept"]).unwrap();
    let error = vfs.rename(Path::new("/d/f"), Path::new("/missing/f")).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::NotFound);
    assert_eq!(file_bytes(&vfs, "/d/f").as_deref(), Some(&b"kept"[..]));
}

#[test]
fn failing_after_a_budget_stops_every_operation() {
    let vfs = SimVfs::new();
    vfs.create_dir_all(Path::new("/d")).unwrap();
    vfs.fail_after(2);
    let file = vfs.create_new(Path::new("/d/f")).unwrap();
    file.write_all_at(0, &[b"a"]).unwrap();
    assert!(file.sync_data().is_err());
    assert!(vfs.has_failed());
    assert!(vfs.list(Path::new("/d")).is_err());
}

#[test]
fn a_directory_never_synced_into_its_parent_can_vanish_with_its_files() {
    let vfs = SimVfs::new();
    vfs.create_dir_all(Path::new("/data/shard")).unwrap();
    let file = vfs.create_new(Path::new("/data/shard/f")).unwrap();
    file.write_all_at(0, &[b"synced"]).unwrap();
    file.sync_data().unwrap();
    vfs.sync_dir(Path::new("/data/shard")).unwrap();
    let survived: std::collections::HashSet<bool> = (0..64)
        .map(|seed| file_bytes(&vfs.crash(&mut SimRng::new(seed)), "/data/shard/f").is_some())
        .collect();
    assert_eq!(survived.len(), 2, "the file survives only when the directories above it do");
    vfs.sync_dir(Path::new("/data")).unwrap();
    vfs.sync_dir(Path::new("/")).unwrap();
    for seed in 0..64 {
        assert!(file_bytes(&vfs.crash(&mut SimRng::new(seed)), "/data/shard/f").is_some(), "seed {seed}");
    }
}

#[test]
fn a_device_flush_covers_written_back_overwrites_of_written_blocks_only() {
    let vfs = SimVfs::new();
    vfs.create_dir_all(Path::new("/d")).unwrap();
    vfs.sync_dir(Path::new("/")).unwrap();
    let (a, b) = (vfs.create_new(Path::new("/d/a")).unwrap(), vfs.create_new(Path::new("/d/b")).unwrap());
    vfs.sync_dir(Path::new("/d")).unwrap();
    a.write_all_at(0, &[&[0u8; 4096]]).unwrap();
    a.sync_data().unwrap();
    a.set_len(8192).unwrap();
    a.sync_data().unwrap();
    // An overwrite of written blocks, and a write into space set_len added (a hole).
    a.write_all_at(0, &[&[1u8; 4096]]).unwrap();
    a.write_all_at(4096, &[&[2u8; 4096]]).unwrap();
    a.write_back(0, 8192).unwrap();
    b.sync_data().unwrap();
    let mut hole_kept = std::collections::HashSet::new();
    for seed in 0..64 {
        let bytes = file_bytes(&vfs.crash(&mut SimRng::new(seed)), "/d/a").unwrap();
        assert!(bytes[..4096].iter().all(|x| *x == 1), "the overwrite is durable (seed {seed})");
        hole_kept.insert(bytes[4096..].iter().all(|x| *x == 2));
    }
    assert_eq!(hole_kept.len(), 2, "the write into the hole needs the file's own sync");
}
