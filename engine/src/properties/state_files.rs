//! Checkpoints, the manifest, renewals files and segment headers.

use proptest::prelude::*;
use proptest::sample::Index;

use super::strategies::{checkpoint, flip, text};
use crate::ids::Lsn;
use crate::storage::manifest::Manifest;
use crate::storage::renewals::{self, Renewal};
use crate::storage::wal::checkpoint::Checkpoint;
use crate::storage::wal::segment::SegmentHeader;
use crate::StorageMode;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn checkpoints_round_trip_and_no_flip_or_cut_is_accepted(
        checkpoint in checkpoint(),
        (at, mask) in flip(),
        cut in any::<Index>(),
    ) {
        let bytes = checkpoint.encode();
        prop_assert_eq!(Checkpoint::decode(&bytes).expect("decodes"), checkpoint);
        let mut flipped = bytes.clone();
        flipped[at.index(bytes.len())] ^= mask;
        prop_assert!(Checkpoint::decode(&flipped).is_err());
        prop_assert!(Checkpoint::decode(&bytes[..cut.index(bytes.len())]).is_err());
    }

    #[test]
    fn arbitrary_checkpoints_never_panic(mut bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let _ = Checkpoint::decode(&bytes);
        // With a checksum that holds, the fields themselves are decoded.
        bytes.splice(0..0, *b"DSK1\x03\0\0\0");
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        let _ = Checkpoint::decode(&bytes);
    }

    #[test]
    fn manifests_round_trip_and_no_changed_character_is_accepted(
        mode in prop::sample::select(vec![StorageMode::Acid, StorageMode::FileDurable, StorageMode::FileFast]),
        shards in 1u32..=256,
        format in any::<u32>(),
        hash in prop::collection::vec(prop::sample::select(b"abcxyz0123456789-".to_vec()), 1..12),
        at in any::<Index>(),
        replacement in any::<char>(),
        arbitrary in text(200),
    ) {
        let hash = String::from_utf8(hash).unwrap();
        let manifest = Manifest { format, mode, shards, hash };
        let encoded = manifest.encode();
        prop_assert_eq!(Manifest::decode(&encoded), Some(manifest));
        let mut chars: Vec<char> = encoded.chars().collect();
        let index = at.index(chars.len());
        prop_assume!(chars[index] != replacement);
        chars[index] = replacement;
        prop_assert_eq!(Manifest::decode(&String::from_iter(chars)), None);
        let _ = Manifest::decode(&arbitrary);
    }

    #[test]
    fn renewals_round_trip_and_no_flip_or_cut_is_accepted(
        entries in prop::collection::vec((text(40), any::<u64>(), any::<u64>()), 0..5),
        (at, mask) in flip(),
        cut in any::<Index>(),
        arbitrary in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let saved: Vec<Renewal> = entries
            .iter()
            .map(|(name, incarnation, ms)| Renewal { name: name.as_str().into(), incarnation: *incarnation, last_access_ms: *ms })
            .collect();
        let bytes = renewals::encode(&saved);
        let parsed = renewals::parse(&bytes).expect("parses");
        let expected: Vec<(Box<str>, u64, u64)> =
            entries.into_iter().map(|(name, incarnation, ms)| (name.into_boxed_str(), incarnation, ms)).collect();
        prop_assert_eq!(parsed, expected);
        let mut flipped = bytes.clone();
        flipped[at.index(bytes.len())] ^= mask;
        prop_assert!(renewals::parse(&flipped).is_err());
        prop_assert!(renewals::parse(&bytes[..cut.index(bytes.len())]).is_err());
        let _ = renewals::parse(&arbitrary);
    }

    #[test]
    fn segment_headers_round_trip_and_no_flip_is_accepted(
        fields in (any::<u32>(), any::<u32>(), any::<u64>(), any::<u64>(), any::<u64>()),
        (at, mask) in flip(),
        raw in any::<[u8; 64]>(),
    ) {
        let (shard, ordinal, first_lsn, size, created_ms) = fields;
        let header = SegmentHeader { shard, ordinal, first_lsn: Lsn::from_raw(first_lsn), size, created_ms };
        let bytes = header.encode();
        prop_assert_eq!(SegmentHeader::decode(&bytes).expect("decodes"), header);
        let mut flipped = bytes;
        flipped[at.index(bytes.len())] ^= mask;
        prop_assert!(SegmentHeader::decode(&flipped).is_err());
        if SegmentHeader::decode(&raw).is_ok() {
            prop_assert_eq!(crc32fast::hash(&raw[..60]).to_le_bytes(), [raw[60], raw[61], raw[62], raw[63]]);
        }
    }
}
