//! Stream files: a flipped byte is always noticed, garbage never panics the analysis,
//! zeros inside a file-durable file are the torn end a crash leaves only where what follows
//! is one batch, and after a clean stop no cut or zeroed end passes for a torn one.

use bytes::Bytes;
use proptest::prelude::*;
use proptest::sample::Index;

use super::strategies::{encode_record, flip, RecordParts};
use crate::content_type::ContentType;
use crate::ids::{ChainIndex, Lsn, StreamId};
use crate::meta::StreamConfig;
use crate::offset::Offset;
use crate::storage::chain::jump_count;
use crate::storage::chain::Chain;
use crate::storage::files::analysis::analyze_file;
use crate::storage::files::clean_ends::CleanEnd;
use crate::storage::files::location;
use crate::storage::record::codec::{CreateMeta, Header, Kind, Meta};

/// A stream file: its create record and one append per `appends` entry, chained as the
/// file writer chains them; with the ranges of bytes their checks cover.
fn stream_file(appends: &[Vec<u8>], suffix: u8) -> (Vec<u8>, Vec<std::ops::Range<usize>>) {
    stream_file_timed(appends, suffix, |n| 1_000 + n)
}

/// [`stream_file`] with record `n` written at `time_of(n)` (one time: one batch).
fn stream_file_timed(
    appends: &[Vec<u8>],
    suffix: u8,
    time_of: impl Fn(u64) -> u64,
) -> (Vec<u8>, Vec<std::ops::Range<usize>>) {
    let (mut bytes, mut covered, mut locations) = (Vec::new(), Vec::new(), Vec::new());
    let mut tail = Offset::ZERO;
    for n in 0..=appends.len() as u64 {
        let data = if n == 0 { Vec::new() } else { appends[n as usize - 1].clone() };
        let index = ChainIndex::from_raw(n);
        let jumps = (0..jump_count(index)).map(|j| locations[(n - (1 << j)) as usize]);
        let chain = Chain { n: index, jumps: jumps.collect() };
        let mut meta = Meta { chain: Some(chain), ..Meta::default() };
        if n == 0 {
            let config = StreamConfig {
                content_type: ContentType::parse("text/plain").unwrap(),
                ttl_secs: None,
                expires_at_ms: None,
            };
            meta.create = Some(CreateMeta { name: "s".into(), config, fork: None });
        }
        let header = Header {
            kind: if n == 0 { Kind::Create } else { Kind::Append },
            flags: 0,
            meta_len: 0,
            payload_len: 0,
            payload_crc: 0,
            lsn: Lsn::from_raw(n),
            stream: StreamId::from_raw(7),
            offset: tail,
            time_ms: time_of(n),
            messages: u32::from(!data.is_empty()),
        };
        let (record, record_covered) = encode_record(&RecordParts { header, meta, data: data.clone() });
        locations.push(location(suffix, bytes.len() as u64));
        covered.push(bytes.len()..bytes.len() + record_covered);
        bytes.extend_from_slice(&record);
        tail = tail.advance(u64::from(!data.is_empty()), data.len() as u64);
    }
    (bytes, covered)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn a_stream_file_with_a_flipped_byte_is_never_read_as_whole(
        appends in prop::collection::vec(prop::collection::vec(1u8..=255, 1..80), 0..10),
        suffix in any::<u8>(),
        record in any::<Index>(),
        (at, mask) in flip(),
        durable in any::<bool>(),
    ) {
        let (bytes, covered) = stream_file(&appends, suffix);
        let whole = analyze_file(&Bytes::from(bytes.clone()), suffix, durable, None);
        prop_assert!(whole.failure.is_none() && whole.damage.is_empty());
        let snapshot = whole.snapshot.expect("the stream");
        prop_assert!(snapshot.damage.is_none());
        prop_assert_eq!(snapshot.chain_n, ChainIndex::from_raw(appends.len() as u64));
        let stored: usize = appends.iter().map(Vec::len).sum();
        prop_assert_eq!(snapshot.tail, Offset { messages: appends.len() as u64, bytes: stored as u64 });

        let range = covered[record.index(covered.len())].clone();
        let mut flipped = bytes;
        flipped[range.start + at.index(range.len())] ^= mask;
        let analysis = analyze_file(&Bytes::from(flipped), suffix, durable, None);
        let reported = analysis.failure.is_some()
            || !analysis.damage.is_empty()
            || analysis.snapshot.as_ref().is_none_or(|s| s.damage.is_some());
        prop_assert!(reported, "a flipped byte at {} went unnoticed", range.start);
    }

    #[test]
    fn arbitrary_stream_files_never_panic_the_analysis(
        bytes in prop::collection::vec(any::<u8>(), 0..400),
        appends in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..40), 0..4),
        garbage_at in any::<Index>(),
        durable in any::<bool>(),
    ) {
        let _ = analyze_file(&Bytes::from(bytes.clone()), 0, durable, None);
        let (mut file, _) = stream_file(&appends, 0);
        let at = garbage_at.index(file.len() + 1);
        file.splice(at..at, bytes);
        let _ = analyze_file(&Bytes::from(file), 0, durable, None);
    }

    #[test]
    fn zeros_followed_by_later_batches_are_damage_in_file_durable(
        appends in prop::collection::vec(prop::collection::vec(1u8..=255, 1..80), 3..10),
        record in any::<Index>(),
    ) {
        // Append `zeroed` has at least two records after it, each its own batch.
        let zeroed = 1 + record.index(appends.len() - 2);
        let (mut bytes, covered) = stream_file(&appends, 0);
        bytes[covered[zeroed].clone()].fill(0);
        let bytes = Bytes::from(bytes);
        let before: usize = appends[..zeroed - 1].iter().map(Vec::len).sum();
        let damage_at = Offset { messages: zeroed as u64 - 1, bytes: before as u64 };

        let durable = analyze_file(&bytes, 0, true, None);
        prop_assert_eq!(durable.failure, None, "not cut: the records after it are kept");
        prop_assert_eq!(durable.valid_end, bytes.len() as u64);
        prop_assert_eq!(durable.damage.len(), 1);
        let snapshot = durable.snapshot.expect("the stream");
        prop_assert_eq!(snapshot.damage.map(|damage| damage.at), Some(damage_at));
        prop_assert_eq!(snapshot.chain_n, ChainIndex::from_raw(appends.len() as u64));

        let fast = analyze_file(&bytes, 0, false, None);
        prop_assert!(fast.failure.is_some(), "file-fast: a torn end");
        prop_assert_eq!(fast.valid_end, covered[zeroed].start as u64);
    }

    #[test]
    fn zeros_in_the_last_batch_are_its_torn_end(
        appends in prop::collection::vec(prop::collection::vec(1u8..=255, 1..80), 3..10),
        batch_start in any::<Index>(),
        record in any::<Index>(),
    ) {
        // The records from `batch_start` on are one batch (one time); one of them is zeros.
        let first = 1 + batch_start.index(appends.len());
        let zeroed = first + record.index(appends.len() + 1 - first);
        let time_of = |n: u64| 1_000 + n.min(first as u64);
        let (mut bytes, covered) = stream_file_timed(&appends, 0, time_of);
        bytes[covered[zeroed].clone()].fill(0);
        let analysis = analyze_file(&Bytes::from(bytes), 0, true, None);
        prop_assert!(analysis.failure.is_some(), "cut: what a crash can leave");
        prop_assert_eq!(analysis.valid_end, covered[zeroed].start as u64);
        prop_assert!(analysis.snapshot.expect("the stream").damage.is_none());
    }

    #[test]
    fn after_a_clean_stop_a_cut_or_zeroed_end_is_damage_never_a_shorter_stream(
        appends in prop::collection::vec(prop::collection::vec(1u8..=255, 1..80), 1..10),
        cut in any::<Index>(),
        zero_to_end in any::<bool>(),
        durable in any::<bool>(),
    ) {
        // The whole file is one batch (one time): without the saved length, most such ends
        // pass for a torn one.
        let (mut bytes, covered) = stream_file_timed(&appends, 0, |_| 1_000);
        let create_check = crate::storage::files::clean_ends::create_check(&bytes).expect("a create record");
        let (name, len, create_record) = ("s".into(), bytes.len() as u64, Box::default());
        let clean = CleanEnd { name, len, create_check, deleted: false, create_record, fresh: true };
        // Somewhere after the create record, to the end of the file (zeroing or cutting only
        // the padding at the very end takes no data).
        let at = covered[1].start + cut.index(bytes.len() - covered[1].start);
        prop_assume!(at < covered[covered.len() - 1].end);
        // An append stays readable while its checked bytes are left (its padding is not).
        let ends: Vec<usize> = covered[1..].iter().map(|record| record.end).collect();
        match zero_to_end {
            true => bytes[at..].fill(0),
            false => bytes.truncate(at),
        }
        let bytes = Bytes::from(bytes);
        let saved = analyze_file(&bytes, 0, durable, Some(&clean));
        let snapshot = saved.snapshot.expect("the stream");
        let damage = snapshot.damage.expect("damage, not a torn end");
        let intact = ends.iter().take_while(|end| **end <= at).count();
        let intact_bytes: usize = appends[..intact].iter().map(Vec::len).sum();
        prop_assert_eq!(damage.at, Offset { messages: intact as u64, bytes: intact_bytes as u64 });
        prop_assert!(!saved.damage.is_empty(), "and reported");
    }
}
