//! Idempotent producers: the per-stream table of producer epochs and sequence numbers.
//!
//! A producer tags each request with (id, epoch, seq). The table remembers, per id, the
//! current epoch and the last accepted seq, and decides every request by the transition
//! table of the spec. Deciding is pure ([`decide`]); the shard applies an accepted decision
//! in the same step that stores the data, so data and dedup state never part ways.

use std::collections::HashMap;

/// Largest epoch or seq a client may send (2^53 - 1, safe in JavaScript).
pub const PRODUCER_NUMBER_MAX: u64 = (1 << 53) - 1;
/// Longest producer id, in bytes.
pub const PRODUCER_ID_BYTES_MAX: usize = 256;
/// How long memory mode keeps a producer nobody used.
pub(crate) const PRODUCER_IDLE_MS_MAX: u64 = 7 * 24 * 60 * 60 * 1000;
/// What a producer a stream tracks costs besides its id: its state in memory and in
/// checkpoints (charged to the byte budget, see `crate::limits`).
pub(crate) const PRODUCER_CHARGE_BYTES: u64 = 96;

/// What tracking the producer `id` costs.
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))] // (the `testing` front door exports it)
pub fn producer_charge(id: &str) -> u64 {
    PRODUCER_CHARGE_BYTES + id.len() as u64
}

/// The producer tag of one request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProducerTag {
    pub id: Box<str>,
    pub epoch: u64,
    pub seq: u64,
}

/// What the table remembers of one producer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerState {
    pub epoch: u64,
    pub last_seq: u64,
    /// When the producer last had a request accepted (clock milliseconds).
    pub last_used_ms: u64,
}

/// The verdict on one tagged request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// New data: store it and move the producer to `next`.
    Accept { next: ProducerState },
    /// Already stored (seq not above the last accepted one): store nothing.
    Duplicate { epoch: u64, last_seq: u64 },
    /// The epoch is older than the current one: the producer is fenced.
    StaleEpoch { current: u64 },
    /// A new epoch must start at seq 0.
    EpochSeqNotZero,
    /// A request is missing between the last accepted seq and this one.
    SeqGap { expected: u64, received: u64 },
}

/// Decides a request tagged (epoch, seq) against the producer's current state.
pub(crate) fn decide(state: Option<&ProducerState>, epoch: u64, seq: u64, now_ms: u64) -> Decision {
    let accept = Decision::Accept { next: ProducerState { epoch, last_seq: seq, last_used_ms: now_ms } };
    let Some(state) = state else {
        return accept;
    };
    if epoch < state.epoch {
        return Decision::StaleEpoch { current: state.epoch };
    }
    if epoch > state.epoch {
        return if seq == 0 { accept } else { Decision::EpochSeqNotZero };
    }
    if seq <= state.last_seq {
        return Decision::Duplicate { epoch, last_seq: state.last_seq };
    }
    if seq == state.last_seq + 1 {
        return accept;
    }
    Decision::SeqGap { expected: state.last_seq + 1, received: seq }
}

/// How often a stream's producer table is checked for idle producers, at most.
pub(crate) const PRUNE_INTERVAL_MS: u64 = 60 * 60 * 1000;

/// The producers of one stream. Empty tables cost one pointer.
#[derive(Debug, Default)]
pub(crate) struct ProducerTable {
    // Boxed on purpose: most streams have no producers, and `Option<Box<_>>` is 8 bytes
    // where the table inline would be 56 — per stream, times a million streams.
    producers: Option<Box<Producers>>,
}

#[derive(Debug, Default)]
struct Producers {
    by_id: HashMap<Box<str>, ProducerState>,
    /// When the table was last checked for idle producers.
    pruned_ms: u64,
}

impl ProducerTable {
    pub(crate) fn get(&self, id: &str) -> Option<&ProducerState> {
        self.producers.as_ref()?.by_id.get(id)
    }

    pub(crate) fn decide(&self, tag: &ProducerTag, now_ms: u64) -> Decision {
        decide(self.get(&tag.id), tag.epoch, tag.seq, now_ms)
    }

    pub(crate) fn insert(&mut self, id: &str, state: ProducerState) {
        let producers = self.producers.get_or_insert_with(|| {
            Box::new(Producers { by_id: HashMap::new(), pruned_ms: state.last_used_ms })
        });
        match producers.by_id.get_mut(id) {
            Some(slot) => *slot = state,
            None => {
                producers.by_id.insert(id.into(), state);
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.producers.as_ref().map_or(0, |p| p.by_id.len())
    }

    /// Forgets producers idle longer than `idle_ms_max`; returns how many were dropped.
    pub(crate) fn prune(&mut self, now_ms: u64, idle_ms_max: u64) -> u64 {
        let Some(producers) = self.producers.as_mut() else {
            return 0;
        };
        let mut released = 0;
        producers.by_id.retain(|id, state| {
            let keep = now_ms.saturating_sub(state.last_used_ms) <= idle_ms_max;
            released += if keep { 0 } else { producer_charge(id) };
            keep
        });
        producers.pruned_ms = now_ms;
        if producers.by_id.is_empty() {
            self.producers = None;
        }
        released
    }

    /// Prunes like [`ProducerTable::prune`] unless the table was checked less than
    /// [`PRUNE_INTERVAL_MS`] ago (so the cost stays amortised over many requests).
    pub(crate) fn prune_if_due(&mut self, now_ms: u64, idle_ms_max: u64) -> u64 {
        match &self.producers {
            Some(producers) if now_ms.saturating_sub(producers.pruned_ms) >= PRUNE_INTERVAL_MS => {
                self.prune(now_ms, idle_ms_max)
            }
            _ => 0,
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &ProducerState)> {
        self.producers.iter().flat_map(|p| p.by_id.iter().map(|(id, state)| (&**id, state)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(epoch: u64, last_seq: u64) -> ProducerState {
        ProducerState { epoch, last_seq, last_used_ms: 0 }
    }

    fn accepted(epoch: u64, seq: u64) -> Decision {
        Decision::Accept { next: ProducerState { epoch, last_seq: seq, last_used_ms: 7 } }
    }

    #[test]
    fn every_transition_of_the_table() {
        // No record: any valid tag is accepted as the new state.
        assert_eq!(decide(None, 0, 0, 7), accepted(0, 0));
        assert_eq!(decide(None, 3, 9, 7), accepted(3, 9));
        let s = state(2, 5);
        assert_eq!(decide(Some(&s), 2, 6, 7), accepted(2, 6));
        assert_eq!(decide(Some(&s), 2, 5, 7), Decision::Duplicate { epoch: 2, last_seq: 5 });
        assert_eq!(decide(Some(&s), 2, 0, 7), Decision::Duplicate { epoch: 2, last_seq: 5 });
        assert_eq!(decide(Some(&s), 2, 8, 7), Decision::SeqGap { expected: 6, received: 8 });
        assert_eq!(decide(Some(&s), 3, 0, 7), accepted(3, 0));
        assert_eq!(decide(Some(&s), 3, 1, 7), Decision::EpochSeqNotZero);
        assert_eq!(decide(Some(&s), 1, 0, 7), Decision::StaleEpoch { current: 2 });
        assert_eq!(decide(Some(&s), 0, 99, 7), Decision::StaleEpoch { current: 2 });
    }

    #[test]
    fn table_keeps_producers_independent_and_prunes_idle_ones() {
        let mut table = ProducerTable::default();
        assert_eq!(table.len(), 0);
        table.insert("a", ProducerState { epoch: 0, last_seq: 1, last_used_ms: 100 });
        table.insert("b", ProducerState { epoch: 4, last_seq: 0, last_used_ms: 900 });
        let tag = ProducerTag { id: "b".into(), epoch: 4, seq: 1 };
        assert_eq!(table.decide(&tag, 1000), accepted_at(4, 1, 1000));
        assert_eq!(table.get("a").unwrap().last_seq, 1);
        assert_eq!(table.prune(1000, 500), producer_charge("a"), "what the pruned producer cost");
        assert!(table.get("a").is_none());
        assert_eq!(table.len(), 1);
        assert_eq!(table.prune(10_000, 500), producer_charge("b"));
        assert_eq!(table.len(), 0);
    }

    #[test]
    fn pruning_on_access_is_rate_limited() {
        let mut table = ProducerTable::default();
        table.insert("old", ProducerState { epoch: 0, last_seq: 0, last_used_ms: 0 });
        assert_eq!(table.prune_if_due(PRUNE_INTERVAL_MS - 1, 10), 0, "checked too recently");
        assert_eq!(table.prune_if_due(PRUNE_INTERVAL_MS, 10), producer_charge("old"));
        assert_eq!(table.len(), 0);
    }

    fn accepted_at(epoch: u64, seq: u64, now_ms: u64) -> Decision {
        Decision::Accept { next: ProducerState { epoch, last_seq: seq, last_used_ms: now_ms } }
    }
}
