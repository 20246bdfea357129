//! Tests of the flush file's pool: placement in a modelled inode table (holes, other
//! processes taking inodes, retries) and on the real disk.

use super::*;
use proptest::prelude::*;

/// An inode table as ext4 hands it out: the lowest free inode first (nothing is freed
/// while a pool is placed, so the lowest free one only moves up).
struct Table {
    used: BTreeSet<u64>,
    lowest_free: u64,
}

impl Table {
    fn new(used: BTreeSet<u64>) -> Table {
        Table { used, lowest_free: 1 }
    }

    fn take(&mut self) -> u64 {
        while self.used.contains(&self.lowest_free) {
            self.lowest_free += 1;
        }
        self.used.insert(self.lowest_free);
        self.lowest_free
    }
}

/// Makes the pool's files in `table`, counting them in `created`; after file `number`,
/// `foreign(number)` other files take an inode.
fn maker<'a>(
    table: &'a mut Table,
    created: &'a mut u32,
    foreign: impl Fn(u32) -> u32 + 'a,
) -> impl FnMut(u32) -> io::Result<Member> + 'a {
    move |number| {
        *created += 1;
        let member = Member { number, inode: table.take() };
        for _ in 0..foreign(number) {
            table.take();
        }
        Ok(member)
    }
}

/// Places a pool in `table`; after each of the pool's files, `foreign(i)` other files
/// take an inode. The run, and how many files were made.
fn place_in(
    table: &mut Table,
    pool: &mut Vec<Member>,
    span: u64,
    foreign: impl Fn(u32) -> u32,
) -> (Option<u64>, u32) {
    let mut created = 0;
    let run = place(pool, span, POOL_SPANS_MAX, maker(table, &mut created, foreign));
    (run.unwrap(), created)
}

fn owned_run(pool: &[Member], span: u64) -> Option<u64> {
    runs_of(pool, span).into_iter().find(|(_, inodes)| inodes.len() as u64 == span).map(|(run, _)| run)
}

fn assert_owned(pool: &[Member], span: u64, run: u64) {
    let inodes: BTreeSet<u64> = pool.iter().map(|member| member.inode).collect();
    for inode in run * span + 1..=(run + 1) * span {
        assert!(inodes.contains(&inode), "inode {inode} of run {run} is not the pool's");
    }
}

#[test]
fn a_pool_fills_the_holes_then_owns_the_next_whole_run() {
    let mut used: BTreeSet<u64> = (1..=100).collect();
    for hole in [7, 20, 21, 90] {
        used.remove(&hole);
    }
    let mut table = Table::new(used);
    let mut pool = Vec::new();
    let (run, created) = place_in(&mut table, &mut pool, 16, |_| 0);
    // Inodes 7, 20, 21, 90 and 101..=112 are taken before the run 113..=128 is whole.
    assert_eq!(run, Some(7));
    assert_owned(&pool, 16, 7);
    assert_eq!(created, 4 + 12 + 16);
}

#[test]
fn a_pool_that_owns_a_run_makes_nothing_more() {
    let mut pool: Vec<Member> = (0..8).map(|i| Member { number: i, inode: 33 + u64::from(i) }).collect();
    pool.push(Member { number: 8, inode: 3 });
    let run = place(&mut pool, 8, POOL_SPANS_MAX, |_| panic!("nothing to make")).unwrap();
    assert_eq!(run, Some(4));
}

#[test]
fn a_pool_that_lost_a_file_grows_again() {
    let mut table = Table::new((1..=40).filter(|inode| *inode != 35).collect());
    // The pool once owned 33..=40; 35 was removed (by hand) and is free again.
    let mut pool: Vec<Member> = [33, 34, 36, 37, 38, 39, 40]
        .iter()
        .enumerate()
        .map(|(i, &inode)| Member { number: i as u32, inode })
        .collect();
    let (run, created) = place_in(&mut table, &mut pool, 8, |_| 0);
    assert_eq!((run, created), (Some(4), 1));
    assert_owned(&pool, 8, 4);
    assert!(pool.iter().any(|member| member.number == 7 && member.inode == 35));
}

#[test]
fn another_process_taking_inodes_between_ours_leaves_no_run_and_a_bounded_pool() {
    let mut table = Table::new(BTreeSet::new());
    let mut pool = Vec::new();
    let (run, created) = place_in(&mut table, &mut pool, 8, |_| 1);
    assert_eq!(run, None);
    assert_eq!(u64::from(created), 8 * POOL_SPANS_MAX);
}

/// Places a pool, with retries, in `table`; while `busy(number)`, another process takes
/// an inode after each of the pool's files. The run, files made, and the pauses.
fn place_retrying_in(
    table: &mut Table,
    pool: &mut Vec<Member>,
    span: u64,
    busy: impl Fn(u32) -> bool,
) -> (Option<u64>, u32, Vec<Duration>) {
    let (mut created, mut pauses) = (0, Vec::new());
    let create = maker(table, &mut created, |number| u32::from(busy(number)));
    let run = place_retrying(pool, span, create, |pause| pauses.push(pause)).unwrap();
    (run, created, pauses)
}

#[test]
fn a_start_whose_runs_another_start_spoiled_tries_again_after_a_pause() {
    // Another server starting at the same moment takes an inode after each of ours for
    // as long as our first try lasts, then stops (it gave up, or it has its run).
    let (span, mut table, mut pool) = (8, Table::new(BTreeSet::new()), Vec::new());
    let first_try = (span * POOL_SPANS_MAX) as u32;
    let (run, created, pauses) = place_retrying_in(&mut table, &mut pool, span, |n| n < first_try);
    let run = run.expect("the retry, alone, owns a run");
    assert_owned(&pool, span, run);
    assert_eq!(pauses.len(), 1);
    assert!(pauses[0] >= Duration::from_millis(1) && pauses[0] <= RETRY_PAUSES_MAX, "{pauses:?}");
    assert!(u64::from(created) <= span * (POOL_SPANS_MAX + RETRY_SPANS_MAX), "{created} files");
}

#[test]
fn a_start_spoiled_in_every_try_gives_up_after_its_retries_with_a_bounded_pool() {
    let (span, mut table, mut pool) = (8, Table::new(BTreeSet::new()), Vec::new());
    let (run, created, pauses) = place_retrying_in(&mut table, &mut pool, span, |_| true);
    assert_eq!(run, None);
    assert_eq!(pauses.len() as u32, RETRIES_MAX);
    assert_eq!(u64::from(created), span * (POOL_SPANS_MAX + u64::from(RETRIES_MAX) * RETRY_SPANS_MAX));
}

#[test]
fn retry_pauses_scale_with_a_retry_and_differ() {
    let short: BTreeSet<Duration> = (0..64).map(|_| retry_pause(Duration::ZERO)).collect();
    assert!(
        short.iter().all(|p| *p >= Duration::from_millis(1) && *p < Duration::from_millis(9)),
        "{short:?}"
    );
    assert!(short.len() > 1, "pauses are drawn, not fixed");
    let retry_length = Duration::from_millis(50);
    let long: Vec<Duration> = (0..64).map(|_| retry_pause(retry_length)).collect();
    let bound = Duration::from_millis(1) + retry_length * RETRY_PAUSE_RETRIES_MAX;
    assert!(long.iter().all(|p| *p < bound), "{long:?}");
    assert!(long.iter().any(|p| *p > Duration::from_millis(9)), "{long:?}");
}

proptest! {
    /// Whatever the table and whoever else takes inodes: a run given is wholly the
    /// pool's, no start makes more than its bound, and with nobody else taking inodes a
    /// run forms within two runs' worth of files once the holes are filled.
    #[test]
    fn a_placed_run_is_wholly_the_pools(
        used in proptest::collection::btree_set(1u64..300, 0..250),
        span_log2 in 1u32..6,
        foreign_every in proptest::option::of(1u32..6),
    ) {
        let span = 1u64 << span_log2;
        let holes = (1..=used.iter().max().copied().unwrap_or(0)).filter(|i| !used.contains(i)).count() as u64;
        let mut table = Table::new(used);
        let mut pool = Vec::new();
        let foreign = |number: u32| foreign_every.map_or(0, |every| u32::from(number.is_multiple_of(every)));
        let (run, created) = place_in(&mut table, &mut pool, span, foreign);
        prop_assert!(u64::from(created) <= span * POOL_SPANS_MAX);
        if let Some(run) = run {
            assert_owned(&pool, span, run);
        } else if foreign_every.is_none() {
            prop_assert!(holes + 2 * span > span * POOL_SPANS_MAX, "no run after filling {holes} holes");
        }
    }
}

#[test]
fn on_the_real_disk_the_flush_file_owns_its_inode_table_block() {
    use crate::storage::vfs::real::{scratch, RealVfs};
    let dir = scratch("flush-file");
    let vfs = RealVfs;
    std::fs::write(dir.join(PLAIN_NAME), b"").unwrap(); // left by an earlier version
    let Some(span) = vfs.inode_table_span(&dir) else {
        drop(open(&vfs, &dir).unwrap());
        assert!(dir.join(PLAIN_NAME).exists());
        return std::fs::remove_dir_all(&dir).unwrap();
    };
    // Other tests of this run create files at the same time and may take inodes between
    // the pool's; a start then falls back to the plain file (and keeps the pool's files), and
    // the next one tries again.
    let pool_dir = dir.join(POOL_DIR_NAME);
    let placed = (0..5).find_map(|_| {
        let file = open(&vfs, &dir).unwrap();
        let pool = read_pool(&vfs, &pool_dir).unwrap();
        match file.is_at(&dir.join(PLAIN_NAME)).unwrap() {
            // A start without a run keeps its files for the next one.
            true => None,
            false => Some(pool),
        }
    });
    let pool = placed.expect("the pool owns a run in one of five starts");
    assert_eq!(pool.len() as u64, span, "only the owned run's files stay");
    let run = owned_run(&pool, span).expect("the pool owns a run");
    assert_owned(&pool, span, run);
    assert!(!dir.join(PLAIN_NAME).exists());
    // The next start finds the same run and makes nothing.
    drop(open(&vfs, &dir).unwrap());
    assert_eq!(read_pool(&vfs, &pool_dir).unwrap(), pool);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_pool_without_a_run_stays_for_the_next_start_up_to_its_bound() {
    use crate::storage::vfs::real::{scratch, RealVfs};
    let dir = scratch("flush-file-kept");
    let pool: Vec<Member> = (0..3).map(|number| create_member(&RealVfs, &dir, number).unwrap()).collect();
    keep_unplaced(&RealVfs, &dir, &pool, 3).unwrap();
    assert_eq!(read_pool(&RealVfs, &dir).unwrap(), pool, "within the bound every file stays");
    keep_unplaced(&RealVfs, &dir, &pool, 2).unwrap();
    assert!(read_pool(&RealVfs, &dir).unwrap().is_empty(), "past the bound the pool starts afresh");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn only_the_names_the_pool_gives_are_the_pools() {
    use crate::storage::vfs::real::{scratch, RealVfs};
    let dir = scratch("flush-file-names");
    for name in ["0047", "47", "+047", "00047", "12345", "x1", "4294967295"] {
        std::fs::write(dir.join(name), b"").unwrap();
    }
    let numbers: Vec<u32> = read_pool(&RealVfs, &dir).unwrap().iter().map(|m| m.number).collect();
    assert_eq!(numbers, [47, 12345, 4294967295]);
    // The last possible number leaves no room to grow: an error, not an overflow.
    let mut pool = read_pool(&RealVfs, &dir).unwrap();
    assert!(place(&mut pool, 1 << 20, POOL_SPANS_MAX, |_| unreachable!()).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_pool_that_cannot_be_made_leaves_the_plain_flush_file() {
    use crate::storage::vfs::real::{scratch, RealVfs};
    let dir = scratch("flush-file-blocked");
    // Where the pool's directory should be, a file: creating the pool fails.
    std::fs::write(dir.join(POOL_DIR_NAME), b"not a directory").unwrap();
    let file = open(&RealVfs, &dir).unwrap();
    assert!(file.is_at(&dir.join(PLAIN_NAME)).unwrap());
    assert_eq!(std::fs::read(dir.join(POOL_DIR_NAME)).unwrap(), b"not a directory");
    std::fs::remove_dir_all(&dir).unwrap();
}
