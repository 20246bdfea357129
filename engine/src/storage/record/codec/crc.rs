//! The crc32 of records: of a header's fields, and of a payload (meta, then data), as
//! written and as checked on every read. Leaf module: it owns one shared hasher and
//! touches nothing else.

use std::sync::LazyLock;

/// A crc32 hasher made once: `crc32fast` looks up the CPU's features at every
/// `Hasher::new`, and reads make two hashes per record (its header, its payload).
static CRC_HASHER: LazyLock<crc32fast::Hasher> = LazyLock::new(crc32fast::Hasher::new);

/// The crc32 of `bytes` (as `crc32fast::hash`).
pub(super) fn crc32(bytes: &[u8]) -> u32 {
    let mut hasher = CRC_HASHER.clone();
    hasher.update(bytes);
    hasher.finalize()
}

/// The payload crc of a record: meta, then data.
pub(crate) fn payload_crc(meta: &[u8], data: &[&[u8]]) -> u32 {
    let mut hasher = CRC_HASHER.clone();
    hasher.update(meta);
    for part in data {
        hasher.update(part);
    }
    hasher.finalize()
}

/// The payload crc of a record from its payload in one piece (meta, then data): the same
/// value as [`payload_crc`], in one pass of the crc's wide path instead of a slow start on
/// the few bytes of meta.
pub(crate) fn whole_payload_crc(payload: &[u8]) -> u32 {
    crc32(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn the_whole_payload_crc_equals_meta_then_data(
            meta in proptest::collection::vec(proptest::num::u8::ANY, 0..200),
            data in proptest::collection::vec(proptest::num::u8::ANY, 0..5000),
        ) {
            let whole = [meta.as_slice(), data.as_slice()].concat();
            proptest::prop_assert_eq!(whole_payload_crc(&whole), payload_crc(&meta, &[&data]));
        }
    }
}
