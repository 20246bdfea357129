//! A stream's durable state rebuilt from its records, for every disk mode's recovery.
//!
//! A create record starts a [`StreamSnapshot`]; each append must continue it exactly (its
//! offset is the stream's tail, its chain index is the next one and links to the stream's
//! last record, the stream is not closed) and then moves the tail, the closed flag, the
//! `Stream-Seq` and its producer's state forward. Anything else is refused with a reason.
//!
//! Damage is not a reason to stop: a stream whose records do not follow on (one was lost or
//! damaged in between) is marked damaged ([`mark_damaged`]) where its intact data ends, and
//! its later records are applied as they come ([`append_after_damage`], or [`skip_damaged`]
//! for a record whose header holds but whose payload does not), so the stream keeps its tail,
//! its chain and everything it stores after the damage.

use std::sync::Arc;

use crate::ids::{ChainIndex, Location};
use crate::limits::tag_bytes;
use crate::meta::{ForkRef, StreamDamage, StreamSnapshot};
use crate::offset::Offset;
use crate::producer::ProducerState;
use crate::storage::chain::Chain;
use crate::storage::record::codec::{flags, Header, Kind, Meta};

/// The stream a create record (`header`, `meta`) at `at` starts.
pub(crate) fn created(header: &Header, meta: &Meta, at: Location) -> Result<StreamSnapshot, &'static str> {
    if header.kind != Kind::Create {
        return Err("not a create record");
    }
    let create = meta.create.as_ref().ok_or("create without configuration")?;
    let chain = meta.chain.as_ref().ok_or("create without chain")?;
    if !chain.n.is_create() {
        return Err("create that is not the first record of its chain");
    }
    if header.offset != create.fork.as_ref().map_or(Offset::ZERO, ForkRef::start) {
        return Err("create that does not start where its stream does (a fork after its source's bytes)");
    }
    Ok(StreamSnapshot {
        id: header.stream,
        name: Arc::from(&*create.name),
        config: create.config.clone(),
        last_access_ms: header.time_ms,
        tail: header.end_offset(),
        closed: header.has(flags::CLOSE),
        stream_seq: None,
        producers: Vec::new(),
        chain_tail: at,
        chain_n: ChainIndex::CREATE,
        tag_bytes: 0,
        damage: None,
        fork: create.fork.clone(),
        deleted: false,
    })
}

/// Applies a delete record (`header`): a soft one keeps the stream, marked deleted; whether
/// the stream is gone for good.
pub(crate) fn deleted(stream: &mut StreamSnapshot, header: &Header) -> bool {
    debug_assert_eq!(header.kind, Kind::Delete);
    if header.has(flags::SOFT) {
        stream.deleted = true;
        return false;
    }
    true
}

/// Notes damage at `at` (the first note stays).
pub(crate) fn mark_damaged(stream: &mut StreamSnapshot, at: Offset, reason: String) {
    if stream.damage.is_none() {
        stream.damage = Some(StreamDamage { at, reason: reason.into() });
    }
}

/// Applies the append record (`header`, `meta`) at `at` to a stream already marked damaged:
/// it need only be the stream's and later in its chain.
pub(crate) fn append_after_damage(
    stream: &mut StreamSnapshot,
    header: &Header,
    meta: &Meta,
    at: Location,
) -> Result<(), &'static str> {
    debug_assert!(stream.damage.is_some(), "only a damaged stream is applied loosely");
    let chain = meta.chain.as_ref().ok_or("append without chain")?;
    let later = header.stream == stream.id && chain.n > stream.chain_n && header.offset >= stream.tail;
    if header.kind != Kind::Append || !later {
        return Err("append that cannot follow its stream");
    }
    move_forward(stream, header, meta, at, chain.n);
    Ok(())
}

/// Steps a damaged stream over its append record (`header`) at `at`, whose payload fails
/// its checks: the tail and chain move on, nothing else is known.
pub(crate) fn skip_damaged(stream: &mut StreamSnapshot, header: &Header, at: Location) {
    if header.offset >= stream.tail {
        stream.tail = header.end_offset();
        stream.closed |= header.has(flags::CLOSE);
        stream.chain_tail = at;
        stream.chain_n = stream.chain_n.next();
    }
}

/// Applies the append record (`header`, `meta`) at `at` to `stream`, if it continues it;
/// else says exactly how it does not (a damage report names the cause, not a guess).
pub(crate) fn append(
    stream: &mut StreamSnapshot,
    header: &Header,
    meta: &Meta,
    at: Location,
) -> Result<(), String> {
    if header.kind != Kind::Append {
        return Err("not an append record".into());
    }
    let chain = meta.chain.as_ref().ok_or("append without chain")?;
    if let Some(why) = discontinuity(stream, header, chain) {
        return Err(why);
    }
    move_forward(stream, header, meta, at, chain.n);
    Ok(())
}

/// How an append record (`header`, its `chain`) fails to continue `stream`, if it does.
fn discontinuity(stream: &StreamSnapshot, header: &Header, chain: &Chain) -> Option<String> {
    let (tail, next) = (stream.tail, stream.chain_n.next());
    let why = if header.stream != stream.id {
        format!("it belongs to stream {}, not {}", header.stream, stream.id)
    } else if stream.closed {
        "the stream was closed before it".to_string()
    } else if header.offset > tail {
        format!(
            "it starts at {}, past the stream's tail {tail} (what lies between is missing)",
            header.offset
        )
    } else if header.offset < tail {
        format!("it starts at {}, before the stream's tail {tail}", header.offset)
    } else if chain.n != next {
        format!("it is record {} of the stream's chain where {next} was expected", chain.n)
    } else if chain.jumps.first() != Some(&stream.chain_tail) {
        let linked = chain.jumps.first().map_or_else(|| "nothing".to_string(), |l| format!("{l:?}"));
        format!("it links back to {linked}, not to the stream's last record, {:?}", stream.chain_tail)
    } else {
        return None;
    };
    Some(format!("append does not continue its stream: {why}"))
}

/// Moves `stream` past its append record (`header`, `meta`, chain index `n`) at `at`.
fn move_forward(stream: &mut StreamSnapshot, header: &Header, meta: &Meta, at: Location, n: ChainIndex) {
    stream.tail = header.end_offset();
    stream.closed |= header.has(flags::CLOSE);
    stream.last_access_ms = stream.last_access_ms.max(header.time_ms);
    stream.chain_tail = at;
    stream.chain_n = n;
    stream.tag_bytes += tag_bytes(meta.producer.as_ref().map(|tag| &*tag.id), meta.stream_seq.as_deref());
    if let Some(seq) = &meta.stream_seq {
        stream.stream_seq = Some(seq.clone());
    }
    if let Some(tag) = &meta.producer {
        let state = ProducerState { epoch: tag.epoch, last_seq: tag.seq, last_used_ms: header.time_ms };
        match stream.producers.iter_mut().find(|(id, _)| *id == tag.id) {
            Some((_, existing)) => *existing = state,
            None => stream.producers.push((tag.id.clone(), state)),
        }
    }
}
