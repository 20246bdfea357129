//! The oracle's model: what a stream holds, and what each operation does to it.
//!
//! The model follows the protocol's rules for the operations the workload sends (creates
//! with a fixed configuration per name, plain and JSON appends, producer appends that are in
//! sequence, retried or start a new epoch, `Stream-Seq`s that rise or regress, closes,
//! forks, deletes — soft while forks read the stream —, and TTLs running out) and predicts,
//! for each one, whether it succeeds and whether it writes a record. The simulation checks
//! every acknowledged answer against the prediction. A soft-deleted stream that no fork
//! reads any more goes for good ([`collect_cascades`]), as the engine's cascade does.

use std::collections::BTreeMap;

use bytes::Bytes;
use ds_engine::Payload;

/// Producer state: epoch and last sequence number.
pub(crate) type ProducerState = (u64, u64);

/// A stream as the model knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ModelStream {
    pub json: bool,
    pub ttl_secs: Option<u64>,
    /// The stored bytes: plain bodies, or each JSON message followed by `,`.
    pub data: Vec<u8>,
    /// Where each message ends in `data` (as many as the stream has messages).
    pub ends: Vec<u64>,
    pub closed: bool,
    pub producers: BTreeMap<String, ProducerState>,
    /// The last accepted `Stream-Seq`.
    pub stream_seq: Option<String>,
    /// The stream a fork was forked from, and how many of its bytes it inherited.
    pub parent: Option<String>,
    pub inherited_bytes: u64,
    /// Soft-deleted: forks still read it.
    pub deleted: bool,
}

/// A stream's state: absent, or present.
pub(crate) type State = Option<ModelStream>;

/// One operation of the workload.
#[derive(Clone, Debug)]
pub(crate) enum SimOp {
    Create {
        name: String,
        initial: Option<Vec<u8>>,
    },
    Append {
        name: String,
        body: Vec<u8>,
        close: bool,
        producer: Option<(String, u64, u64)>,
        stream_seq: Option<String>,
    },
    Delete {
        name: String,
    },
    /// A fork of `source` at its tail, or at a message boundary plus a sub-offset (bytes of
    /// the next message, or messages of a JSON stream); `inherited` is what the source held
    /// there when the round began, bytes and message ends (`None`: it was absent or
    /// soft-deleted).
    Fork {
        name: String,
        source: String,
        at: Option<ForkAt>,
        inherited: Option<Inherited>,
    },
}

/// What a fork inherits: its source's bytes up to the fork point, and where each message
/// ends in them.
pub(crate) type Inherited = (Vec<u8>, Vec<u64>);

/// A fork point other than the tail: a boundary (messages and bytes before it) and a
/// sub-offset.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ForkAt {
    pub messages: u64,
    pub bytes: u64,
    pub sub_offset: u64,
}

impl SimOp {
    pub(crate) fn name(&self) -> &str {
        match self {
            SimOp::Create { name, .. }
            | SimOp::Append { name, .. }
            | SimOp::Delete { name }
            | SimOp::Fork { name, .. } => name,
        }
    }
}

/// How many streams of `model` (soft-deleted ones too) were forked from `name`.
pub(crate) fn forks_of(model: &BTreeMap<String, State>, name: &str) -> u64 {
    model.values().flatten().filter(|stream| stream.parent.as_deref() == Some(name)).count() as u64
}

/// Removes every soft-deleted stream that no fork reads any more, up the chains.
pub(crate) fn collect_cascades(model: &mut BTreeMap<String, State>) {
    loop {
        let unread = model.iter().find_map(|(name, state)| {
            let deleted = state.as_ref().is_some_and(|stream| stream.deleted);
            (deleted && forks_of(model, name) == 0).then(|| name.clone())
        });
        match unread {
            Some(name) => model.insert(name, None),
            None => return,
        };
    }
}

/// What an operation is expected to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Prediction {
    /// The answer is a success (2xx).
    pub ok: bool,
    /// A success that is a producer duplicate (nothing written).
    pub duplicate: bool,
    /// The state after the operation, when it writes a record.
    pub written: Option<State>,
}

impl Prediction {
    fn refused() -> Prediction {
        Prediction { ok: false, duplicate: false, written: None }
    }

    fn accepted(written: Option<State>) -> Prediction {
        Prediction { ok: true, duplicate: false, written }
    }
}

/// Streams whose name starts with `j` hold JSON; with `t`, they have a TTL.
pub(crate) fn is_json_name(name: &str) -> bool {
    name.starts_with('j')
}

pub(crate) fn ttl_of_name(name: &str) -> Option<u64> {
    name.starts_with('t').then_some(super::TTL_SECS)
}

/// The engine's payload for `body` on a stream of this kind.
pub(crate) fn payload(json: bool, body: &[u8]) -> Payload {
    let bytes = Bytes::copy_from_slice(body);
    if json {
        Payload::json(bytes, true).expect("the workload sends valid JSON")
    } else {
        Payload::raw(bytes)
    }
}

/// The bytes `body` adds to a stream's stored data, and each message's length.
fn stored_bytes(json: bool, body: &[u8]) -> (Vec<u8>, Vec<u64>) {
    if !json {
        return (body.to_vec(), vec![body.len() as u64]);
    }
    let value: serde_json::Value = serde_json::from_slice(body).expect("valid JSON");
    let messages = match value {
        serde_json::Value::Array(items) => items,
        single => vec![single],
    };
    let mut stored = Vec::new();
    let mut lengths = Vec::new();
    for message in &messages {
        let text = serde_json::to_string(message).expect("serializes");
        stored.extend_from_slice(text.as_bytes());
        stored.push(b',');
        lengths.push(text.len() as u64 + 1);
    }
    (stored, lengths)
}

/// `ends` with messages of `lengths` after them.
fn extend_ends(ends: &mut Vec<u64>, lengths: &[u64]) {
    let mut end = ends.last().copied().unwrap_or(0);
    for length in lengths {
        end += length;
        ends.push(end);
    }
}

/// Predicts `op` against `state` with the stream byte limit `stream_bytes_max`; `forks`:
/// how many forks read the stream (a round never changes that and deletes the stream).
pub(crate) fn predict(state: &State, op: &SimOp, stream_bytes_max: u64, forks: u64) -> Prediction {
    if state.as_ref().is_some_and(|stream| stream.deleted) {
        // Gone for clients, its name held for its forks.
        return Prediction::refused();
    }
    match op {
        SimOp::Fork { name, source, inherited, .. } => match (state, inherited) {
            (None, Some((data, ends))) => Prediction::accepted(Some(Some(ModelStream {
                json: is_json_name(name),
                ttl_secs: ttl_of_name(name),
                data: data.clone(),
                ends: ends.clone(),
                closed: false,
                producers: BTreeMap::new(),
                stream_seq: None,
                parent: Some(source.clone()),
                inherited_bytes: data.len() as u64,
                deleted: false,
            }))),
            _ => Prediction::refused(),
        },
        SimOp::Create { name, initial } => match state {
            // A create without a fork origin is not the fork's create.
            Some(stream) if stream.closed || stream.parent.is_some() => Prediction::refused(),
            Some(_) => Prediction::accepted(None),
            None => {
                let json = is_json_name(name);
                let (data, lengths) =
                    initial.as_deref().map_or((Vec::new(), Vec::new()), |body| stored_bytes(json, body));
                let mut ends = Vec::new();
                extend_ends(&mut ends, &lengths);
                let created = ModelStream {
                    json,
                    ttl_secs: ttl_of_name(name),
                    data,
                    ends,
                    closed: false,
                    producers: BTreeMap::new(),
                    stream_seq: None,
                    parent: None,
                    inherited_bytes: 0,
                    deleted: false,
                };
                Prediction::accepted(Some(Some(created)))
            }
        },
        SimOp::Delete { .. } => match state {
            Some(stream) if forks > 0 => {
                Prediction::accepted(Some(Some(ModelStream { deleted: true, ..stream.clone() })))
            }
            Some(_) => Prediction::accepted(Some(None)),
            None => Prediction::refused(),
        },
        SimOp::Append { body, close, producer, stream_seq, .. } => match state {
            None => Prediction::refused(),
            Some(stream) => {
                let tags = (producer.as_ref(), stream_seq.as_deref());
                predict_append(stream, body, *close, tags, stream_bytes_max)
            }
        },
    }
}

/// An append's producer tag and `Stream-Seq`.
type Tags<'a> = (Option<&'a (String, u64, u64)>, Option<&'a str>);

fn predict_append(
    stream: &ModelStream,
    body: &[u8],
    close: bool,
    (producer, stream_seq): Tags<'_>,
    stream_bytes_max: u64,
) -> Prediction {
    if let Some((id, epoch, seq)) = producer {
        match stream.producers.get(id) {
            Some((current, _)) if epoch < current => return Prediction::refused(),
            Some((current, last)) if epoch == current && *seq <= *last => {
                return Prediction { ok: true, duplicate: true, written: None };
            }
            Some((current, last)) if epoch == current && *seq != last + 1 => return Prediction::refused(),
            None if *seq != 0 => return Prediction::refused(),
            Some((current, _)) if epoch > current && *seq != 0 => return Prediction::refused(),
            _ => {}
        }
    }
    if stream.closed {
        let idempotent_close = body.is_empty() && producer.is_none();
        return if idempotent_close { Prediction::accepted(None) } else { Prediction::refused() };
    }
    if let (Some(seq), Some(last)) = (stream_seq, &stream.stream_seq) {
        if seq <= last.as_str() {
            return Prediction::refused();
        }
    }
    let (stored, lengths) =
        if body.is_empty() { (Vec::new(), Vec::new()) } else { stored_bytes(stream.json, body) };
    // The limit counts a stream's own bytes (a fork's inherited ones are its source's).
    if stream.data.len() as u64 - stream.inherited_bytes + stored.len() as u64 > stream_bytes_max {
        return Prediction::refused();
    }
    let mut after = stream.clone();
    after.data.extend_from_slice(&stored);
    extend_ends(&mut after.ends, &lengths);
    after.closed |= close;
    if let Some((id, epoch, seq)) = producer {
        after.producers.insert(id.clone(), (*epoch, *seq));
    }
    if let Some(seq) = stream_seq {
        after.stream_seq = Some(seq.to_string());
    }
    Prediction::accepted(Some(Some(after)))
}

/// What can be observed of a stream through the engine (everything but producer state,
/// which later answers check).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Observed {
    pub json: bool,
    pub ttl_secs: Option<u64>,
    pub data: Vec<u8>,
    pub messages: u64,
    pub closed: bool,
    pub deleted: bool,
}

impl std::fmt::Debug for Observed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tail = &self.data[self.data.len().saturating_sub(12)..];
        write!(
            f,
            "{{json {}, ttl {:?}, {} messages, {} bytes ending {:?}, closed {}, deleted {}}}",
            self.json,
            self.ttl_secs,
            self.messages,
            self.data.len(),
            String::from_utf8_lossy(tail),
            self.closed,
            self.deleted
        )
    }
}

impl ModelStream {
    pub(crate) fn observed(&self) -> Observed {
        Observed {
            json: self.json,
            ttl_secs: self.ttl_secs,
            data: self.data.clone(),
            messages: self.ends.len() as u64,
            closed: self.closed,
            deleted: self.deleted,
        }
    }
}
