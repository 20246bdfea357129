//! Seeded random operations over a small set of stream names.
//!
//! Each round is a handful of operations generated against the model's predicted state, so
//! producers mostly send the next sequence number (sometimes a retry, sometimes a new
//! epoch), some appends carry a `Stream-Seq` (mostly above the last, sometimes not), and
//! streams that near their byte limit get deleted. A round never both deletes
//! and creates the same name, so every write changes what can be observed of its stream
//! (existence, data, closed flag) and the oracle can tell each possible outcome apart.

use std::collections::{BTreeMap, BTreeSet};

use ds_engine::testing::SimRng;

use super::model::{is_json_name, predict, SimOp, State};

pub const NAMES: [&str; 8] = ["a", "b", "c", "d/e", "t1", "t2", "j1", "j2"];
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

/// Generates one round of `count` operations against `model` (which it does not change).
pub fn round(
    rng: &mut SimRng,
    model: &BTreeMap<String, State>,
    count: usize,
    stream_bytes_max: u64,
) -> Vec<SimOp> {
    let mut predicted = model.clone();
    let mut deleted = BTreeSet::new();
    let mut created = BTreeSet::new();
    let mut ops = Vec::with_capacity(count);
    for _attempt in 0..count * 50 {
        if ops.len() == count {
            break;
        }
        let name = pick(rng, &NAMES).to_string();
        let state = predicted.get(&name).cloned().flatten();
        let op = match (&state, rng.below(100)) {
            (None, _) if deleted.contains(&name) => continue,
            (None, roll) => {
                let initial = (roll < 30).then(|| body_for(rng, &name));
                SimOp::Create { name: name.clone(), initial }
            }
            (Some(stream), _) if stream.data.len() as u64 + BODY_BYTES_MAX * 2 > stream_bytes_max => {
                if created.contains(&name) {
                    continue;
                }
                SimOp::Delete { name: name.clone() }
            }
            (Some(_), roll) if roll < 8 && !created.contains(&name) => SimOp::Delete { name: name.clone() },
            (Some(stream), roll) if roll < 12 => SimOp::Append {
                name: name.clone(),
                body: Vec::new(),
                close: true,
                producer: None,
                stream_seq: next_stream_seq(rng, stream.stream_seq.as_deref()),
            },
            (Some(_), roll) if roll < 15 => SimOp::Create { name: name.clone(), initial: None },
            (Some(stream), roll) => {
                let producer = (roll < 50).then(|| next_producer(rng, &stream.producers));
                let close = rng.chance(3);
                let stream_seq = next_stream_seq(rng, stream.stream_seq.as_deref());
                SimOp::Append { name: name.clone(), body: body_for(rng, &name), close, producer, stream_seq }
            }
        };
        let prediction = predict(&predicted.get(&name).cloned().flatten(), &op, stream_bytes_max);
        if let Some(after) = prediction.written {
            match &op {
                SimOp::Delete { .. } => deleted.insert(name.clone()),
                SimOp::Create { .. } => created.insert(name.clone()),
                SimOp::Append { .. } => false,
            };
            predicted.insert(name, after);
        }
        ops.push(op);
    }
    ops
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
