//! At start, before serving: this node's streams entered in the directory, and its own
//! entries settled against what the node holds. While running: the entries of streams it
//! holds put back when they leave the directory ([`repair`]).
//!
//! - A stream held here with no entry gets one (`live`, owned here): the first start in
//!   cluster mode registers every existing stream.
//! - A stream held here whose entry names another node is a split stream: the start is
//!   refused, naming them, for an operator to resolve.
//! - An entry of this node's left `creating` (a crash between the claim and the local
//!   create, or before the entry was marked live): `live` if the stream is here, removed
//!   if not. One left `deleting`: `live` again if the stream is still here (the delete was
//!   never answered, and is rolled back rather than finished by a restart), removed if not.
//!   One for a stream no longer here (expired while the node was down): removed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ds_engine::Engine;

use super::directory::{stream_key, Entry, State};
use super::etcd::EtcdError;
use super::Cluster;

/// Most split streams named in the refusal.
const NAMED_MAX: usize = 10;

pub(super) async fn local_streams(cluster: &Cluster, engine: &Engine) -> Result<(), String> {
    let failed = |error: super::etcd::EtcdError| format!("cannot register this node's streams: {error}");
    let entries: HashMap<String, Entry> =
        cluster.directory.all_streams().await.map_err(failed)?.into_iter().collect();
    let held = engine.stream_names();
    let etcd = cluster.etcd();
    let mut split = Vec::new();
    let mut registered = 0usize;
    for name in &held {
        match entries.get(name.as_str()) {
            Some(entry) if entry.owner != cluster.node_id => {
                split.push(format!("{name} (node {:?})", entry.owner))
            }
            Some(_) => {}
            None => {
                let value = Entry::encode(&cluster.node_id, State::Live);
                match etcd.create(&stream_key(name.as_str()), &value, 0).await.map_err(failed)? {
                    Ok(_) => registered += 1,
                    Err(existing) => {
                        split.push(format!("{name} (claimed meanwhile: {:?})", Entry::decode(&existing)))
                    }
                }
            }
        }
    }
    if !split.is_empty() {
        let count = split.len();
        split.truncate(NAMED_MAX);
        return Err(format!(
            "{count} stream(s) held here are owned by other nodes in the directory (split streams; resolve by hand): {}",
            split.join(", ")
        ));
    }
    let mut settled = 0usize;
    for (name, entry) in entries.iter().filter(|(_, entry)| entry.owner == cluster.node_id) {
        settle(cluster, engine, name, entry).await.map_err(failed)?;
        settled += usize::from(entry.state != State::Live || !held.iter().any(|h| h.as_str() == name));
    }
    tracing::info!(held = held.len(), registered, settled, "streams registered in the cluster's directory");
    Ok(())
}

/// Brings one of this node's entries in line with what the node holds.
async fn settle(
    cluster: &Cluster,
    engine: &Engine,
    name: &str,
    entry: &Entry,
) -> Result<(), super::etcd::EtcdError> {
    let key = stream_key(name);
    let etcd = cluster.etcd();
    let held = holds(engine, name);
    match (entry.state, held) {
        (State::Live, true) => Ok(()),
        // The stream is still here, so no client was told the delete succeeded (a delete is
        // answered after the local delete): it is rolled back, the stream and its appends kept.
        (State::Creating | State::Deleting, true) => etcd
            .replace(&key, &Entry::encode(&cluster.node_id, State::Live), entry.mod_revision, 0)
            .await
            .map(|_| ()),
        (_, false) => etcd.delete_at(&key, entry.mod_revision).await.map(|_| ()),
    }
}

/// How often the repair looks whether etcd went back in time, with nothing else to do.
const REPAIR_TICK: Duration = Duration::from_secs(1);

/// Runs for the node's life: puts back the entries of streams this node holds that left
/// the directory (deleted by hand, or lost with an etcd restored from a backup), looking at
/// the entries the watch saw removed, at every entry after a new snapshot, and at every
/// entry again once etcd went back in time (creates wait until then, and a lease's time to
/// live more, so that every other node has put its entries back too). A name claimed by
/// another node meanwhile is a split stream: this node stops serving it.
pub(super) async fn repair(cluster: Arc<Cluster>, engine: Engine) {
    // Creates wait past this node's own re-registration for a lease's time to live and two
    // ticks: every live node has then renewed (and so seen etcd go back) and re-registered,
    // and no create here can claim a name another node holds but has not put back yet.
    let hold = Duration::from_secs(cluster.lease_ttl_secs) + 2 * REPAIR_TICK;
    let mut registered_at: Option<Instant> = None;
    loop {
        let _ = tokio::time::timeout(REPAIR_TICK, cluster.directory.changed.notified()).await;
        cluster.disowned.retain(|name| holds(&engine, name));
        let (names, check_all) =
            std::mem::take(&mut *cluster.directory.removed.lock().expect("removed entries lock"));
        let regressed = cluster.etcd().regressed();
        let full = check_all || (regressed && registered_at.is_none());
        let repaired = match full {
            true => put_back_all(&cluster, &engine).await,
            false => put_back(&cluster, &engine, &names).await,
        };
        match repaired {
            Ok(()) if regressed => {
                let since = *registered_at.get_or_insert_with(Instant::now);
                if since.elapsed() >= hold {
                    cluster.etcd().accept_regression();
                    registered_at = None;
                    tracing::warn!("the cluster's streams are registered again in the restored directory; creates resume");
                }
            }
            Ok(()) => {}
            Err(error) => {
                tracing::warn!(%error, "cannot put this node's directory entries back yet");
                let mut pending = cluster.directory.removed.lock().expect("removed entries lock");
                pending.0.extend(names);
                pending.1 |= full;
            }
        }
    }
}

/// Whether the engine holds a stream named `name`.
fn holds(engine: &Engine, name: &str) -> bool {
    ds_engine::StreamName::new(name).ok().is_some_and(|stream| engine.open(&stream).is_some())
}

/// Whether `name` is held here and no delete or create of it by this node is under way.
fn settled_here(cluster: &Cluster, engine: &Engine, name: &str) -> bool {
    holds(engine, name)
        && !cluster.unsettled.holds(name)
        && !cluster.disowned.holds(name)
        && !cluster.creating.lock().expect("creating lock").contains_key(name)
}

async fn put_back(cluster: &Cluster, engine: &Engine, names: &HashSet<String>) -> Result<(), EtcdError> {
    for name in names.iter().filter(|name| settled_here(cluster, engine, name)) {
        let found = cluster.etcd().get(&stream_key(name)).await?;
        enter_again(cluster, engine, name, found.as_ref().and_then(Entry::decode)).await?;
    }
    Ok(())
}

async fn put_back_all(cluster: &Cluster, engine: &Engine) -> Result<(), EtcdError> {
    let entries: HashMap<String, Entry> = cluster.directory.all_streams().await?.into_iter().collect();
    for name in engine.stream_names() {
        if settled_here(cluster, engine, name.as_str()) {
            enter_again(cluster, engine, name.as_str(), entries.get(name.as_str()).cloned()).await?;
        }
    }
    Ok(())
}

/// Puts back the entry of `name`, held here, where `found` says it is missing.
async fn enter_again(
    cluster: &Cluster,
    engine: &Engine,
    name: &str,
    found: Option<Entry>,
) -> Result<(), EtcdError> {
    let claimed_by = match found {
        Some(entry) if entry.owner == cluster.node_id => return Ok(()),
        Some(entry) => entry.owner,
        None => {
            let value = Entry::encode(&cluster.node_id, State::Live);
            match cluster.etcd().create(&stream_key(name), &value, 0).await? {
                Ok(_) => {
                    tracing::warn!(stream = name, "a stream held here had no directory entry; put it back");
                    return Ok(());
                }
                Err(existing) => Entry::decode(&existing).map(|entry| entry.owner).unwrap_or_default(),
            }
        }
    };
    // Still held? A delete here and a create elsewhere may have come between.
    let still_held = holds(engine, name);
    if claimed_by != cluster.node_id && still_held {
        cluster.disowned.hold(name);
        tracing::error!(
            stream = name,
            owner = claimed_by,
            "a stream held here is owned by another node in the directory (a split stream): no longer served here; resolve by hand"
        );
    }
    Ok(())
}
