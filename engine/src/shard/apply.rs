//! Step 2 of the shard loop: deciding each op against the writer state and applying it.
//!
//! Every decision the spec makes about a create or an append lives here (the ops that end
//! or move a stream are in `removal`), in this order for appends:
//! the stream must exist and not be expired; a payload's content type must match; producer
//! tags are deduplicated and fenced; a closed stream refuses everything but an idempotent
//! close; `Stream-Seq` must increase; the byte limits must hold. Only then is anything
//! written, and the op becomes one record.

use std::sync::Arc;

use crate::content_type::ContentType;
use crate::limits::{stream_charge, tag_bytes, APPEND_CHARGE_BYTES};
use crate::op::{AppendKind, AppendOutcome, AppendRequest, CreateOutcome, CreateRequest, Op, OpError, Reply};
use crate::payload::Payload;
use crate::producer::producer_charge;
use crate::producer::Decision;
use crate::storage::record::encode::record_bytes_max;
use crate::storage::record::Record;
use crate::storage::{NoRoom, Purpose, Unprepared};
use crate::stream::cascade::HeldAnswer;
use crate::stream::fork::ForkBase;
use crate::stream::{Stream, StreamData, StreamState};

use super::{Batch, Pending, Shard};

/// Most producers one stream tracks (idle ones are pruned first).
pub(super) const PRODUCERS_PER_STREAM_MAX: usize = 65_536;

impl Shard {
    pub(super) fn apply(&mut self, batch: &mut Batch, op: Op) {
        match op {
            Op::Create(request, fork, reply) => {
                let result = self.apply_create(batch, request, fork);
                batch.replies.push(Pending::Create(reply, result));
            }
            Op::Append(request, reply) => {
                let result = self.apply_append(batch, request);
                batch.replies.push(Pending::Append(reply, result));
            }
            Op::Delete(name, reply) => self.apply_delete(batch, name.as_str(), reply),
            Op::Expire { name, id } => {
                if let Some(stream) = self.lookup(batch, &name).filter(|s| s.id == id) {
                    if stream.is_expired(batch.now_ms) {
                        // Without room for the delete it stays until the next look.
                        let _ = self.remove(batch, &stream, true);
                    }
                }
            }
            Op::Upkeep(upkeep) => {
                if let Some(log) = self.persist.maintenance() {
                    log.request(upkeep);
                }
            }
            Op::Stop => unreachable!("the loop handles Stop"),
        }
    }

    /// A client's delete. Removing a fork gives its source's shard one fork fewer to count,
    /// which may remove a soft-deleted source and so on up the chain (a cascade): the
    /// answer goes up with the release and is sent once the source's shard has counted it
    /// and the cascade has ended (`stream::cascade`), so that every name the cascade frees
    /// is free for the client's next request. It waits even for a source that is not
    /// soft-deleted now: a delete of the source racing this one may be decided on the
    /// count before the release arrives (soft, with the fork still counted), and it is
    /// this release that then removes it.
    fn apply_delete(&mut self, batch: &mut Batch, name: &str, reply: Reply<()>) {
        let stream = match self.live_stream(batch, name) {
            Some(stream) if stream.read_state().writer.deleted => Err(OpError::Gone),
            Some(stream) => self.remove(batch, &stream, false).map(|()| stream),
            None => Err(OpError::NotFound),
        };
        match stream {
            Ok(stream) if stream.fork.is_some() => {
                // A requester that went away no longer needs the answer.
                let answer = HeldAnswer::new(move || {
                    let _ = reply.send(Ok(()));
                });
                batch.hold_for_cascade(&stream, answer);
            }
            result => batch.replies.push(Pending::Delete(reply, result.map(drop))),
        }
    }

    fn apply_create(
        &mut self,
        batch: &mut Batch,
        request: CreateRequest,
        fork: Option<ForkBase>,
    ) -> Result<CreateOutcome, OpError> {
        if let Some(existing) = self.live_stream(batch, request.name.as_str()) {
            return answer_existing(&existing, &request, fork.as_ref());
        }
        let initial = request.initial.filter(|payload| !payload.is_empty());
        let initial_bytes = initial.as_ref().map_or(0, Payload::stored_len);
        let fork_bytes = fork.as_ref().map_or(0, |base| 2 + base.reference.origin.source.len() + 8 * 7);
        let meta_bytes = 2
            + request.name.as_str().len()
            + 2
            + request.config.content_type.as_str().len()
            + 16
            + fork_bytes;
        self.fits_one_record(initial_bytes)?;
        self.room(batch, record_bytes_max(meta_bytes, initial_bytes), Purpose::Write)?;
        if !self.budget.try_add_stream() {
            return Err(OpError::TooManyStreams);
        }
        // The create record's own overhead is in the stream's charge, initial data or not.
        let extra = stream_charge(request.name.as_str(), request.config.content_type.as_str());
        let charged = self.charge(0, initial_bytes, extra).inspect_err(|_| self.budget.remove_stream())?;

        let mut config = request.config;
        self.share_content_type(&mut config.content_type);
        let name: Arc<str> = Arc::from(request.name.into_boxed_str());
        let id = self.next_stream_id();
        let data = StreamData::new(self.in_memory);
        let mut stream = Stream::new(id, Arc::clone(&name), config.clone(), batch.now_ms, data);
        let reference = fork.as_ref().map(|base| base.reference.clone());
        if let Some(base) = fork {
            stream = stream.with_fork(base);
        }
        let stream = Arc::new(stream);
        let tail = {
            let mut state = stream.write_state();
            if let Some(payload) = &initial {
                state.writer.tail = state.writer.tail.advance(payload.message_count(), payload.stored_len());
            }
            state.writer.closed = request.closed;
            state.writer.charged = charged;
            mark_touched(batch, &stream, &mut state);
            state.writer.tail
        };
        if let Some(deadline) = stream.deadline_ms() {
            self.expiry.push(deadline, id, Arc::clone(&name));
        }
        batch.payload_bytes += initial_bytes as usize;
        batch.overlay.create(Arc::clone(&stream));
        let content_type = config.content_type.clone();
        let closed = request.closed;
        batch.records.push(Record::Create { stream: id, name, config, initial, closed, fork: reference });
        batch.owners.push(stream);
        Ok(CreateOutcome { created: true, tail, closed: request.closed, content_type })
    }

    fn apply_append(
        &mut self,
        batch: &mut Batch,
        mut request: AppendRequest,
    ) -> Result<AppendOutcome, OpError> {
        let payload = request.payload.take().filter(|payload| !payload.is_empty());
        if payload.is_none() && !request.close {
            return Err(OpError::EmptyAppend);
        }
        let stream = self.append_target(batch, &request)?;
        let mut state = stream.write_state();
        stream.touch(batch.now_ms);
        if let (Some(_), Some(idle_ms_max)) = (&request.producer, self.settings.producer_idle_ms_max) {
            let released = state.writer.producers.prune_if_due(batch.now_ms, idle_ms_max);
            self.release_charge(&mut state, released);
        }
        let decision = request.producer.as_ref().map(|tag| state.writer.producers.decide(tag, batch.now_ms));
        let content_type = &stream.config.content_type;
        if let Some(answer) =
            answer_without_writing(&state, &request, content_type, payload.is_some(), decision)?
        {
            return Ok(answer);
        }
        let stored_bytes = payload.as_ref().map_or(0, Payload::stored_len);
        self.admit_append(batch, &stream, &mut state, &request, decision, stored_bytes)?;

        // Everything is decided: apply (the data itself is published after the commit).
        let offset = state.writer.tail;
        if let Some(payload) = &payload {
            state.writer.tail = offset.advance(payload.message_count(), payload.stored_len());
        }
        let chain_tail = state.data.chain().0;
        if let (Some(tag), Some(Decision::Accept { next })) = (&request.producer, decision) {
            state.writer.producers.insert(&tag.id, next);
        }
        if let Some(seq) = &request.stream_seq {
            state.writer.stream_seq = Some(seq.clone());
        }
        state.writer.closed |= request.close;
        mark_touched(batch, &stream, &mut state);
        let outcome = AppendOutcome {
            kind: if payload.is_some() { AppendKind::Stored } else { AppendKind::Closed },
            tail: state.writer.tail,
            closed: state.writer.closed,
            producer: request.producer.as_ref().map(|tag| (tag.epoch, tag.seq)),
        };
        drop(state);
        batch.payload_bytes += stored_bytes as usize;
        batch.records.push(Record::Append {
            stream: stream.id,
            name: Arc::clone(&stream.name),
            offset,
            payload,
            producer: request.producer,
            stream_seq: request.stream_seq,
            close: request.close,
            chain_tail,
        });
        batch.owners.push(stream);
        Ok(outcome)
    }

    /// The stream an append is for, if it may take one: there and intact.
    fn append_target(&mut self, batch: &mut Batch, request: &AppendRequest) -> Result<Arc<Stream>, OpError> {
        let stream = self.live_stream(batch, request.name.as_str()).ok_or(OpError::NotFound)?;
        if stream.read_state().writer.deleted {
            return Err(OpError::Gone);
        }
        if let Some(damage) = stream.damage() {
            return Err(OpError::StreamDamaged { at: damage.at });
        }
        Ok(stream)
    }

    /// Makes room for an append that will be written, and charges it: a new producer's
    /// place, the storage's chain and room, the byte budget.
    fn admit_append(
        &mut self,
        batch: &Batch,
        stream: &Arc<Stream>,
        state: &mut StreamState,
        request: &AppendRequest,
        decision: Option<Decision>,
        stored_bytes: u64,
    ) -> Result<(), OpError> {
        if let (Some(tag), Some(Decision::Accept { .. })) = (&request.producer, decision) {
            self.make_room_for_producer(state, &tag.id, batch.now_ms)?;
        }
        self.prepare_chain(batch, stream, state)?;
        let tags = tag_bytes(request.producer.as_ref().map(|tag| &*tag.id), request.stream_seq.as_deref());
        self.fits_one_record(stored_bytes)?;
        self.room(batch, record_bytes_max(tags as usize, stored_bytes), Purpose::Write)?;
        let new_producer =
            request.producer.as_ref().filter(|tag| state.writer.producers.get(&tag.id).is_none());
        let extra = APPEND_CHARGE_BYTES + tags + new_producer.map_or(0, |tag| producer_charge(&tag.id));
        state.writer.charged += self.charge(stream.own_bytes(state.writer.tail), stored_bytes, extra)?;
        state.writer.tag_bytes += tags;
        Ok(())
    }

    /// Has the storage make ready what chaining the next record of `stream` needs (nothing
    /// for a stream created in this batch). A stream whose stored chain cannot be read is
    /// damaged: it is marked so, and the append refused.
    fn prepare_chain(
        &mut self,
        batch: &Batch,
        stream: &Arc<Stream>,
        state: &StreamState,
    ) -> Result<(), OpError> {
        let created_here =
            matches!(batch.overlay.get(&stream.name), Some(Some(new)) if Arc::ptr_eq(new, stream));
        if self.in_memory || created_here || state.writer.batch == batch.number {
            return Ok(());
        }
        match self.persist.prepare_append(stream.id, &stream.name, state.data.chain().0) {
            Ok(()) => Ok(()),
            Err(Unprepared::Damaged(reason)) => {
                let at = state.writer.tail;
                stream.note_damage(
                    at,
                    &format!("an append found its chain damaged: {reason}"),
                    &self.shared.counters.damage,
                );
                Err(OpError::StreamDamaged { at })
            }
            Err(Unprepared::Unavailable(error)) => {
                tracing::warn!(%error, stream = %stream.name, "an append could not be prepared");
                Err(OpError::Unavailable)
            }
        }
    }

    /// Refuses a new producer when the stream already tracks the most it may (after
    /// forgetting idle ones, in modes that forget them).
    fn make_room_for_producer(&self, state: &mut StreamState, id: &str, now_ms: u64) -> Result<(), OpError> {
        let producers = &mut state.writer.producers;
        if producers.get(id).is_some() || producers.len() < PRODUCERS_PER_STREAM_MAX {
            return Ok(());
        }
        if let Some(idle_ms_max) = self.settings.producer_idle_ms_max {
            let released = producers.prune(now_ms, idle_ms_max);
            self.release_charge(state, released);
        }
        match state.writer.producers.len() < PRODUCERS_PER_STREAM_MAX {
            true => Ok(()),
            false => Err(OpError::TooManyProducers),
        }
    }

    /// Refuses `data` message bytes that no stream may hold or that pass the largest append
    /// (one record holds them), before room is sought for them.
    fn fits_one_record(&self, data: u64) -> Result<(), OpError> {
        let limits = &self.settings.limits;
        if data > limits.stream_bytes_max {
            return Err(OpError::StreamFull);
        }
        match data > limits.append_bytes_max {
            true => Err(OpError::AppendTooLarge { bytes_max: limits.append_bytes_max }),
            false => Ok(()),
        }
    }

    /// Charges `data` message bytes to a stream holding `stream_bytes` (its own limit) and
    /// `data + extra` to the shared budget; the budget charge, when it went through.
    fn charge(&self, stream_bytes: u64, data: u64, extra: u64) -> Result<u64, OpError> {
        if stream_bytes.saturating_add(data) > self.settings.limits.stream_bytes_max {
            return Err(OpError::StreamFull);
        }
        let charge = data.saturating_add(extra);
        if !self.budget.try_charge(charge) {
            return Err(OpError::MemoryFull);
        }
        self.budget.note_stored(data, true);
        Ok(charge)
    }

    /// The stream called `name` as of this batch (published or created in it).
    pub(super) fn lookup(&self, batch: &Batch, name: &str) -> Option<Arc<Stream>> {
        match batch.overlay.get(name) {
            Some(change) => change.cloned(),
            None => self.shared.directory.get(name),
        }
    }

    /// The stream called `name` if it exists and has not expired; an expired one is removed.
    pub(super) fn live_stream(&mut self, batch: &mut Batch, name: &str) -> Option<Arc<Stream>> {
        let stream = self.lookup(batch, name)?;
        if stream.is_expired(batch.now_ms) {
            // Without room for the delete it goes later; it is absent either way. One that
            // forks still read stays, soft-deleted, and holds its name.
            let _ = self.remove(batch, &stream, true);
            let deleted = stream.read_state().writer.deleted;
            return deleted.then_some(stream);
        }
        Some(stream)
    }

    /// Gives back `bytes` a stream had charged (of producers it forgot).
    fn release_charge(&self, state: &mut StreamState, bytes: u64) {
        debug_assert!(state.writer.charged >= bytes, "a stream gives back what it charged");
        state.writer.charged -= bytes;
        self.budget.release(bytes);
    }

    /// Room for one more record of at most `bytes` in this batch, as an op's answer.
    pub(super) fn room(&mut self, batch: &Batch, bytes: u64, purpose: Purpose) -> Result<(), OpError> {
        self.persist.reserve(bytes, purpose, batch.now_ms).map_err(|no_room| match no_room {
            NoRoom::OutOfSpace => OpError::InsufficientStorage,
            NoRoom::Unavailable => OpError::Unavailable,
            NoRoom::DirectoryRemoved => OpError::DirectoryRemoved,
        })
    }
}

/// Marks a stream for publication at the end of the batch (once per batch).
pub(super) fn mark_touched(batch: &mut Batch, stream: &Arc<Stream>, state: &mut StreamState) {
    if state.writer.batch != batch.number {
        state.writer.batch = batch.number;
        batch.touched.push(Arc::clone(stream));
    }
}

/// The answer to a create of a name that is taken by `existing`: the stream as it is when
/// the create asks for the same (configuration, closed or not, fork origin), a conflict
/// otherwise; a soft-deleted stream that forks still read holds its name.
fn answer_existing(
    existing: &Stream,
    request: &CreateRequest,
    fork: Option<&ForkBase>,
) -> Result<CreateOutcome, OpError> {
    let state = existing.read_state();
    if state.writer.deleted {
        return Err(OpError::NameHeld);
    }
    let same_origin =
        existing.fork.as_ref().map(|base| &base.reference.origin) == fork.map(|base| &base.reference.origin);
    let same =
        existing.config.same_as(&request.config) && state.writer.closed == request.closed && same_origin;
    match same {
        true => Ok(CreateOutcome {
            created: false,
            tail: state.writer.tail,
            closed: state.writer.closed,
            content_type: existing.config.content_type.clone(),
        }),
        false => Err(OpError::ConfigMismatch),
    }
}

/// The answer to any append on a closed stream: a producer's duplicate (the closing request
/// retried, or an earlier one) and a plain close again succeed without writing; everything
/// else — data, a new producer tuple, a stale epoch, a gap, another content type — is
/// refused as closed (409 with `Stream-Closed`).
fn answer_on_closed(
    state: &StreamState,
    decision: Option<Decision>,
    has_data: bool,
) -> Result<Option<AppendOutcome>, OpError> {
    let tail = state.writer.tail;
    match decision {
        Some(Decision::Duplicate { epoch, last_seq }) => {
            let producer = Some((epoch, last_seq));
            Ok(Some(AppendOutcome { kind: AppendKind::Duplicate, tail, closed: true, producer }))
        }
        None if !has_data => {
            Ok(Some(AppendOutcome { kind: AppendKind::Closed, tail, closed: true, producer: None }))
        }
        _ => Err(OpError::StreamClosed { tail }),
    }
}

/// The answer to an append that writes nothing, if it is one: anything on a closed stream
/// (checked first, as PROTOCOL.md §5.2 recommends, so a client always learns the stream is
/// closed), data of another content type, a producer's refusal or duplicate, a `Stream-Seq`
/// that does not increase. `None`: the append is to be written.
fn answer_without_writing(
    state: &StreamState,
    request: &AppendRequest,
    stream_content_type: &ContentType,
    has_data: bool,
    decision: Option<Decision>,
) -> Result<Option<AppendOutcome>, OpError> {
    if state.writer.closed {
        return answer_on_closed(state, decision, has_data);
    }
    let matches = request.content_type.as_ref().is_some_and(|ct| ct.matches(stream_content_type));
    if has_data && !matches {
        return Err(OpError::ContentTypeMismatch);
    }
    match decision {
        Some(Decision::StaleEpoch { current }) => return Err(OpError::StaleEpoch { current }),
        Some(Decision::EpochSeqNotZero) => return Err(OpError::EpochSeqNotZero),
        Some(Decision::SeqGap { expected, received }) => return Err(OpError::SeqGap { expected, received }),
        Some(Decision::Duplicate { epoch, last_seq }) => {
            let (tail, closed) = (state.writer.tail, state.writer.closed);
            let producer = Some((epoch, last_seq));
            return Ok(Some(AppendOutcome { kind: AppendKind::Duplicate, tail, closed, producer }));
        }
        Some(Decision::Accept { .. }) | None => {}
    }
    if let (Some(seq), Some(last)) = (&request.stream_seq, &state.writer.stream_seq) {
        if seq.as_bytes() <= last.as_bytes() {
            return Err(OpError::StreamSeqRegression);
        }
    }
    Ok(None)
}
