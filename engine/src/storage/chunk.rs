//! What a read returns, in every storage mode.
//!
//! Reads come back as stored bytes: plain streams store payloads as sent, JSON streams store
//! each message followed by `,`. [`Chunk`] is a run of whole messages for catch-up and
//! long-poll bodies; [`Message`] is one message for an SSE data event. Turning stored JSON into
//! a JSON array is three slices and no copy ([`json_array`]).

use bytes::Bytes;

use crate::offset::Offset;

/// Whole messages read from one start position.
#[derive(Clone, Debug, Default)]
pub struct Chunk {
    /// The offset after the last message read (the start when nothing was read).
    pub next: Offset,
    /// How many messages the slices hold.
    pub messages: u64,
    /// Stored bytes of those messages, in order.
    pub slices: Vec<Bytes>,
    /// Every slice is a copy the read made (none is a slice of the storage): the chunk can
    /// be kept without keeping a segment map, or a stream's memory, alive.
    pub copied: bool,
}

impl Chunk {
    /// Total stored bytes in the chunk.
    pub fn len(&self) -> usize {
        self.slices.iter().map(Bytes::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.messages == 0
    }
}

/// One stored message and the offset right after it.
#[derive(Clone, Debug)]
pub struct Message {
    /// Stored bytes (for JSON streams: the JSON text followed by `,`).
    pub stored: Bytes,
    pub next: Offset,
}

impl Message {
    /// The payload without the JSON separator.
    pub fn payload(&self, json: bool) -> Bytes {
        if json {
            debug_assert_eq!(self.stored.last(), Some(&b','), "JSON messages end with ','");
            self.stored.slice(..self.stored.len().saturating_sub(1))
        } else {
            self.stored.clone()
        }
    }
}

/// Why a read cannot start where it was asked to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// The offset is well formed but not a message boundary of this stream.
    NotBoundary,
    /// The stored data at the offset is damaged or gone: it fails its checks, or the log
    /// that held it is missing. Nothing from here on can be served.
    Damaged,
    /// Stored data could not be read (an I/O error).
    Storage,
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReadError::NotBoundary => "offset is not a message boundary of this stream",
            ReadError::Damaged => "the stored data at this offset is damaged",
            ReadError::Storage => "stored data could not be read",
        })
    }
}

impl std::error::Error for ReadError {}

/// Wraps stored JSON messages into a JSON array: `[` + bytes without the last `,` + `]`.
pub fn json_array(mut slices: Vec<Bytes>) -> Vec<Bytes> {
    while slices.last().is_some_and(Bytes::is_empty) {
        slices.pop();
    }
    if let Some(last) = slices.last_mut() {
        debug_assert_eq!(last.last(), Some(&b','), "stored JSON ends with ','");
        last.truncate(last.len() - 1);
    }
    let mut body = Vec::with_capacity(slices.len() + 2);
    body.push(Bytes::from_static(b"["));
    body.extend(slices);
    body.push(Bytes::from_static(b"]"));
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(slices: Vec<Bytes>) -> String {
        slices.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect()
    }

    #[test]
    fn json_array_wraps_and_drops_the_last_comma() {
        assert_eq!(joined(json_array(vec![])), "[]");
        assert_eq!(joined(json_array(vec![Bytes::from_static(b"1,")])), "[1]");
        let parts = vec![Bytes::from_static(b"{\"a\":1},2,"), Bytes::from_static(b"\"x\","), Bytes::new()];
        assert_eq!(joined(json_array(parts)), "[{\"a\":1},2,\"x\"]");
    }

    #[test]
    fn message_payload_strips_the_separator_only_for_json() {
        let message = Message { stored: Bytes::from_static(b"[1,2],"), next: Offset::ZERO };
        assert_eq!(&message.payload(true)[..], b"[1,2]");
        assert_eq!(&message.payload(false)[..], b"[1,2],");
    }
}
