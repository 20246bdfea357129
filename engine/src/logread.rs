//! Reading a stream from its chain of records, in either disk mode.
//!
//! A stream in a disk mode is the chain of its records in a log (acid segments or its own
//! file). A read starts from the published tail record, finds the record holding the start
//! offset (checking it is a message boundary, inside a multi-message JSON record if need
//! be), picks the last record that fits the byte budget (and at most
//! [`RECORDS_PER_READ_MAX`] records), and walks back to collect them. The data comes back as
//! `Bytes` straight from the storage ([`RecordSource::data`]); the data of small records is
//! copied together instead ([`COPY_BELOW_BYTES`]).

use bytes::{Bytes, BytesMut};

use crate::chain::{collect, find, find_index, find_last, Node, NodeSource};
use crate::offset::Offset;
use crate::payload::stored_json_message_ends;
use crate::read::{Chunk, Message, ReadError};

/// Most records one read returns (a partial read continues at its next offset).
pub const RECORDS_PER_READ_MAX: u64 = 4096;

/// Records whose data is smaller than this are copied into a shared buffer by reads rather
/// than handed out as slices of their own: a slice costs an allocation and an iovec on the
/// way out, more than copying a few hundred bytes.
pub const COPY_BELOW_BYTES: u64 = 4096;

/// A log that can hand out a record's stored data.
pub trait RecordSource: NodeSource<Error = ReadError> {
    /// The stored message bytes of the record `node` describes.
    fn data(&self, node: &Node) -> Result<Bytes, ReadError>;

    /// Appends the stored bytes of the record `node` describes, from byte `skip` on, to `out`.
    fn copy_data(&self, node: &Node, skip: usize, out: &mut BytesMut) -> Result<(), ReadError> {
        out.extend_from_slice(&self.data(node)?[skip..]);
        Ok(())
    }
}

/// Reads stored for the stream whose published tail record is at `tail_location` and whose
/// published tail offset is `until`.
pub struct LogRead<'a, S: RecordSource> {
    pub source: &'a S,
    pub tail_location: u64,
    pub until: Offset,
    pub json: bool,
}

/// The records a read covers and where in the first one it starts.
struct Span {
    nodes: Vec<Node>,
    /// Bytes of the first record's data before the start offset.
    skip_bytes: usize,
    /// Messages of the first record before the start offset.
    skip_messages: u64,
}

impl<S: RecordSource> LogRead<'_, S> {
    /// Whole messages from `from`, about `bytes_max` stored bytes (at least one record).
    pub fn chunk(&self, from: Offset, bytes_max: usize) -> Result<Chunk, ReadError> {
        let Some(span) = self.span(from, bytes_max)? else {
            return Ok(Chunk { next: from, messages: 0, slices: Vec::new() });
        };
        let mut slices = Vec::new();
        let mut copied = BytesMut::new();
        for (index, node) in span.nodes.iter().enumerate() {
            if node.start == node.end {
                continue;
            }
            let skip = if index == 0 { span.skip_bytes } else { 0 };
            if node.end.bytes - node.start.bytes < COPY_BELOW_BYTES {
                self.source.copy_data(node, skip, &mut copied)?;
                continue;
            }
            if !copied.is_empty() {
                slices.push(copied.split().freeze());
            }
            slices.push(self.source.data(node)?.slice(skip..));
        }
        if !copied.is_empty() {
            slices.push(copied.freeze());
        }
        let next = span.nodes.last().map_or(from, |node| node.end);
        Ok(Chunk { next, messages: next.messages - from.messages, slices })
    }

    /// Single messages from `from` (for SSE), with the same limits as [`LogRead::chunk`].
    pub fn messages(&self, from: Offset, bytes_max: usize) -> Result<Vec<Message>, ReadError> {
        let Some(span) = self.span(from, bytes_max)? else {
            return Ok(Vec::new());
        };
        let mut messages = Vec::new();
        for (index, node) in span.nodes.iter().enumerate() {
            if node.start == node.end {
                continue;
            }
            let data = self.source.data(node)?;
            let mut next = node.start;
            let mut start = 0;
            for end in self.message_ends(&data, node)? {
                next = next.advance(1, (end - start) as u64);
                let skipped = index == 0 && next.messages <= node.start.messages + span.skip_messages;
                if !skipped {
                    messages.push(Message { stored: data.slice(start..end), next });
                }
                start = end;
            }
            debug_assert_eq!(next, node.end, "a record's messages end at its end offset");
        }
        Ok(messages)
    }

    /// The records to read from `from`, or `None` when `from` is the published tail.
    fn span(&self, from: Offset, bytes_max: usize) -> Result<Option<Span>, ReadError> {
        if from.messages > self.until.messages || from.bytes > self.until.bytes {
            return Err(ReadError::NotBoundary);
        }
        if from == self.until {
            return Ok(None);
        }
        let tail = self.source.node(self.tail_location)?;
        debug_assert_eq!(tail.end, self.until, "the published tail record ends at the published tail");
        let first = find(self.source, &tail, from.bytes)?;
        let (skip_bytes, skip_messages) = self.position_in(&first, from)?;
        let budget_end = from.bytes.saturating_add(bytes_max as u64).min(self.until.bytes);
        let mut last =
            find_last(self.source, &tail, |node| node.start.bytes < budget_end.max(from.bytes + 1))?;
        if last.n > first.n && last.end.bytes > budget_end {
            last = find_index(self.source, &last, last.n - 1)?;
        }
        if last.n - first.n >= RECORDS_PER_READ_MAX {
            last = find_index(self.source, &last, first.n + RECORDS_PER_READ_MAX - 1)?;
        }
        let nodes = collect(self.source, &first, last, RECORDS_PER_READ_MAX as usize)?;
        Ok(Some(Span { nodes, skip_bytes, skip_messages }))
    }

    /// How far into `node` (bytes, messages) the offset `at` is; it must be a boundary.
    fn position_in(&self, node: &Node, at: Offset) -> Result<(usize, u64), ReadError> {
        if at == node.start {
            return Ok((0, 0));
        }
        if !self.json || at.bytes >= node.end.bytes || at.messages <= node.start.messages {
            return Err(ReadError::NotBoundary);
        }
        let data = self.source.data(node)?;
        let ends = stored_json_message_ends(&data);
        let skip_messages = at.messages - node.start.messages;
        let skip_bytes = (at.bytes - node.start.bytes) as usize;
        match ends.get(skip_messages as usize - 1) {
            Some(end) if *end == skip_bytes => Ok((skip_bytes, skip_messages)),
            _ => Err(ReadError::NotBoundary),
        }
    }

    /// Where each message of a record's data ends.
    fn message_ends(&self, data: &Bytes, node: &Node) -> Result<Vec<usize>, ReadError> {
        let count = node.end.messages - node.start.messages;
        if !self.json || count == 1 {
            return Ok(vec![data.len()]);
        }
        let ends = stored_json_message_ends(data);
        if ends.len() as u64 != count || ends.last() != Some(&data.len()) {
            return Err(ReadError::Storage);
        }
        Ok(ends)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::Levels;
    use crate::payload::Payload;

    /// An in-memory log of records, chained like the disk modes chain them.
    struct Log {
        nodes: Vec<Node>,
        data: Vec<Bytes>,
    }

    impl NodeSource for Log {
        type Error = ReadError;
        fn node(&self, location: u64) -> Result<Node, ReadError> {
            self.nodes.get(location as usize).cloned().ok_or(ReadError::Storage)
        }
    }

    impl RecordSource for Log {
        fn data(&self, node: &Node) -> Result<Bytes, ReadError> {
            Ok(self.data[node.location as usize].clone())
        }
    }

    fn log(payloads: &[Payload]) -> Log {
        let mut log = Log {
            nodes: vec![Node { location: 0, n: 0, start: Offset::ZERO, end: Offset::ZERO, jumps: vec![] }],
            data: vec![Bytes::new()],
        };
        let mut levels = Levels::started_at(0);
        for payload in payloads {
            let chain = levels.next_chain();
            let start = log.nodes.last().unwrap().end;
            let end = start.advance(payload.message_count(), payload.stored_len());
            let location = log.nodes.len() as u64;
            log.nodes.push(Node { location, n: chain.n, start, end, jumps: chain.jumps });
            log.data.push(Bytes::from(payload.stored_bytes()));
            levels.push(location);
        }
        log
    }

    fn reader(log: &Log, json: bool) -> LogRead<'_, Log> {
        let tail = log.nodes.last().unwrap();
        LogRead { source: log, tail_location: tail.location, until: tail.end, json }
    }

    fn text(chunk: &Chunk) -> String {
        chunk.slices.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect()
    }

    fn raw(text: &str) -> Payload {
        Payload::raw(Bytes::copy_from_slice(text.as_bytes()))
    }

    #[test]
    fn reads_from_every_record_boundary() {
        let log = log(&[raw("aa"), Payload::raw(Bytes::new()), raw("bbb"), raw("c")]);
        let read = reader(&log, false);
        let offsets = [Offset::ZERO, Offset { messages: 1, bytes: 2 }, Offset { messages: 2, bytes: 5 }];
        let expected = ["aabbbc", "bbbc", "c"];
        for (from, expected) in offsets.iter().zip(expected) {
            let chunk = read.chunk(*from, 1 << 20).unwrap();
            assert_eq!(text(&chunk), expected);
            assert_eq!(chunk.next, read.until);
        }
        assert!(read.chunk(read.until, 100).unwrap().is_empty());
        assert_eq!(read.chunk(Offset { messages: 1, bytes: 3 }, 100).err(), Some(ReadError::NotBoundary));
        assert_eq!(read.chunk(Offset { messages: 9, bytes: 9 }, 100).err(), Some(ReadError::NotBoundary));
    }

    #[test]
    fn budgets_and_record_caps_cut_at_records() {
        let payloads: Vec<Payload> = (0..10_000).map(|i| raw(&format!("{:04}", i % 10_000))).collect();
        let log = log(&payloads);
        let read = reader(&log, false);
        let chunk = read.chunk(Offset::ZERO, 10).unwrap();
        assert_eq!((text(&chunk), chunk.messages), ("00000001".to_string(), 2));
        let chunk = read.chunk(Offset::ZERO, 1).unwrap();
        assert_eq!(chunk.messages, 1, "at least one record");
        let chunk = read.chunk(Offset::ZERO, usize::MAX).unwrap();
        assert_eq!(chunk.messages, RECORDS_PER_READ_MAX);
        let mut from = Offset::ZERO;
        let mut all = String::new();
        while from != read.until {
            let chunk = read.chunk(from, 1000).unwrap();
            all.push_str(&text(&chunk));
            from = chunk.next;
        }
        assert_eq!(all.len(), 40_000);
    }

    #[test]
    fn json_records_split_into_messages_and_allow_inner_boundaries() {
        let batch = Payload::json(Bytes::from_static(b"[1,{\"a\":\",\"},[2,3]]"), false).unwrap();
        let log = log(&[batch, Payload::json(Bytes::from_static(b"\"x\""), false).unwrap()]);
        let read = reader(&log, true);
        let messages = read.messages(Offset::ZERO, 1 << 20).unwrap();
        let stored: Vec<String> =
            messages.iter().map(|m| String::from_utf8(m.stored.to_vec()).unwrap()).collect();
        assert_eq!(stored, ["1,", "{\"a\":\",\"},", "[2,3],", "\"x\","]);
        let inner = messages[0].next;
        assert_eq!(text(&read.chunk(inner, 1 << 20).unwrap()), "{\"a\":\",\"},[2,3],\"x\",");
        let from_inner = read.messages(inner, 1 << 20).unwrap();
        assert_eq!(from_inner.len(), 3);
        assert_eq!(from_inner.last().unwrap().next, read.until);
        let not_boundary = Offset { messages: 1, bytes: 3 };
        assert_eq!(read.chunk(not_boundary, 10).err(), Some(ReadError::NotBoundary));
    }
}
