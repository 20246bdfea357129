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

/// Whether `bytes` are one JSON text by RFC 8259's grammar, checked here by hand rather
/// than by serde_json: its `Value` gives a map keyed by its own private raw-value token a
/// meaning of its own (so it refuses some JSON), and its number range is no part of the
/// grammar. A nesting deeper than the body limit allows is refused, to keep the stack short.
fn is_json(bytes: &[u8]) -> bool {
    let mut text = JsonText { bytes, at: 0 };
    std::str::from_utf8(bytes).is_ok() && text.value(0) && text.skip_space() == bytes.len()
}

/// A cursor over a JSON text being checked against the grammar.
struct JsonText<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl JsonText<'_> {
    const DEPTH_MAX: usize = 256;

    fn skip_space(&mut self) -> usize {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
        self.at
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        let next = self.peek() == Some(byte);
        self.at += usize::from(next);
        next
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while self.peek().is_some_and(|byte| byte.is_ascii_digit()) {
            self.at += 1;
        }
        self.at - start
    }

    fn value(&mut self, depth: usize) -> bool {
        self.skip_space();
        let fine = match self.peek() {
            Some(b'{') => depth < Self::DEPTH_MAX && self.members(depth + 1, b'}', true),
            Some(b'[') => depth < Self::DEPTH_MAX && self.members(depth + 1, b']', false),
            Some(b'"') => self.string(),
            Some(b't') => self.word(b"true"),
            Some(b'f') => self.word(b"false"),
            Some(b'n') => self.word(b"null"),
            _ => self.number(),
        };
        self.skip_space();
        fine
    }

    /// An object's members (`keyed`) or an array's elements, from the opening bracket on.
    fn members(&mut self, depth: usize, close: u8, keyed: bool) -> bool {
        self.at += 1;
        self.skip_space();
        if self.eat(close) {
            return true;
        }
        loop {
            if keyed && !self.key() {
                return false;
            }
            if !self.value(depth) {
                return false;
            }
            if self.eat(close) {
                return true;
            }
            if !self.eat(b',') {
                return false;
            }
        }
    }

    /// An object member's key and the colon after it.
    fn key(&mut self) -> bool {
        self.skip_space();
        let fine = self.string();
        self.skip_space();
        fine && self.eat(b':')
    }

    fn string(&mut self) -> bool {
        if !self.eat(b'"') {
            return false;
        }
        while let Some(byte) = self.peek() {
            self.at += 1;
            match byte {
                b'"' => return true,
                0..=0x1f => return false,
                b'\\' if self.eat(b'u') => {
                    let hex = self.bytes.get(self.at..self.at + 4);
                    if !hex.is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit)) {
                        return false;
                    }
                    self.at += 4;
                }
                b'\\'
                    if matches!(
                        self.peek(),
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't')
                    ) =>
                {
                    self.at += 1;
                }
                b'\\' => return false,
                _ => {}
            }
        }
        false
    }

    fn word(&mut self, word: &[u8]) -> bool {
        let fine = self.bytes[self.at..].starts_with(word);
        self.at += word.len();
        fine
    }

    fn number(&mut self) -> bool {
        self.eat(b'-');
        let whole_fine = match self.peek() {
            Some(b'0') => {
                self.at += 1;
                true
            }
            Some(b'1'..=b'9') => self.digits() > 0,
            _ => false,
        };
        let fraction_fine = !self.eat(b'.') || self.digits() > 0;
        let exponent_fine = !(self.eat(b'e') || self.eat(b'E')) || {
            let _ = self.eat(b'+') || self.eat(b'-');
            self.digits() > 0
        };
        whole_fine && fraction_fine && exponent_fine
    }
}

#[cfg(test)]
mod tests {
    use super::is_json;

    #[test]
    fn the_grammar_check_takes_json_and_nothing_else() {
        let json = [
            "0",
            "-0.5e+3",
            "1401e014966",
            " [ ] ",
            "{}",
            r#"{"a":[1,{"b":null}],"c":"\u00e9\n"}"#,
            r#"{"$serde_json::private::RawValue":"i.pt"}"#,
            "true",
            r#""é""#,
        ];
        for text in json {
            assert!(is_json(text.as_bytes()), "{text} is JSON");
        }
        let not_json = [
            "",
            "01",
            "-",
            "1.",
            "1e",
            ".5",
            "[1,]",
            "{\"a\"}",
            "{\"a\":1,}",
            "[1 2]",
            "tru",
            "nul",
            "\"\\x\"",
            "\"\\u12g4\"",
            "\"a",
            "1 1",
            "{1:2}",
            "\"\u{1}\"",
            "+1",
        ];
        for text in not_json {
            assert!(!is_json(text.as_bytes()), "{text} is not JSON");
        }
        assert!(!is_json(&[b'"', 0xff, b'"']), "JSON text is UTF-8");
        assert!(!is_json("[".repeat(300).as_bytes()), "nesting is bounded");
    }
}
