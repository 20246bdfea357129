//! Reading a stream from its chain of records, in either disk mode.
//!
//! A read may stop short of the published tail (`until` before `tail_end`): a fork reads its
//! source's bytes only up to where it inherits them, which in JSON mode may be a message
//! boundary inside a record; that record is then served cut at `until`.
//!
//! A stream in a disk mode is the chain of its records in a log (acid segments or its own
//! file). A read starts from the published tail record, finds the record holding the start
//! offset (checking it is a message boundary, inside a multi-message JSON record if need
//! be), picks the last record that fits the byte budget (and at most
//! [`RECORDS_PER_READ_MAX`] records), and walks back to collect them. The data comes back as
//! `Bytes` straight from the storage ([`RecordSource::data`]); the data of small records is
//! copied together instead ([`COPY_BELOW_BYTES`]). Where a read's records lie one right
//! behind another in the log, `one_pass` reads them forward instead, data and next header
//! in the log's order, and hands back the same answer or nothing.
//!
//! Nothing damaged is served. Every jump is checked to lead to the record the chain names,
//! the records collected are checked to follow one another exactly from the start offset,
//! and each record's data is checked against its crc as it is read. Where the chain cannot
//! be walked (a damaged or missing record on the way), `careful` locates the start around
//! the damage and reads the stream forward from there. A read that reaches damage returns
//! the intact records before it (a partial read, never marked up to date); a read that
//! starts at damage fails with [`ReadError::Damaged`].

mod answer;
mod careful;
mod copies;
mod one_pass;

pub(crate) use copies::{copies_held_bytes, copies_refused, COPIES_BYTES_MAX};

use answer::Answer;
use bytes::{Bytes, BytesMut};
use one_pass::Pass;

use crate::ids::{ChainIndex, Location, StreamId};
use crate::offset::Offset;
use crate::payload::stored_json_message_ends;
use crate::storage::chain::{collect, find, find_index, find_last, Node, NodeSource};
use crate::storage::chunk::{Chunk, Message, ReadError};

/// Most records one read returns (a partial read continues at its next offset).
pub(crate) const RECORDS_PER_READ_MAX: u64 = 4096;

/// Records whose data is smaller than this are copied into one buffer by reads (reserved
/// once for the rest of the span) rather than handed out as slices of their own: the copy
/// is made while the crc check has just brought the bytes into cache, and the answer leaves
/// as one slice instead of one per record. For small messages (acid catch-up) that is
/// faster than the server gathering per-record slices (docs/performance/code-choices.md);
/// larger records are sent from their storage without a copy.
pub(crate) const COPY_BELOW_BYTES: u64 = 64 << 10;

/// Most log bytes one read scans forward past other records when the chain is damaged.
pub(crate) const SCAN_BYTES_MAX: u64 = 64 << 20;

/// A log that can hand out a record's stored data.
pub(crate) trait RecordSource: NodeSource<Error = ReadError> {
    /// The stored message bytes of the record `node` describes.
    fn data(&self, node: &Node) -> Result<Bytes, ReadError>;

    /// Appends the stored bytes of the record `node` describes, from byte `skip` on, to `out`.
    fn copy_data(&self, node: &Node, skip: usize, out: &mut BytesMut) -> Result<(), ReadError> {
        out.extend_from_slice(self.data(node)?.get(skip..).ok_or(ReadError::Damaged)?);
        Ok(())
    }

    /// Copies into `out` the data of the records right behind `node` in the log, each the
    /// next of its stream ([`follows`](crate::storage::chain::follows)), up to `last`, as
    /// long as each is plain: it ends by `until`, holds less than [`COPY_BELOW_BYTES`] of
    /// data and passes every check a record is read with. Returns the last one copied, or
    /// `None` (nothing copied). A fast path for forward reads; a source without one copies
    /// nothing here and the read takes its records one by one.
    fn copy_run(&self, _node: &Node, _last: &Node, _until: Offset, _out: &mut BytesMut) -> Option<Node> {
        None
    }

    /// The record after `node` in its stream, found by reading the log forward (never past
    /// the location `limit`, and at most `*scan_bytes` bytes, which it counts down).
    /// `None` when none is found; an error when the record there is damaged.
    fn successor(
        &self,
        node: &Node,
        limit: Location,
        scan_bytes: &mut u64,
    ) -> Result<Option<Node>, ReadError>;

    /// The first record of `stream` (whose last record is at `tail_location`), found
    /// without its chain: a stream file starts with it; acid reads its log forward from the
    /// oldest segment (at most `*scan_bytes`). `None` when it is not found.
    fn first_record(
        &self,
        stream: StreamId,
        tail_location: Location,
        scan_bytes: &mut u64,
    ) -> Result<Option<Node>, ReadError>;
}

/// Reads stored for one stream: its published last record (location and chain index),
/// its published tail offset `until`, and where its first record starts (`start`: zero, or a
/// fork's start after its inherited bytes, which are read from its source).
pub(crate) struct LogRead<'a, S: RecordSource> {
    pub source: &'a S,
    pub stream: StreamId,
    pub start: Offset,
    pub tail_location: Location,
    pub tail_n: ChainIndex,
    /// Where the published tail record ends.
    pub tail_end: Offset,
    /// Where reads stop: the published tail, or a boundary before it.
    pub until: Offset,
    pub json: bool,
}

/// Where in its first record a read starts: what of the record's data comes before it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Skip {
    bytes: usize,
    messages: u64,
}

/// The first and last records a read covers (same chain) and where in the first it starts.
struct Bounds {
    first: Node,
    last: Node,
    skip: Skip,
}

/// The records a read covers and where in the first one it starts.
struct Span {
    nodes: Vec<Node>,
    skip: Skip,
}

impl<S: RecordSource> LogRead<'_, S> {
    /// Whole messages from `from`, about `bytes_max` stored bytes (at least one record).
    pub(crate) fn chunk(&self, from: Offset, bytes_max: usize) -> Result<Chunk, ReadError> {
        if !self.reads_from(from)? {
            return Ok(Chunk { next: from, messages: 0, slices: Vec::new(), copied: false });
        }
        let bounds = match self.chained_bounds(from, bytes_max) {
            Ok(bounds) => Some(bounds),
            Err(ReadError::Damaged) => None,
            Err(error) => return Err(error),
        };
        if let Some(bounds) = &bounds {
            match one_pass::read(self, from, bounds) {
                Pass::Done(answer) => return Ok(answer.finish(from)),
                Pass::Broke(mut answer, reached) => {
                    // The run ended short of the last record: the rest, walked back along the
                    // chain to where it ended (which proves the run the chain's own).
                    if let Ok(rest) =
                        collect(self.source, &reached, bounds.last.clone(), RECORDS_PER_READ_MAX as usize)
                    {
                        // The answer holds the run already: damage in the rest only ends it.
                        let _ = self.take_all(&mut answer, &rest[1..], 0);
                        return Ok(answer.finish(from));
                    }
                }
                Pass::Declined => {}
            }
        }
        let span = match bounds.map(|bounds| self.collected(bounds)) {
            Some(Err(ReadError::Damaged)) | None => careful::span(self, from, bytes_max)?,
            Some(span) => span?,
        };
        let (first, last) = (span.nodes.first(), span.nodes.last());
        let mut answer = Answer::new(from, first.expect("a span has records"), last.expect("and a last"));
        self.take_all(&mut answer, &span.nodes, span.skip.bytes)?;
        Ok(answer.finish(from))
    }

    /// Takes `nodes` into `answer` (skipping `skip_first` bytes of the first) up to the first
    /// that fails its checks: an error when that is the first (nothing here can be served),
    /// else the intact records before it are the answer.
    fn take_all(&self, answer: &mut Answer, nodes: &[Node], skip_first: usize) -> Result<(), ReadError> {
        for (index, node) in nodes.iter().enumerate() {
            let skip = if index == 0 { skip_first } else { 0 };
            match answer.take(self, node, skip) {
                Ok(()) => {}
                Err(error) if index == 0 => return Err(error),
                Err(_) => break,
            }
        }
        Ok(())
    }

    /// Single messages from `from` (for SSE), with the same limits as [`LogRead::chunk`].
    pub(crate) fn messages(&self, from: Offset, bytes_max: usize) -> Result<Vec<Message>, ReadError> {
        let Some(span) = self.span(from, bytes_max)? else {
            return Ok(Vec::new());
        };
        let mut messages = Vec::new();
        for (index, node) in span.nodes.iter().enumerate() {
            if node.start == node.end {
                continue;
            }
            let read = self.source.data(node).and_then(|data| Ok((self.message_ends(&data, node)?, data)));
            let (ends, data) = match read {
                Ok(read) => read,
                Err(error) if messages.is_empty() => return Err(error),
                Err(_) => break,
            };
            let mut next = node.start;
            let mut start = 0;
            for end in ends {
                next = next.advance(1, (end - start) as u64);
                if next > self.until {
                    break;
                }
                let skipped = index == 0 && next.messages <= node.start.messages + span.skip.messages;
                if !skipped {
                    messages.push(Message { stored: data.slice(start..end), next });
                }
                start = end;
            }
            debug_assert!(next == node.end || node.end > self.until, "a record's messages end at its end");
        }
        Ok(messages)
    }

    /// Whether there is anything to read from `from` (`false` at the published tail); an
    /// error when `from` is no offset of this stream's own.
    fn reads_from(&self, from: Offset) -> Result<bool, ReadError> {
        let inside = |bound: Offset| from.messages <= bound.messages && from.bytes <= bound.bytes;
        if !inside(self.until) || (from != self.start && inside(self.start)) {
            return Err(ReadError::NotBoundary);
        }
        Ok(from != self.until)
    }

    /// The records to read from `from`, or `None` when `from` is the published tail.
    fn span(&self, from: Offset, bytes_max: usize) -> Result<Option<Span>, ReadError> {
        if !self.reads_from(from)? {
            return Ok(None);
        }
        let span = match self.chained_bounds(from, bytes_max).and_then(|bounds| self.collected(bounds)) {
            Err(ReadError::Damaged) => careful::span(self, from, bytes_max)?,
            span => span?,
        };
        Ok(Some(span))
    }

    /// The records from the first to the last of `bounds`, walked back along the chain.
    fn collected(&self, bounds: Bounds) -> Result<Span, ReadError> {
        let Bounds { first, last, skip } = bounds;
        let nodes = collect(self.source, &first, last, RECORDS_PER_READ_MAX as usize)?;
        debug_assert!(nodes.windows(2).all(|pair| pair[0].end == pair[1].start), "records follow on");
        Ok(Span { nodes, skip })
    }

    /// The first and last records of a read from `from`, found through the chain alone,
    /// every jump checked.
    fn chained_bounds(&self, from: Offset, bytes_max: usize) -> Result<Bounds, ReadError> {
        let tail = self.tail()?;
        let first = find(self.source, &tail, from.bytes)?;
        if first.n.is_create() && first.start != self.start {
            return Err(ReadError::Damaged);
        }
        let skip = self.position_in(&first, from)?;
        let budget_end = self.budget_end(from, bytes_max);
        let mut last =
            find_last(self.source, &tail, |node| node.start.bytes < budget_end.max(from.bytes + 1))?;
        // A last record past the budget waits for the next read; one that `until` cuts is
        // served cut.
        if last.n > first.n && last.end.bytes > from.bytes.saturating_add(bytes_max as u64) {
            let before_last = last.n.back(1).expect("a record after the first is not the create");
            last = find_index(self.source, &last, before_last)?;
        }
        if last.n.records_after(first.n) >= RECORDS_PER_READ_MAX {
            last = find_index(self.source, &last, first.n.forward(RECORDS_PER_READ_MAX - 1))?;
        }
        Ok(Bounds { first, last, skip })
    }

    /// The published last record, checked to be the one the stream's view names.
    fn tail(&self) -> Result<Node, ReadError> {
        let tail = self.source.node(self.tail_location)?;
        debug_assert!(self.until <= self.tail_end, "reads stop at the published tail at the latest");
        let named = tail.stream == self.stream && tail.n == self.tail_n && tail.end == self.tail_end;
        if !named {
            return Err(ReadError::Damaged);
        }
        Ok(tail)
    }

    /// Where a read from `from` of about `bytes_max` bytes ends at the latest.
    fn budget_end(&self, from: Offset, bytes_max: usize) -> u64 {
        from.bytes.saturating_add(bytes_max as u64).min(self.until.bytes)
    }

    /// The data of `node`, which `until` cuts, from byte `skip` up to `until` (checked to be a
    /// message boundary).
    fn cut_data(&self, node: &Node, skip: usize) -> Result<Bytes, ReadError> {
        let end = self.position_in(node, self.until)?.bytes;
        Ok(self.source.data(node)?.slice(skip..end))
    }

    /// How far into `node` the offset `at` is; it must be a boundary.
    fn position_in(&self, node: &Node, at: Offset) -> Result<Skip, ReadError> {
        if at == node.start {
            return Ok(Skip::default());
        }
        if !self.json || at.bytes >= node.end.bytes || at.messages <= node.start.messages {
            return Err(ReadError::NotBoundary);
        }
        let data = self.source.data(node)?;
        let ends = stored_json_message_ends(&data);
        let skip = Skip {
            bytes: (at.bytes - node.start.bytes) as usize,
            messages: at.messages - node.start.messages,
        };
        match ends.get(skip.messages as usize - 1) {
            Some(end) if *end == skip.bytes => Ok(skip),
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
            return Err(ReadError::Damaged);
        }
        Ok(ends)
    }
}

#[cfg(test)]
mod tests;
