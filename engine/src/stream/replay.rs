//! A stream's durable state rebuilt from its records, for every disk mode's recovery.
//!
//! A create record starts a [`StreamSnapshot`]; each append must continue it exactly (its
//! offset is the stream's tail, its chain index is the next one and links to the stream's
//! last record, the stream is not closed) and then moves the tail, the closed flag, the
//! `Stream-Seq` and its producer's state forward. Anything else is refused with a reason,
//! and recovery stops there.

use std::sync::Arc;

use super::StreamSnapshot;
use crate::producer::ProducerState;
use crate::record::codec::{flags, Header, Kind, Meta};

/// The stream a create record (`header`, `meta`) at `at` starts.
pub fn created(header: &Header, meta: &Meta, at: u64) -> Result<StreamSnapshot, &'static str> {
    if header.kind != Kind::Create {
        return Err("not a create record");
    }
    let create = meta.create.as_ref().ok_or("create without configuration")?;
    let chain = meta.chain.as_ref().ok_or("create without chain")?;
    if chain.n != 0 {
        return Err("create that is not the first record of its chain");
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
        chain_n: 0,
        damage: None,
    })
}

/// Applies the append record (`header`, `meta`) at `at` to `stream`, if it continues it.
pub fn append(
    stream: &mut StreamSnapshot,
    header: &Header,
    meta: &Meta,
    at: u64,
) -> Result<(), &'static str> {
    if header.kind != Kind::Append {
        return Err("not an append record");
    }
    let chain = meta.chain.as_ref().ok_or("append without chain")?;
    let continues = header.stream == stream.id
        && header.offset == stream.tail
        && chain.n == stream.chain_n + 1
        && chain.jumps.first() == Some(&stream.chain_tail)
        && !stream.closed;
    if !continues {
        return Err("append does not continue its stream");
    }
    stream.tail = header.end_offset();
    stream.closed |= header.has(flags::CLOSE);
    stream.last_access_ms = stream.last_access_ms.max(header.time_ms);
    stream.chain_tail = at;
    stream.chain_n = chain.n;
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
    Ok(())
}
