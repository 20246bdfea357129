//! Records: round trips, flips and cuts, checksummed garbage, scans over mixed bytes.

use bytes::Bytes;
use proptest::prelude::*;
use proptest::sample::Index;

use super::strategies::{encode_record, flip, record_parts};
use crate::storage::record::codec::{decode_chain, decode_meta, decode_record, Header, HEADER_BYTES};
use crate::storage::record::scan::{could_be_torn, failed_record_len, next_header, RecordScan};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn records_round_trip_and_no_flip_or_cut_is_accepted(
        parts in record_parts(),
        (at, mask) in flip(),
        cut in any::<Index>(),
    ) {
        let (bytes, covered) = encode_record(&parts);
        let decoded = decode_record(&bytes).expect("what was encoded decodes");
        prop_assert_eq!(decoded.header.kind, parts.header.kind);
        prop_assert_eq!(decoded.header.lsn, parts.header.lsn);
        prop_assert_eq!(decoded.header.offset, parts.header.offset);
        prop_assert_eq!(&decoded.meta, &parts.meta);
        prop_assert_eq!(decoded.data, &parts.data[..]);
        prop_assert_eq!(decoded.header.record_len(), bytes.len());

        let mut flipped = bytes.clone();
        flipped[at.index(covered)] ^= mask;
        prop_assert!(decode_record(&flipped).is_err());
        prop_assert!(decode_record(&bytes[..cut.index(covered)]).is_err());
    }

    #[test]
    fn arbitrary_headers_decode_only_when_their_checksum_holds(raw in any::<[u8; 64]>()) {
        if let Ok(header) = Header::decode(&raw) {
            prop_assert_eq!(crc32fast::hash(&raw[..60]).to_le_bytes(), [raw[60], raw[61], raw[62], raw[63]]);
            prop_assert_eq!(header.encode(), raw, "only the canonical form is accepted");
        }
    }

    /// Headers whose checksum holds but whose fields are arbitrary, and metas of arbitrary
    /// bytes: the deep checks never panic.
    #[test]
    fn checksummed_garbage_never_panics_a_decoder(
        fields in any::<[u8; 56]>(),
        meta in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut raw = [0u8; HEADER_BYTES];
        raw[..4].copy_from_slice(b"DSR1");
        raw[4..60].copy_from_slice(&fields);
        let crc = crc32fast::hash(&raw[..60]);
        raw[60..].copy_from_slice(&crc.to_le_bytes());
        if let Ok(header) = Header::decode(&raw) {
            prop_assert!(u32::from(header.meta_len) <= header.payload_len);
            let _ = decode_meta(&header, &meta);
            let mut record = raw.to_vec();
            record.extend_from_slice(&meta);
            let _ = decode_record(&record);
        }
        let _ = decode_chain(&meta);
    }

    /// Scans over valid records mixed with garbage never panic, never read a record that
    /// fails its checks, and never run past the bytes.
    #[test]
    fn scans_of_mixed_bytes_never_panic(
        pieces in prop::collection::vec(
            prop_oneof![
                record_parts().prop_map(|parts| encode_record(&parts).0),
                prop::collection::vec(any::<u8>(), 0..100),
            ],
            0..6,
        ),
        from in any::<Index>(),
    ) {
        let bytes: Vec<u8> = pieces.concat();
        let shared = Bytes::from(bytes.clone());
        let mut scan = RecordScan::new(shared, 0);
        for record in scan.by_ref() {
            let start = record.position as usize;
            prop_assert!(decode_record(&bytes[start..]).is_ok());
            prop_assert!(start + HEADER_BYTES + record.header.payload_len as usize <= bytes.len());
        }
        prop_assert!(scan.end().is_some(), "a scan ends");
        if !bytes.is_empty() {
            let start = from.index(bytes.len());
            let _ = could_be_torn(&bytes, start, failed_record_len(&bytes, start));
            if let Some((at, _)) = next_header(&bytes, start) {
                prop_assert!(at >= start && at + HEADER_BYTES <= bytes.len());
            }
        }
    }
}
