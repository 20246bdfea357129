//! A stream's records as a backward skip chain: how a disk stream is indexed in O(1) memory.
//!
//! Record `n` of a stream (the create is record 0) stores the locations of records
//! `n-1, n-2, n-4, …, n-2^tz(n)` — two on average. In memory a stream keeps only its last
//! record's index and location; from there [`find`] reaches the record holding any offset in
//! O(log² n) record reads, and a reader walks back one step at a time to collect a range. A
//! writer needs the locations of the latest records whose index is a multiple of each power
//! of two ([`Levels`]); they are kept for recently written streams only and can be rebuilt
//! from a chain's tail in at most 64 reads ([`Levels::rebuild`]).
//!
//! Locations are opaque ([`Location`]): a segment and position in acid, a file position in
//! the file modes. Nothing here touches storage; [`NodeSource`] reads records for it.
//!
//! A jump is a hint until the record it leads to proves to be the one the chain names
//! ([`hop`]): the same stream, the index `n - 2^k`, earlier in the log, ending where (or
//! before) the record that jumped starts. Chain metadata is outside the header checksum,
//! so a damaged jump must lead to a refusal ([`Broken`]), never to another record.
//! [`find_last_tolerant`] searches around records that cannot be read.

pub(crate) mod read;

use crate::ids::{ChainIndex, Location, StreamId};
use crate::offset::Offset;
use crate::storage::chunk::ReadError;

/// A record's place in its stream's chain: its index and where records `n - 2^j` are (as
/// every create and append record carries it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Chain {
    pub n: ChainIndex,
    /// Locations of records `n-1, n-2, n-4, …, n-2^tz(n)` (none for `n == 0`).
    pub jumps: Vec<Location>,
}

/// How many jumps record `n` stores.
pub(crate) fn jump_count(n: ChainIndex) -> usize {
    if n.is_create() {
        0
    } else {
        n.trailing_zeros() as usize + 1
    }
}

/// What the chain needs to know of one record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub location: Location,
    pub n: ChainIndex,
    /// The stream the record belongs to.
    pub stream: StreamId,
    /// The stream's offset before and after the record.
    pub start: Offset,
    pub end: Offset,
    /// As in [`Chain::jumps`]: nearest first.
    pub jumps: Vec<Location>,
    /// Bytes the record takes in its log, padding included.
    pub len: u64,
    /// Where its stored bytes are and what checks them.
    pub stored: Stored,
}

/// A record's payload as its checked header describes it: enough for a read to fetch and
/// check the record's data without reading the header again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    /// Meta bytes at the start of the payload, before the data.
    pub meta_len: u16,
    /// Meta and data.
    pub payload_len: u32,
    pub payload_crc: u32,
}

/// A jump that does not lead to the record its chain names: damaged chain metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Broken;

impl From<Broken> for ReadError {
    fn from(_: Broken) -> ReadError {
        ReadError::Damaged
    }
}

/// Reads the record at a location.
pub(crate) trait NodeSource {
    type Error: From<Broken>;
    fn node(&self, location: Location) -> Result<Node, Self::Error>;

    /// The create or append record that lies right after `node` in its log, whichever
    /// stream's, when it is at or before `limit` and the log can read it in place; nothing
    /// is checked against a chain ([`follows`] does that). `None` by default.
    fn next_in_log(&self, _node: &Node, _limit: Location) -> Option<Node> {
        None
    }
}

/// Whether `next` is the record of `previous`'s stream right after it, by `next`'s own
/// chain: the same stream, the next index, its nearest jump leading to `previous`, starting
/// where `previous` ends, later in the log. Each record names one predecessor, so records
/// linked this way from a record back to one the chain reached are the chain's own.
pub(crate) fn follows(previous: &Node, next: &Node) -> bool {
    next.stream == previous.stream
        && next.n == previous.n.next()
        && next.jumps.first() == Some(&previous.location)
        && next.start == previous.end
        && next.location > previous.location
}

/// The record `from`'s jump `k` leads to, checked to be the one the chain names.
pub(crate) fn hop<S: NodeSource>(source: &S, from: &Node, k: usize) -> Result<Node, S::Error> {
    let location = *from.jumps.get(k).ok_or(Broken)?;
    let n = from.n.back(1 << k).ok_or(Broken)?;
    if location >= from.location {
        return Err(Broken.into());
    }
    let target = source.node(location)?;
    // (Where record 0 starts is the reader's to check: a fork's starts after its inherited
    // bytes.)
    let ends_right = if k == 0 { target.end == from.start } else { target.end <= from.start };
    if target.stream != from.stream || target.n != n || !ends_right {
        return Err(Broken.into());
    }
    Ok(target)
}

/// The writer's view of a chain: enough to give the next record its jumps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Levels {
    /// The index the next record gets.
    next: ChainIndex,
    /// Location of record 0.
    first: Location,
    /// `latest[k]`: location of the latest record with a non-zero index that is a multiple of
    /// `2^k` (record 0 stands in when there is none).
    latest: Vec<Location>,
}

impl Levels {
    /// A chain whose only record, the create, is at `location`.
    pub(crate) fn started_at(location: Location) -> Levels {
        Levels { next: ChainIndex::CREATE.next(), first: location, latest: Vec::new() }
    }

    pub(crate) fn next_index(&self) -> ChainIndex {
        self.next
    }

    /// Location of the chain's last record.
    pub(crate) fn last(&self) -> Location {
        if self.next <= ChainIndex::CREATE.next() {
            self.first
        } else {
            self.latest.first().copied().unwrap_or(self.first)
        }
    }

    /// The chain entry of the next record.
    pub(crate) fn next_chain(&self) -> Chain {
        let n = self.next;
        let jumps = (0..jump_count(n)).map(|k| self.latest.get(k).copied().unwrap_or(self.first)).collect();
        Chain { n, jumps }
    }

    /// Records that the next record was written at `location`.
    pub(crate) fn push(&mut self, location: Location) {
        let n = self.next;
        debug_assert!(!n.is_create(), "the create starts a chain");
        let levels = n.trailing_zeros() as usize + 1;
        if self.latest.len() < levels {
            self.latest.resize(levels, self.first);
        }
        self.latest[..levels].fill(location);
        self.next = n.next();
    }

    /// Rebuilds the levels of a chain whose last record is `tail`.
    pub(crate) fn rebuild<S: NodeSource>(source: &S, tail: &Node) -> Result<Levels, S::Error> {
        let mut latest = Vec::new();
        // The index's bits say which jumps lead back to record 0.
        let (mut index, mut location) = (tail.n.raw(), tail.location);
        let mut level = 0;
        let mut node = tail.clone();
        while index > 0 {
            latest.push(location);
            if index & (1 << level) != 0 {
                node = hop(source, &node, level)?;
                location = node.location;
                index -= 1 << level;
            }
            level += 1;
        }
        debug_assert!(node.n.is_create(), "the rebuild ends at the create");
        Ok(Levels { next: tail.n.next(), first: location, latest })
    }
}

/// The last record whose start is at or before `target_bytes`, searching back from `tail`.
/// (Records without data share their start with their successor; the later one wins.)
pub(crate) fn find<S: NodeSource>(source: &S, tail: &Node, target_bytes: u64) -> Result<Node, S::Error> {
    find_last(source, tail, |node| node.start.bytes <= target_bytes)
}

/// The record with index `n` (at most `tail.n`).
pub(crate) fn find_index<S: NodeSource>(source: &S, tail: &Node, n: ChainIndex) -> Result<Node, S::Error> {
    debug_assert!(n <= tail.n);
    find_last(source, tail, |node| node.n <= n)
}

/// The last record (searching back from `tail`) that satisfies `keep`, which must hold for
/// record 0 and for every record before one it holds for.
pub(crate) fn find_last<S: NodeSource>(
    source: &S,
    tail: &Node,
    keep: impl Fn(&Node) -> bool,
) -> Result<Node, S::Error> {
    let mut current = tail.clone();
    while !keep(&current) {
        debug_assert!(!current.n.is_create(), "the predicate holds for record 0");
        let mut nearest = None;
        let mut farther = None;
        for step in (0..current.jumps.len()).rev() {
            let candidate = hop(source, &current, step)?;
            if !keep(&candidate) {
                farther = Some(candidate);
                break;
            }
            if step == 0 {
                nearest = Some(candidate);
            }
        }
        match (farther, nearest) {
            (Some(candidate), _) => current = candidate,
            (None, Some(previous)) => return Ok(previous),
            (None, None) => return Err(Broken.into()),
        }
    }
    Ok(current)
}

/// Why [`find_last_tolerant`] could not reach its record: the chain is unreadable right
/// before a record past it. `below` is the nearest readable record known to satisfy the
/// predicate, from which a reader may scan the log forward.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Blocked {
    pub below: Option<Node>,
}

/// [`find_last`] that steps around records it cannot read or that are not what their
/// chain names, taking a shorter jump instead; it gives up only when the record right
/// before one past the target is out of reach.
pub(crate) fn find_last_tolerant<S: NodeSource>(
    source: &S,
    tail: &Node,
    keep: impl Fn(&Node) -> bool,
) -> Result<Node, Blocked> {
    let mut current = tail.clone();
    let mut below: Option<Node> = None;
    while !keep(&current) {
        let mut nearest = None;
        let mut farther = None;
        for step in (0..current.jumps.len()).rev() {
            let Ok(candidate) = hop(source, &current, step) else {
                continue;
            };
            if !keep(&candidate) {
                farther = Some(candidate);
                break;
            }
            if step == 0 {
                nearest = Some(candidate);
            } else if below.as_ref().is_none_or(|known| known.n < candidate.n) {
                below = Some(candidate);
            }
        }
        match (farther, nearest) {
            (Some(candidate), _) => current = candidate,
            (None, Some(previous)) => return Ok(previous),
            (None, None) => return Err(Blocked { below }),
        }
    }
    Ok(current)
}

/// The records from `first` to `last` (inclusive, same chain), walking back from `last`,
/// each checked to end where the next one starts. `limit` bounds the walk; the result is in
/// chain order.
pub(crate) fn collect<S: NodeSource>(
    source: &S,
    first: &Node,
    last: Node,
    limit: usize,
) -> Result<Vec<Node>, S::Error> {
    if last.n < first.n || last.stream != first.stream {
        return Err(Broken.into());
    }
    let mut nodes = vec![last];
    while let Some(current) = nodes.last() {
        if current.n <= first.n || nodes.len() >= limit {
            break;
        }
        let previous = if current.n == first.n.next() {
            if current.jumps.first() != Some(&first.location) || first.end != current.start {
                return Err(Broken.into());
            }
            first.clone()
        } else {
            hop(source, current, 0)?
        };
        nodes.push(previous);
    }
    nodes.reverse();
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A chain built with `Levels` over records of the given data sizes (locations = index × 10).
    struct Model {
        nodes: Vec<Node>,
        reads: Cell<usize>,
        /// Locations that read as damaged.
        damaged: Vec<Location>,
    }

    impl NodeSource for Model {
        type Error = Broken;
        fn node(&self, location: Location) -> Result<Node, Broken> {
            self.reads.set(self.reads.get() + 1);
            if self.damaged.contains(&location) {
                return Err(Broken);
            }
            self.nodes.get((location.raw() / 10) as usize).cloned().ok_or(Broken)
        }
    }

    fn model(sizes: &[u64]) -> Model {
        let mut nodes = vec![node(0, 0, Offset::ZERO, Offset::ZERO, vec![])];
        let mut levels = Levels::started_at(at(0));
        for size in sizes {
            let chain = levels.next_chain();
            let start = nodes.last().unwrap().end;
            let end = start.advance(u64::from(*size > 0), *size);
            let location = chain.n.raw() * 10;
            nodes.push(node(location, chain.n.raw(), start, end, chain.jumps));
            levels.push(at(location));
        }
        Model { nodes, reads: Cell::new(0), damaged: Vec::new() }
    }

    fn node(location: u64, n: u64, start: Offset, end: Offset, jumps: Vec<Location>) -> Node {
        let stored = Stored::default();
        let n = ChainIndex::from_raw(n);
        Node { location: at(location), n, stream: StreamId::from_raw(1), start, end, jumps, len: 10, stored }
    }

    fn at(raw: u64) -> Location {
        Location::from_raw(raw)
    }

    #[test]
    fn jumps_point_at_the_right_records() {
        let chain = model(&[1; 64]);
        for node in &chain.nodes {
            let expected: Vec<Location> =
                (0..jump_count(node.n)).map(|j| at((node.n.raw() - (1 << j)) * 10)).collect();
            assert_eq!(node.jumps, expected, "record {}", node.n);
        }
        assert_eq!(jump_count(ChainIndex::CREATE), 0);
        assert_eq!(jump_count(ChainIndex::from_raw(12)), 3);
    }

    #[test]
    fn find_agrees_with_a_linear_scan() {
        let sizes: Vec<u64> = (0..300u64).map(|i| [0, 5, 1, 17, 3][(i * 7 % 5) as usize]).collect();
        let chain = model(&sizes);
        let tail = chain.nodes.last().unwrap().clone();
        for target in 0..=tail.end.bytes {
            let expected = chain.nodes.iter().rev().find(|n| n.start.bytes <= target).unwrap();
            assert_eq!(find(&chain, &tail, target).unwrap().n, expected.n, "target {target}");
        }
    }

    #[test]
    fn find_index_lands_on_every_index() {
        let chain = model(&vec![1; 200]);
        let tail = chain.nodes.last().unwrap().clone();
        for n in (0..=tail.n.raw()).map(ChainIndex::from_raw) {
            assert_eq!(find_index(&chain, &tail, n).unwrap().n, n);
        }
    }

    #[test]
    fn find_reads_few_records_on_long_chains() {
        let chain = model(&vec![3; 100_000]);
        let tail = chain.nodes.last().unwrap().clone();
        let mut worst = 0;
        for target in (0..300_000).step_by(977) {
            chain.reads.set(0);
            find(&chain, &tail, target).unwrap();
            worst = worst.max(chain.reads.get());
        }
        assert!(worst < 17 * 17, "{worst} reads");
    }

    #[test]
    fn collect_walks_back_in_order_and_respects_the_limit() {
        let chain = model(&[2; 40]);
        let first = chain.nodes[10].clone();
        let last = chain.nodes[20].clone();
        let walked: Vec<u64> =
            collect(&chain, &first, last.clone(), usize::MAX).unwrap().iter().map(|n| n.n.raw()).collect();
        assert_eq!(walked, (10..=20).collect::<Vec<_>>());
        assert_eq!(collect(&chain, &first, last, 3).unwrap().len(), 3);
        assert_eq!(collect(&chain, &first, first.clone(), 5).unwrap().len(), 1);
    }

    #[test]
    fn levels_rebuild_from_any_tail() {
        for length in [0usize, 1, 2, 3, 7, 8, 9, 100, 1023, 1024, 1025] {
            let chain = model(&vec![1; length]);
            let mut levels = Levels::started_at(at(0));
            for node in &chain.nodes[1..] {
                levels.push(node.location);
            }
            let tail = chain.nodes.last().unwrap();
            let rebuilt = Levels::rebuild(&chain, tail).unwrap();
            assert_eq!(rebuilt.next_chain(), levels.next_chain(), "length {length}");
            assert_eq!(rebuilt.next_index(), levels.next_index());
        }
    }

    #[test]
    fn a_jump_that_leads_elsewhere_is_refused() {
        let mut chain = model(&[1; 16]);
        let tail = chain.nodes[16].clone();
        // Record 12's nearest jump names record 9 instead of 11.
        chain.nodes[12].jumps[0] = at(90);
        assert_eq!(hop(&chain, &chain.nodes[12].clone(), 0), Err(Broken));
        assert_eq!(find(&chain, &tail, 10), Err(Broken), "the search never lands on record 9");
        assert_eq!(collect(&chain, &chain.nodes[8].clone(), tail.clone(), usize::MAX).err(), Some(Broken));
        // A record whose index was damaged is refused wherever a jump leads to it.
        let mut chain = model(&[1; 16]);
        chain.nodes[4].n = ChainIndex::from_raw(4 + (1 << 16));
        assert_eq!(hop(&chain, &chain.nodes[8].clone(), 2), Err(Broken));
        assert_eq!(hop(&chain, &chain.nodes[5].clone(), 0), Err(Broken));
        // Forward jumps and other streams' records never pass.
        let mut chain = model(&[1; 16]);
        chain.nodes[3].jumps[0] = at(150);
        assert_eq!(hop(&chain, &chain.nodes[3].clone(), 0), Err(Broken));
        chain.nodes[2].stream = StreamId::from_raw(7);
        assert_eq!(hop(&chain, &chain.nodes[4].clone(), 1), Err(Broken));
    }

    #[test]
    fn the_tolerant_search_steps_around_damage_or_says_where_it_stopped() {
        // Record 36 damaged: records 33 to 35 are reachable only through it; record 32 is
        // also named by record 40, but whether it is the last before 33 cannot be told.
        // Record 32 damaged: records 1 to 31 hang on it alone.
        for (damaged, blocked, below_n) in [(36u64, 31..=35u64, 32u64), (32, 0..=31, 0)] {
            let mut chain = model(&[1; 64]);
            let tail = chain.nodes[64].clone();
            chain.damaged = vec![at(damaged * 10)];
            for target in 0..64u64 {
                match find_last_tolerant(&chain, &tail, |node| node.start.bytes <= target) {
                    Ok(node) => {
                        assert!(!blocked.contains(&target), "damaged {damaged}, target {target}");
                        assert_eq!(node.n.raw(), target + 1, "damaged {damaged}, target {target}");
                    }
                    Err(Blocked { below }) => {
                        assert!(blocked.contains(&target), "damaged {damaged}, target {target}");
                        assert_eq!(below.map(|node| node.n.raw()), Some(below_n), "damaged {damaged}");
                    }
                }
            }
        }
    }
}
