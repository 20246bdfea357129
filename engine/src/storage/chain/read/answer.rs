//! Building one catch-up answer from a read's records, in chain order.
//!
//! Each record's data is checked against its crc as it is taken. Small records are copied
//! together into one buffer, reserved once for the rest of the span and charged to the
//! read-copies budget (`copies`); large ones, and all of them once the budget is spent, go
//! as slices of their storage; a record the read's end cuts goes cut. Both ways of reading
//! a span — the chain walk of `super::LogRead::chunk` and the forward pass of `one_pass` —
//! take their records through here, so they answer alike.

use bytes::{Bytes, BytesMut};

use crate::offset::Offset;
use crate::storage::chain::Node;
use crate::storage::chunk::{Chunk, ReadError};

use super::copies::Copies;
use super::{LogRead, RecordSource, COPY_BELOW_BYTES};

/// An answer being built.
pub(super) struct Answer {
    slices: Vec<Bytes>,
    /// Some slice is of the storage itself, not a copy.
    from_storage: bool,
    copied: BytesMut,
    copies: Copies,
    /// Where the records the answer spans end (what a copy may need room up to).
    span_end: u64,
    /// Where the answer ends so far.
    pub next: Offset,
}

impl Answer {
    /// An empty answer from `from` over the records from `first` to `last` (whose data is
    /// what its copies are charged for).
    pub(super) fn new(from: Offset, first: &Node, last: &Node) -> Answer {
        let span_end = last.end.bytes;
        let copies = Copies::new(span_end - first.start.bytes);
        Answer {
            slices: Vec::new(),
            from_storage: false,
            copied: BytesMut::new(),
            copies,
            span_end,
            next: from,
        }
    }

    /// Takes the data of `node` (after its first `skip` bytes) into the answer; nothing is
    /// taken when it fails its checks.
    pub(super) fn take<S: RecordSource>(
        &mut self,
        read: &LogRead<'_, S>,
        node: &Node,
        skip: usize,
    ) -> Result<(), ReadError> {
        if node.start == node.end {
        } else if node.end > read.until {
            let data = read.cut_data(node, skip)?;
            self.seal_copied();
            self.slices.push(data);
            self.from_storage = true;
        } else if node.end.bytes - node.start.bytes < COPY_BELOW_BYTES && self.copies.allowed() {
            if self.copied.capacity() == 0 {
                self.copied.reserve((self.span_end - node.start.bytes) as usize);
            }
            read.source.copy_data(node, skip, &mut self.copied)?;
        } else {
            let data = read.source.data(node)?;
            self.seal_copied();
            self.slices.push(data.slice(skip..));
            self.from_storage = true;
        }
        self.next = node.end.min(read.until);
        Ok(())
    }

    /// After `node` was taken: takes the run of plain records right behind it in one pass
    /// ([`RecordSource::copy_run`]), if the answer is copying; returns the last one taken.
    pub(super) fn take_run<S: RecordSource>(
        &mut self,
        read: &LogRead<'_, S>,
        node: &Node,
        last: &Node,
    ) -> Option<Node> {
        if self.copied.capacity() == 0 || !self.copies.allowed() {
            return None;
        }
        let taken = read.source.copy_run(node, last, read.until, &mut self.copied)?;
        assert!(taken.n > node.n && taken.n <= last.n && taken.end <= read.until, "a run stays in the read");
        self.next = taken.end;
        Some(taken)
    }

    /// Whether the answer holds exactly the bytes its offsets promise since `from`.
    pub(super) fn holds_bytes_since(&self, from: Offset) -> bool {
        let held: usize = self.slices.iter().map(Bytes::len).sum::<usize>() + self.copied.len();
        held as u64 == self.next.bytes - from.bytes
    }

    /// The answer, from `from`.
    pub(super) fn finish(mut self, from: Offset) -> Chunk {
        self.seal_copied();
        debug_assert!(self.next > from, "a read that returns covers at least one record");
        let (messages, copied) = (self.next.messages - from.messages, !self.from_storage);
        Chunk { next: self.next, messages, slices: self.slices, copied }
    }

    /// Ends the copy so far as one slice, before a slice of storage follows it.
    fn seal_copied(&mut self) {
        if !self.copied.is_empty() {
            self.slices.push(self.copies.seal(self.copied.split().freeze()));
        }
    }
}
