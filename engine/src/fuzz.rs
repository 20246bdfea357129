//! What the fuzz targets (`fuzz/`) run, and the regression tests after them: each entry
//! point takes arbitrary bytes to one decoder that hostile bytes reach and checks what it
//! promises.
//!
//! Stored bytes reach the engine when a data directory is opened (a server's start, `ds-tool`
//! on a directory someone hands it); client bytes reach it as JSON bodies. Every entry point
//! must return for any input: a panic, an overflow or a run past a buffer is the finding.
//! Beyond that, each asserts what its decoder promises of what it accepts: a record header
//! encodes back to its own bytes, a checkpoint or a manifest decodes again from what it
//! encodes to, every message of a JSON body is JSON, and a segment opened through `inspect`
//! serves each stream's messages contiguous from the start up to its tail (or up to damage).
//! Built with the `testing` feature only.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use crate::ids::Lsn;
use crate::inspect;
use crate::offset::Offset;
use crate::payload::Payload;
use crate::storage::manifest::Manifest;
use crate::storage::record::codec::{decode_record, Header, HEADER_BYTES};
use crate::storage::record::scan::{later_batches_follow, next_header, RecordScan};
use crate::storage::vfs::sim::SimVfs;
use crate::storage::vfs::{write_file_durably, Vfs};
use crate::storage::wal::checkpoint::Checkpoint;
use crate::storage::wal::segment::{segment_name, SegmentHeader, SEGMENT_HEADER_BYTES};
use crate::storage::StorageMode;

/// A record, a header and a scan of records over `bytes`.
pub fn records(bytes: &[u8]) {
    if let Ok(decoded) = decode_record(bytes) {
        let raw: &[u8; HEADER_BYTES] = bytes[..HEADER_BYTES].try_into().expect("decoded from them");
        assert_eq!(&decoded.header.encode(), raw, "an accepted header is what its encoder writes");
    }
    if let Some(raw) = bytes.get(..HEADER_BYTES).and_then(|raw| <&[u8; HEADER_BYTES]>::try_from(raw).ok()) {
        if let Ok(header) = Header::decode(raw) {
            assert_eq!(&header.encode(), raw, "an accepted header is what its encoder writes");
        }
    }
    let shared = Bytes::copy_from_slice(bytes);
    let mut end = 0;
    for record in RecordScan::new(shared.clone(), 0) {
        assert!(record.position as usize >= end, "a scan moves forward");
        // Its header and payload lie inside the bytes; the padding after them carries
        // nothing, and the end of the bytes may cut it.
        let checked = record.position as usize + HEADER_BYTES + record.header.payload_len as usize;
        assert!(checked <= bytes.len(), "a record scanned lies inside the bytes");
        end = record.position as usize + record.header.record_len();
    }
    let _ = next_header(&shared, 1);
    let _ = later_batches_follow(&shared, 1, 1, 1 << 16);
}

/// A checkpoint file's bytes.
pub fn checkpoint(bytes: &[u8]) {
    let Ok(checkpoint) = Checkpoint::decode(bytes) else { return };
    let encoded = checkpoint.encode();
    let again = Checkpoint::decode(&encoded).expect("a checkpoint decodes from what it encodes to");
    assert_eq!(again.encode(), encoded, "decoding what was encoded changes nothing");
}

/// A `MANIFEST` file's bytes.
pub fn manifest(bytes: &[u8]) {
    let Some(manifest) = std::str::from_utf8(bytes).ok().and_then(Manifest::decode) else { return };
    let again = Manifest::decode(&manifest.encode()).expect("a manifest decodes from what it encodes to");
    assert_eq!(again.encode(), manifest.encode(), "decoding what was encoded changes nothing");
}

/// A JSON request body (an append's, or a create's with `[]` allowed).
pub fn json_body(bytes: &[u8]) {
    for allow_empty_array in [false, true] {
        let Ok(payload) = Payload::json(Bytes::copy_from_slice(bytes), allow_empty_array) else { continue };
        let mut messages = 0;
        payload.for_each_message(|message, _| {
            messages += 1;
            assert!(is_json(message), "an accepted body stores only JSON messages: {message:?}");
        });
        assert_eq!(messages, payload.message_count(), "it counts the messages it stores");
        assert!(is_json(bytes), "only a JSON body is accepted");
    }
}

/// A data directory of one acid shard whose only segment holds `bytes` (named, and placed
/// in the shard, as its header says, when it has one), opened and read through `inspect` as
/// `ds-tool` does: every stream it finds is read from its start.
pub fn segment(bytes: &[u8]) {
    let header = bytes
        .get(..SEGMENT_HEADER_BYTES as usize)
        .and_then(|raw| SegmentHeader::decode(raw.try_into().ok()?).ok());
    let (shard, first_lsn) =
        header.map_or((0, Lsn::FIRST), |header| (header.shard.min(255), header.first_lsn));
    let vfs = Arc::new(SimVfs::new());
    let root = Path::new("/data");
    let manifest = Manifest::new(StorageMode::Acid, (shard + 1).next_power_of_two());
    let dir = root.join(format!("shard-{shard:03}"));
    let written = vfs
        .create_dir_all(&dir)
        .and_then(|()| write_file_durably(vfs.as_ref(), &root.join("MANIFEST"), manifest.encode().as_bytes()))
        .and_then(|()| write_file_durably(vfs.as_ref(), &dir.join(segment_name(first_lsn)), bytes));
    written.expect("the simulated disk takes the files");
    let Ok(store) = inspect::open(vfs, root, true) else { return };
    let Ok(log) = store.shard(shard) else { return };
    let names: Vec<String> = log.analysis.streams().map(|stream| stream.name.to_string()).collect();
    for name in names {
        let Ok(Some(reader)) = store.open_stream(&name) else { continue };
        read_whole(&reader);
    }
}

/// Reads `reader` from its start in steps, each answer starting where the last ended,
/// until its tail or damage.
fn read_whole(reader: &inspect::StreamReader) {
    let tail = reader.snapshot.tail;
    let mut at = Offset::ZERO;
    while at < tail {
        let Ok(chunk) = reader.chunk(at, 4096) else { return };
        assert!(chunk.next > at || chunk.next == tail, "a read makes progress");
        assert!(chunk.next <= tail, "a read ends at the tail at most");
        if chunk.next == at {
            return;
        }
        at = chunk.next;
    }
}

/// Whether `bytes` are one JSON text (a number too large for a double is JSON all the same:
/// the grammar has no range).
fn is_json(bytes: &[u8]) -> bool {
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(_) => true,
        Err(error) => error.to_string().starts_with("number out of range"),
    }
}
