//! Reads of a chained log: every boundary, budgets, JSON messages, cuts at `until`, damage,
//! and reads in one pass against the chain walk.

use super::*;
use crate::payload::Payload;
use crate::storage::chain::{Levels, Stored};

/// An in-memory log of records, chained like the disk modes chain them, whose records
/// can be damaged: unreadable, with a wrong chain index, or with data that fails its crc.
struct Log {
    nodes: Vec<Node>,
    data: Vec<Bytes>,
    damage: Option<(u64, Damage)>,
    /// Whether the log hands out the record behind another (`next_in_log`), so that reads
    /// of runs take the one-pass way (`one_pass`).
    in_order: bool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Damage {
    Header,
    ChainIndex,
    Data,
}

impl NodeSource for Log {
    type Error = ReadError;
    fn node(&self, location: Location) -> Result<Node, ReadError> {
        let mut node = self.nodes.get(location.raw() as usize).cloned().ok_or(ReadError::Damaged)?;
        match self.damage {
            Some((at, Damage::Header)) if at == location.raw() => return Err(ReadError::Damaged),
            Some((at, Damage::ChainIndex)) if at == location.raw() => node.n = node.n.forward(1 << 16),
            _ => {}
        }
        Ok(node)
    }

    fn next_in_log(&self, node: &Node, limit: Location) -> Option<Node> {
        let at = node.location.plus(1);
        (self.in_order && at <= limit).then(|| self.node(at).ok()).flatten()
    }
}

impl RecordSource for Log {
    fn data(&self, node: &Node) -> Result<Bytes, ReadError> {
        if self.damage.is_some_and(|(at, _)| at == node.location.raw()) {
            return Err(ReadError::Damaged);
        }
        Ok(self.data[node.location.raw() as usize].clone())
    }

    fn successor(&self, node: &Node, limit: Location, scan: &mut u64) -> Result<Option<Node>, ReadError> {
        let at = node.location.plus(1);
        if at > limit || *scan == 0 {
            return Ok(None);
        }
        *scan -= 1;
        let next = self.node(at)?;
        let follows = next.n == node.n.next() && next.jumps[0] == node.location && next.start == node.end;
        if follows {
            Ok(Some(next))
        } else {
            Err(ReadError::Damaged)
        }
    }

    fn first_record(
        &self,
        _stream: StreamId,
        _tail: Location,
        _scan: &mut u64,
    ) -> Result<Option<Node>, ReadError> {
        self.node(Location::from_raw(0)).map(Some)
    }
}

fn log(payloads: &[Payload]) -> Log {
    log_among_others(payloads, |_| false)
}

/// A log of stream 1's records with, before its record `i` wherever `other_before(i)`, a
/// record of stream 2 that breaks the run of stream 1's.
fn log_among_others(payloads: &[Payload], other_before: impl Fn(usize) -> bool) -> Log {
    let mut log = Log {
        nodes: vec![Node {
            location: Location::from_raw(0),
            n: ChainIndex::CREATE,
            stream: StreamId::from_raw(1),
            start: Offset::ZERO,
            end: Offset::ZERO,
            jumps: vec![],
            len: 1,
            stored: Stored::default(),
        }],
        data: vec![Bytes::new()],
        damage: None,
        in_order: false,
    };
    let mut levels = Levels::started_at(Location::from_raw(0));
    let mut end = Offset::ZERO;
    for (i, payload) in payloads.iter().enumerate() {
        if other_before(i) {
            let mut other = log.nodes[0].clone();
            (other.location, other.stream) =
                (Location::from_raw(log.nodes.len() as u64), StreamId::from_raw(2));
            log.nodes.push(other);
            log.data.push(Bytes::from_static(b"OTHER"));
        }
        let chain = levels.next_chain();
        let start = end;
        end = start.advance(payload.message_count(), payload.stored_len());
        let location = Location::from_raw(log.nodes.len() as u64);
        log.nodes.push(Node {
            location,
            n: chain.n,
            stream: StreamId::from_raw(1),
            start,
            end,
            jumps: chain.jumps,
            len: 1,
            stored: Stored::default(),
        });
        log.data.push(Bytes::from(payload.stored_bytes()));
        levels.push(location);
    }
    log
}

fn reader(log: &Log, json: bool) -> LogRead<'_, Log> {
    let tail = log.nodes.last().unwrap();
    LogRead {
        source: log,
        start: Offset::ZERO,
        stream: StreamId::from_raw(1),
        tail_location: tail.location,
        tail_n: tail.n,
        tail_end: tail.end,
        until: tail.end,
        json,
    }
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
    let mut log = log(&payloads);
    log.in_order = true;
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

#[test]
fn reads_stop_at_a_boundary_inside_a_record() {
    let batch = Payload::json(Bytes::from_static(b"[1,{\"a\":\",\"},[2,3]]"), false).unwrap();
    let log = log(&[Payload::json(Bytes::from_static(b"0"), false).unwrap(), batch]);
    let mut read = reader(&log, true);
    // A fork inherits "0", "1" and {"a":","}: its source is read up to there.
    read.until = Offset { messages: 3, bytes: 14 };
    for budget in [1, 5, 1 << 20] {
        assert_eq!(read_all(&read, Offset::ZERO, budget), ("0,1,{\"a\":\",\"},".to_string(), false));
    }
    let messages = read.messages(Offset::ZERO, 1 << 20).unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(messages.last().unwrap().next, read.until);
    assert!(read.chunk(read.until, 10).unwrap().is_empty());
    read.until = Offset { messages: 3, bytes: 13 };
    assert_eq!(read.chunk(Offset { messages: 1, bytes: 2 }, 100).err(), Some(ReadError::NotBoundary));
}

/// Reads from `from` to the end with reads of about `budget` bytes: what was served, and
/// whether the reads ended in an error rather than at the tail.
fn read_all(read: &LogRead<'_, Log>, mut from: Offset, budget: usize) -> (String, bool) {
    let mut served = String::new();
    while from != read.until {
        match read.chunk(from, budget) {
            Ok(chunk) => {
                assert!(chunk.next > from, "a read moves on");
                served.push_str(&text(&chunk));
                from = chunk.next;
            }
            Err(error) => {
                assert_eq!(error, ReadError::Damaged);
                return (served, true);
            }
        }
    }
    (served, false)
}

#[test]
fn damage_is_never_served_never_skipped_and_what_is_intact_is() {
    let payloads: Vec<Payload> = (0..40).map(|i| raw(&format!("<{i:02}>"))).collect();
    let whole: String = (0..40).map(|i| format!("<{i:02}>")).collect();
    for (damaged, in_order) in (1..=40u64).flat_map(|at| [(at, false), (at, true)]) {
        for damage in [Damage::Header, Damage::ChainIndex, Damage::Data] {
            let mut log = log(&payloads);
            log.damage = Some((damaged, damage));
            log.in_order = in_order;
            let read = reader(&log, false);
            let (start, end) = (log.nodes[damaged as usize].start, log.nodes[damaged as usize].end);
            for record in 1..=40usize {
                let from = log.nodes[record].start;
                let case = format!("{damage:?} at {damaged}, from record {record}, in order {in_order}");
                for budget in [1, 9, 1 << 20] {
                    let (served, failed) = read_all(&read, from, budget);
                    let expected = &whole[from.bytes as usize..];
                    if from >= end {
                        assert_eq!((served.as_str(), failed), (expected, false), "{case}");
                    } else if from >= start {
                        assert_eq!((served.as_str(), failed), ("", true), "{case}");
                    } else {
                        let intact = &whole[from.bytes as usize..start.bytes as usize];
                        assert_eq!((served.as_str(), failed), (intact, true), "{case}, budget {budget}");
                    }
                }
                let messages = read.messages(from, 1 << 20);
                if from < start {
                    let messages = messages.unwrap();
                    assert!(messages.last().unwrap().next <= start, "{case}");
                    assert_eq!(messages.len() as u64, start.messages - from.messages, "{case}");
                } else if from < end {
                    assert_eq!(messages.err(), Some(ReadError::Damaged), "{case}");
                }
            }
        }
    }
}

#[test]
fn reads_in_one_pass_serve_what_the_chain_walk_serves() {
    let payloads: Vec<Payload> = (0..300).map(|i| raw(&format!("{i:03}{}", "x".repeat(i % 7)))).collect();
    // Runs unbroken, broken after every record, and broken every few.
    for gap in [0, 1, 3, 7, 100] {
        let mut log = log_among_others(&payloads, |i| gap > 0 && i > 0 && i % gap == 0);
        let offsets: Vec<Offset> =
            log.nodes.iter().filter(|node| node.stream.raw() == 1).map(|node| node.start).collect();
        for budget in [1, 6, 50, 1 << 20] {
            for &from in &offsets {
                log.in_order = false;
                let walked = reader(&log, false).chunk(from, budget).unwrap();
                log.in_order = true;
                let passed = reader(&log, false).chunk(from, budget).unwrap();
                let case = format!("gap {gap}, budget {budget}, from {from:?}");
                assert!(!text(&walked).contains("OTHER"), "{case}");
                assert_eq!(
                    (text(&passed), passed.next, passed.messages),
                    (text(&walked), walked.next, walked.messages),
                    "{case}"
                );
            }
        }
    }
}

/// Appends a one-message record to `log` as the next of the chain `levels` describes,
/// and makes it the chain's own (`on_chain`) or leaves it beside the chain.
fn push_record(log: &mut Log, levels: &mut Levels, text: &str, on_chain: bool) {
    let chain = levels.next_chain();
    let start = log.nodes.iter().rfind(|node| node.n.next() == chain.n).unwrap().end;
    let location = Location::from_raw(log.nodes.len() as u64);
    let end = start.advance(1, text.len() as u64);
    let stream = StreamId::from_raw(1);
    let (n, jumps, stored) = (chain.n, chain.jumps, Stored::default());
    log.nodes.push(Node { location, n, stream, start, end, jumps, len: 1, stored });
    log.data.push(Bytes::copy_from_slice(text.as_bytes()));
    if on_chain {
        levels.push(location);
    }
}

/// A record right behind another that names it as its predecessor, but is not the one
/// the chain leads through (a write that was never published, say): a read in one pass
/// must not follow it.
#[test]
fn a_record_off_the_chain_is_never_served() {
    let mut log = log(&[]);
    log.in_order = true;
    let mut levels = Levels::started_at(Location::from_raw(0));
    push_record(&mut log, &mut levels, "a", true);
    push_record(&mut log, &mut levels, "GHOST", false);
    for text in ["b", "c", "d"] {
        push_record(&mut log, &mut levels, text, true);
    }
    let read = reader(&log, false);
    assert_eq!(read_all(&read, Offset::ZERO, 1 << 20), ("abcd".to_string(), false));
    for budget in [1, 2, 3] {
        assert_eq!(read_all(&read, Offset::ZERO, budget), ("abcd".to_string(), false), "budget {budget}");
    }
}
