//! At start, before serving: this node's streams entered in the directory, and its own
//! entries settled against what the node holds.
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

use std::collections::HashMap;

use ds_engine::Engine;

use super::directory::{stream_key, Entry, State};
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
    let stream = ds_engine::StreamName::new(name).ok();
    let held = stream.as_ref().is_some_and(|stream| engine.open(stream).is_some());
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
