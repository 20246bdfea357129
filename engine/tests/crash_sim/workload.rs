//! Seeded random operations over a small set of stream names.
//!
//! Each round is a handful of operations generated against the model's predicted state, so
//! producers mostly send the next sequence number (sometimes a retry, sometimes a new
//! epoch), some appends carry a `Stream-Seq` (mostly above the last, sometimes not),
//! absent names are sometimes forks of another stream of their kind, and streams that near
//! their byte limit get deleted. A round never both deletes and creates the same name, so
//! every write changes what can be observed of its stream (existence, data, closed and
//! deleted flags) and the oracle can tell each possible outcome apart. A fork is the only
//! op on its name in its round (its create reaches the shard after the fork point is
//! checked), and a stream whose fork count changes in a round (forked, or a fork of it
//! deleted) is not deleted in that round, so whether a delete is soft is known up front.

use std::collections::{BTreeMap, BTreeSet};

use ds_engine::testing::SimRng;

use super::model::{
    forks_of, is_json_name, predict, ttl_of_name, ForkAt, Inherited, ModelStream, SimOp, State,
};

pub(crate) const NAMES: [&str; 8] = ["a", "b", "c", "d/e", "t1", "t2", "j1", "j2"];
const PRODUCERS: [&str; 2] = ["p1", "p2"];
const BODY_BYTES_MAX: u64 = 700;

fn pick<'a>(rng: &mut SimRng, items: &[&'a str]) -> &'a str {
    items[rng.below(items.len() as u64) as usize]
}

fn plain_body(rng: &mut SimRng) -> Vec<u8> {
    let len = 1 + rng.below(BODY_BYTES_MAX) as usize;
    let fill = b'a' + rng.below(26) as u8;
    (0..len).map(|i| if i % 37 == 36 { b'\n' } else { fill + (i % 3) as u8 }).collect()
}

fn json_body(rng: &mut SimRng) -> Vec<u8> {
    let count = 1 + rng.below(3);
    let items: Vec<String> = (0..count)
        .map(|_| format!("{{\"n\":{},\"s\":\"x{}\"}}", rng.below(1 << 40), rng.below(99)))
        .collect();
    if count == 1 && rng.chance(50) {
        items[0].clone().into_bytes()
    } else {
        format!("[{}]", items.join(",")).into_bytes()
    }
}

fn body_for(rng: &mut SimRng, name: &str) -> Vec<u8> {
    if is_json_name(name) {
        json_body(rng)
    } else {
        plain_body(rng)
    }
}

/// What a round has done so far, for the rules that keep each name's outcome independent
/// of the order in which the shards run.
#[derive(Default)]
struct RoundSoFar {
    deleted: BTreeSet<String>,
    created: BTreeSet<String>,
    /// Forks made this round (nothing else touches them: their create comes late).
    forked: BTreeSet<String>,
    /// Sources forked this round: their fork counts change, so they are not deleted in the
    /// same round.
    counts_change: BTreeSet<String>,
    /// Names an op of this round touched.
    touched: BTreeSet<String>,
    /// The ancestors of forks deleted this round, which a cascade may remove at any point
    /// of the round: nothing else touches them.
    frozen: BTreeSet<String>,
}

/// The streams `name` was forked from, nearest first, as `model` holds them.
fn ancestors(model: &BTreeMap<String, State>, name: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut at = name.to_string();
    while let Some(parent) = model.get(&at).cloned().flatten().and_then(|stream| stream.parent) {
        if found.contains(&parent) || found.len() > NAMES.len() {
            break;
        }
        found.push(parent.clone());
        at = parent;
    }
    found
}

/// Generates one round of `count` operations against `model` (which it does not change).
pub(crate) fn round(
    rng: &mut SimRng,
    model: &BTreeMap<String, State>,
    count: usize,
    stream_bytes_max: u64,
) -> Vec<SimOp> {
    let mut predicted = model.clone();
    let mut so_far = RoundSoFar::default();
    let mut ops = Vec::with_capacity(count);
    for _attempt in 0..count * 50 {
        if ops.len() == count {
            break;
        }
        let name = pick(rng, &NAMES).to_string();
        if so_far.forked.contains(&name) || so_far.frozen.contains(&name) {
            continue;
        }
        let state = predicted.get(&name).cloned().flatten();
        let Some(op) = next_op(rng, model, &name, &state, &so_far, stream_bytes_max) else {
            continue;
        };
        let forks = forks_of(model, &name);
        let prediction = predict(&predicted.get(&name).cloned().flatten(), &op, stream_bytes_max, forks);
        match &op {
            SimOp::Fork { source, .. } => {
                so_far.forked.insert(name.clone());
                so_far.counts_change.insert(source.clone());
            }
            SimOp::Delete { .. } if prediction.written.is_some() => {
                let up = ancestors(model, &name);
                if up.iter().any(|ancestor| so_far.touched.contains(ancestor)) {
                    continue;
                }
                so_far.deleted.insert(name.clone());
                so_far.frozen.extend(up);
            }
            SimOp::Create { .. } if prediction.written.is_some() => {
                so_far.created.insert(name.clone());
            }
            _ => {}
        }
        so_far.touched.insert(name.clone());
        if let SimOp::Fork { source, .. } = &op {
            so_far.touched.insert(source.clone());
        }
        if let Some(after) = prediction.written {
            predicted.insert(name, after);
        }
        ops.push(op);
    }
    ops
}

/// One operation on `name` (now in `state`), or `None` when the round's rules leave none.
fn next_op(
    rng: &mut SimRng,
    model: &BTreeMap<String, State>,
    name: &str,
    state: &State,
    so_far: &RoundSoFar,
    stream_bytes_max: u64,
) -> Option<SimOp> {
    let name = name.to_string();
    let roll = rng.below(100);
    let deletable = !so_far.created.contains(&name) && !so_far.counts_change.contains(&name);
    Some(match state {
        None if so_far.deleted.contains(&name) => return None,
        None if roll < 35 => fork_of(rng, model, &name, so_far)?,
        None => {
            let initial = (roll < 60).then(|| body_for(rng, &name));
            SimOp::Create { name, initial }
        }
        Some(stream) if stream.deleted => match roll {
            0..=30 => SimOp::Delete { name },
            31..=60 => SimOp::Create { name, initial: None },
            _ => SimOp::Append {
                body: body_for(rng, &name),
                name,
                close: false,
                producer: None,
                stream_seq: None,
            },
        },
        Some(stream)
            if stream.data.len() as u64 - stream.inherited_bytes + BODY_BYTES_MAX * 2 > stream_bytes_max =>
        {
            if !deletable {
                return None;
            }
            SimOp::Delete { name }
        }
        Some(_) if roll < 8 && deletable => SimOp::Delete { name },
        Some(stream) if roll < 12 => SimOp::Append {
            name,
            body: Vec::new(),
            close: true,
            producer: None,
            stream_seq: next_stream_seq(rng, stream.stream_seq.as_deref()),
        },
        Some(_) if roll < 15 => SimOp::Create { name, initial: None },
        Some(stream) => {
            let producer = (roll < 50).then(|| next_producer(rng, &stream.producers));
            let close = rng.chance(3);
            let stream_seq = next_stream_seq(rng, stream.stream_seq.as_deref());
            SimOp::Append { body: body_for(rng, &name), name, close, producer, stream_seq }
        }
    })
}

/// A fork into `name` of another stream of its kind without a TTL (expiry is left to the
/// black-box tests), from what `model` held when the round began.
/// Sources deleted earlier in the round are left alone (the fork's count would reach them
/// after the delete).
fn fork_of(
    rng: &mut SimRng,
    model: &BTreeMap<String, State>,
    name: &str,
    so_far: &RoundSoFar,
) -> Option<SimOp> {
    let sources: Vec<&str> = NAMES
        .iter()
        .copied()
        .filter(|source| *source != name && is_json_name(source) == is_json_name(name))
        .filter(|source| ttl_of_name(source).is_none() && !so_far.deleted.contains(*source))
        .filter(|source| !so_far.frozen.contains(*source))
        .collect();
    if sources.is_empty() {
        return None;
    }
    let source = pick(rng, &sources).to_string();
    let (at, inherited) = match model.get(&source).cloned().flatten() {
        Some(stream) if !stream.deleted => fork_point(rng, &stream),
        _ => (None, None),
    };
    Some(SimOp::Fork { name: name.to_string(), source, at, inherited })
}

/// Where a fork of `stream` starts: its tail, its start, a message boundary, or a boundary
/// and a sub-offset (some bytes of the next message of a plain stream, whole messages of a
/// JSON one); and what it inherits there (bytes and message ends).
fn fork_point(rng: &mut SimRng, stream: &ModelStream) -> (Option<ForkAt>, Option<Inherited>) {
    let messages = stream.ends.len() as u64;
    let roll = rng.below(100);
    if roll < 40 {
        return (None, Some((stream.data.clone(), stream.ends.clone())));
    }
    let boundary = if roll < 55 { 0 } else { rng.below(messages + 1) };
    let end_of = |message: u64| if message == 0 { 0 } else { stream.ends[message as usize - 1] };
    let left = messages - boundary;
    let sub_offset = if roll < 70 || left == 0 {
        0
    } else if stream.json {
        // Whole messages of a JSON stream.
        1 + rng.below(left)
    } else {
        // Bytes of the next message: most within it, some all of it.
        let length = end_of(boundary + 1) - end_of(boundary);
        if rng.chance(20) {
            length
        } else {
            1 + rng.below(length.max(2) - 1)
        }
    };
    let at = ForkAt { messages: boundary, bytes: end_of(boundary), sub_offset };
    let mut ends: Vec<u64> = stream.ends[..boundary as usize].to_vec();
    match stream.json {
        true => ends.extend_from_slice(&stream.ends[boundary as usize..(boundary + sub_offset) as usize]),
        false if sub_offset > 0 => ends.push(end_of(boundary) + sub_offset),
        false => {}
    }
    let cut = ends.last().copied().unwrap_or(0) as usize;
    (Some(at), Some((stream.data[..cut].to_vec(), ends)))
}

/// An append's `Stream-Seq`, if it carries one: usually above `last`, sometimes equal to it
/// or below it.
fn next_stream_seq(rng: &mut SimRng, last: Option<&str>) -> Option<String> {
    if !rng.chance(30) {
        return None;
    }
    let last: u64 = last.map_or(0, |seq| seq.parse().expect("the workload's own seqs"));
    let seq = match rng.below(100) {
        0..=9 => last,
        10..=14 => last.saturating_sub(1 + rng.below(3)),
        _ => last + 1 + rng.below(3),
    };
    Some(format!("{seq:06}"))
}

/// A producer's next request: usually in sequence, sometimes a retry or a new epoch.
fn next_producer(rng: &mut SimRng, producers: &BTreeMap<String, (u64, u64)>) -> (String, u64, u64) {
    let id = pick(rng, &PRODUCERS).to_string();
    let (epoch, seq) = match producers.get(&id) {
        None => (rng.below(3), 0),
        Some((epoch, last)) => match rng.below(100) {
            0..=9 => (*epoch, *last),
            10..=14 => (epoch + 1, 0),
            _ => (*epoch, last + 1),
        },
    };
    (id, epoch, seq)
}
