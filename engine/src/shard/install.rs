//! Installing recovered streams in every shard at start, forks linked to their sources.
//!
//! A fork's source may live on any shard, and may itself be a fork, so streams are built
//! across all shards at once, each source before its forks: a fork gets a reader's handle on
//! the recovered source incarnation its reference names (name and id), and the source counts
//! it, so the counts of live forks are rebuilt from the forks themselves, never stored. A
//! fork whose source is missing (its records were lost to damage) is kept, marked damaged:
//! its own bytes are served, its inherited ones read as damaged. So is a fork whose source
//! came back shorter than what it inherits (the source's records lost, the fork's create
//! record kept): both are marked damaged where the source ends, so the fork never reads the
//! source's later appends as its own history. A soft-deleted stream that
//! no fork reads any more (a crash came between its last fork's delete and its own) is
//! removed in its shard's first batch, finishing the cascade the crash interrupted.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::Shard;
use crate::limits::{stream_charge, APPEND_CHARGE_BYTES};
use crate::meta::{ForkRef, StreamDamage, StreamSnapshot};
use crate::offset::Offset;
use crate::producer::producer_charge;
use crate::storage::chunk::{Chunk, Message, ReadError};
use crate::stream::cascade::{HeldAnswer, Release};
use crate::stream::fork::{ForkBase, ForkSource, FORK_DEPTH_MAX};
use crate::stream::handle::{StreamHandle, StreamOwner};
use crate::stream::Stream;
use crate::time::Clock;

/// Installs each shard's recovered streams (`recovered[i]` belongs to `shards[i]`).
///
/// The snapshots stay where recovery put them until each is built, and a shard's list is
/// dropped once all its streams are: only the streams that forks name as their source are
/// indexed by name. (Moving every snapshot into a map by name first held them all twice
/// over, with the map's spare room: 164 MB at the start of a server with 300,000 streams.)
pub(crate) fn install_recovered(shards: &mut [Shard], recovered: Vec<Vec<StreamSnapshot>>, clock: &Clock) {
    assert_eq!(shards.len(), recovered.len(), "one list of recovered streams per shard");
    let sources = sources_by_name(&recovered);
    let built = recovered.iter().map(|snapshots| vec![None; snapshots.len()]).collect();
    let pending = recovered.into_iter().map(|snapshots| snapshots.into_iter().map(Some).collect()).collect();
    let mut linker = Linker { shards, pending, built, sources, clock };
    for shard in 0..linker.shards.len() {
        for slot in 0..linker.built[shard].len() {
            linker.build(Place { shard, slot }, 0);
        }
        // Every stream of this shard is built: later forks find their sources in `built`.
        linker.pending[shard] = Vec::new();
    }
    let Linker { shards, built, .. } = linker;
    for (shard, streams) in shards.iter_mut().zip(built) {
        let streams = streams.into_iter().map(|stream| stream.expect("every recovered stream is built"));
        shard.shared.directory.install(streams.collect());
        shard.finish_interrupted_cascades();
    }
}

/// Where a recovered stream is: its shard, and its place in that shard's list.
#[derive(Clone, Copy)]
struct Place {
    shard: usize,
    slot: usize,
}

/// Where each recovered stream that some fork names as its source is.
fn sources_by_name(recovered: &[Vec<StreamSnapshot>]) -> HashMap<Arc<str>, Place> {
    let named: HashSet<&str> = recovered
        .iter()
        .flatten()
        .filter_map(|snapshot| snapshot.fork.as_ref())
        .map(|reference| &*reference.origin.source)
        .collect();
    let mut sources = HashMap::with_capacity(named.len());
    for (shard, snapshots) in recovered.iter().enumerate() {
        for (slot, snapshot) in snapshots.iter().enumerate() {
            // A name belongs to one stream; were a checkpoint to give it twice, the later
            // stream is the source, as it is the one the directory keeps.
            if named.contains(&*snapshot.name) {
                sources.insert(Arc::clone(&snapshot.name), Place { shard, slot });
            }
        }
    }
    sources
}

/// Builds streams across shards, sources first.
struct Linker<'a> {
    shards: &'a mut [Shard],
    /// Recovered streams not yet built, by place (taken while one is built).
    pending: Vec<Vec<Option<StreamSnapshot>>>,
    /// Streams built, by place.
    built: Vec<Vec<Option<Arc<Stream>>>>,
    sources: HashMap<Arc<str>, Place>,
    clock: &'a Clock,
}

impl Linker<'_> {
    /// Builds the stream at `place` (and its sources first), `depth` forks below the first
    /// one asked for. `None` if it is being built (a cycle: damaged references).
    fn build(&mut self, place: Place, depth: u32) -> Option<Arc<Stream>> {
        if let Some(stream) = &self.built[place.shard][place.slot] {
            return Some(Arc::clone(stream));
        }
        let mut snapshot = self.pending[place.shard].get_mut(place.slot).and_then(Option::take)?;
        let base = snapshot.fork.clone().map(|reference| self.link(reference, depth, &mut snapshot));
        let stream = self.shards[place.shard].install(snapshot, base);
        self.built[place.shard][place.slot] = Some(Arc::clone(&stream));
        Some(stream)
    }

    /// The fork base of a recovered fork: its source built and counting it, or, when the
    /// source is gone, a base that reads as damaged (and the fork marked).
    fn link(&mut self, reference: ForkRef, depth: u32, fork: &mut StreamSnapshot) -> ForkBase {
        let place = self.sources.get(&*reference.origin.source).copied();
        let source = match (place, depth < FORK_DEPTH_MAX) {
            (Some(place), true) => self.build(place, depth + 1).map(|source| (place, source)),
            _ => None,
        };
        let Some((place, source)) = source.filter(|(_, source)| source.id == reference.source_id) else {
            let reason = format!("the source it was forked from ({}) is gone", reference.origin.source);
            fork.damage.get_or_insert(StreamDamage { at: Offset::ZERO, reason: reason.into() });
            return ForkBase { source: Arc::new(LostSource), reference, depth: 1 };
        };
        source.write_state().writer.forks += 1;
        let depth = source.fork.as_ref().map_or(0, |base| base.depth) + 1;
        let source_tail = source.read_state().published.tail;
        if !holds_inherited(source_tail, &reference) {
            // The fork's create record survived, the source's records it inherits did not
            // (in another file or shard): served as they are, the fork would read the
            // source's next appends in their place.
            let reason = format!(
                "its fork {} inherits bytes up to {} that it no longer holds",
                fork.name,
                reference.start()
            );
            source.note_damage(source_tail, &reason, &self.shards[place.shard].shared.counters.damage);
            let reason =
                format!("the source it was forked from ({}) lost bytes it inherits", reference.origin.source);
            mark_damaged_from(fork, source_tail, reason);
        }
        let owner: Arc<dyn StreamOwner> = self.shards[place.shard].shared.clone();
        let handle = StreamHandle::new(source, owner, self.clock.clone());
        ForkBase { source: Arc::new(handle), reference, depth }
    }
}

/// Whether a source whose tail is `tail` still holds every byte `reference` inherits.
fn holds_inherited(tail: Offset, reference: &ForkRef) -> bool {
    match reference.partial_bytes {
        0 => tail >= reference.until,
        // The message at `until` is cut: it must be there.
        _ => tail.messages > reference.until.messages,
    }
}

/// Marks `stream` damaged at `at` unless it already is, earlier.
fn mark_damaged_from(stream: &mut StreamSnapshot, at: Offset, reason: String) {
    if stream.damage.as_ref().is_none_or(|damage| damage.at > at) {
        stream.damage = Some(StreamDamage { at, reason: reason.into() });
    }
}

/// The source of a fork whose source was lost: its inherited bytes read as damaged.
struct LostSource;

impl ForkSource for LostSource {
    fn read_below(&self, _from: Offset, _cap: Offset, _bytes_max: usize) -> Result<Chunk, ReadError> {
        Err(ReadError::Damaged)
    }

    fn messages_below(
        &self,
        _from: Offset,
        _cap: Offset,
        _bytes_max: usize,
    ) -> Result<Vec<Message>, ReadError> {
        Err(ReadError::Damaged)
    }

    fn release_fork(&self, _answer: Option<HeldAnswer>) {}
}

impl Shard {
    /// Makes a recovered stream readable and writable (published once the directory takes
    /// it), charging the budget what it was charged when written (producers forgotten since
    /// are not charged again).
    fn install(&mut self, snapshot: StreamSnapshot, fork: Option<ForkBase>) -> Arc<Stream> {
        let charged = recovered_charge(&snapshot);
        self.budget.charge_unchecked(charged);
        self.budget.note_stored(own_bytes(&snapshot), true);
        self.budget.add_stream_unchecked();
        self.stream_id_next = self.stream_id_next.max(snapshot.id.next());
        let mut config = snapshot.config.clone();
        self.share_content_type(&mut config.content_type);
        let stream = Arc::new(Stream::from_snapshot(StreamSnapshot { config, ..snapshot }, fork));
        stream.write_state().writer.charged = charged;
        if let Some(damage) = stream.damage() {
            tracing::error!(
                stream = %stream.name,
                offset = %damage.at,
                reason = %damage.reason,
                "stream damaged: it is served up to the damage and refuses writes"
            );
            self.shared.counters.damage.damaged_streams.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        if let Some(deadline) = stream.deadline_ms() {
            self.expiry.push(deadline, stream.id, Arc::clone(&stream.name));
        }
        stream
    }

    /// Queues the removal of every soft-deleted stream no fork reads any more, as if its
    /// last fork went now: the first batch removes it and releases its own source.
    fn finish_interrupted_cascades(&mut self) {
        let mut orphaned = Vec::new();
        self.shared.directory.for_each(|stream| {
            let mut state = stream.write_state();
            if state.writer.deleted && state.writer.forks == 0 {
                state.writer.forks = 1;
                orphaned.push((Arc::clone(&stream.name), stream.id));
            }
        });
        for (name, id) in orphaned {
            tracing::info!(stream = %name, "removing a soft-deleted stream whose last fork went before a crash");
            self.shared.release_fork(Release { name, id, answer: None });
        }
    }
}

/// The bytes a recovered stream holds of its own (a fork's inherited ones are its source's).
fn own_bytes(snapshot: &StreamSnapshot) -> u64 {
    let start = snapshot.fork.as_ref().map_or(Offset::ZERO, ForkRef::start);
    snapshot.tail.bytes.saturating_sub(start.bytes)
}

/// What a recovered stream is charged: itself, its own data, an append per record of its
/// chain with the tags they carried, and its producers.
fn recovered_charge(snapshot: &StreamSnapshot) -> u64 {
    let producers: u64 = snapshot.producers.iter().map(|(id, _)| producer_charge(id)).sum();
    stream_charge(&snapshot.name, snapshot.config.content_type.as_str())
        + own_bytes(snapshot)
        + snapshot.chain_n.raw() * APPEND_CHARGE_BYTES
        + snapshot.tag_bytes
        + producers
}
