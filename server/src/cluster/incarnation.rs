//! A node id bound to the data directory that runs it: the directory's incarnation (a
//! random id in its `cluster-incarnation` file) is kept in etcd at `/ds/incarnations/{id}`
//! (no lease: it outlives the node's runs) and compared at every start, before joining.
//!
//! The directory in etcd credits streams to a node id, and their bytes are on the disk of
//! the data directory that ran as that id. A start from another data directory under the
//! same id (a failed mount, a replaced disk, two hosts given one id) would find none of
//! those streams and remove their entries at the start's settle: they would answer 404
//! everywhere and could be created again elsewhere. So such a start is refused, naming the
//! streams at stake, unless the operator says the old data directory is gone for good
//! (`DS_CLUSTER__ADOPT_NODE_ID=true`): then this directory takes the id over, and the old
//! one's streams leave the directory (404, free to be created again), each named in the log.
//!
//! A data directory that ran as the id before incarnations existed gets one at its next
//! start; a brand-new id (no entries in etcd) gets one at its first.

use std::path::Path;

use super::etcd::{EtcdError, Kv};
use super::identity;
use super::Cluster;

/// Most stream names a refusal or an adoption names.
const NAMED_MAX: usize = 10;

fn incarnation_key(node_id: &str) -> Vec<u8> {
    format!("/ds/incarnations/{node_id}").into_bytes()
}

/// Binds `data_dir` (which has run as this id before when `ran_here_before`) to this
/// node's id in etcd, or refuses the start.
pub(super) async fn bind(
    cluster: &Cluster,
    data_dir: &Path,
    ran_here_before: bool,
    adopt: bool,
) -> Result<(), String> {
    let failed = |error: EtcdError| format!("cannot check this node's incarnation: {error}");
    let key = incarnation_key(&cluster.node_id);
    let stored = cluster.etcd().get(&key).await.map_err(failed)?;
    let theirs = stored.as_ref().map(|kv| String::from_utf8_lossy(&kv.value).trim().to_string());
    let ours = identity::incarnation(data_dir)?;
    // The streams etcd credits to this id, read once and only where they decide or are named.
    let mut owned = None;
    let bound = match (&ours, &theirs) {
        (Some(ours), Some(theirs)) => ours == theirs,
        (Some(_), None) => true,
        (None, Some(_)) => false,
        (None, None) if ran_here_before => true,
        (None, None) => owned.insert(owned_streams(cluster).await.map_err(failed)?).is_empty(),
    };
    if !bound {
        let owned = match owned {
            Some(owned) => owned,
            None => owned_streams(cluster).await.map_err(failed)?,
        };
        if !adopt {
            return Err(refusal(cluster, data_dir, &owned));
        }
        tracing::warn!(
            node = %cluster.node_id,
            streams = owned.len(),
            named = %named(&owned),
            "adopting the node id: the streams of the data directory that ran as it before leave the directory unless held here"
        );
    }
    let ours = match ours {
        Some(ours) => ours,
        None => identity::new_incarnation(data_dir)?,
    };
    if theirs.as_deref() == Some(ours.as_str()) {
        return Ok(());
    }
    match publish(cluster, &key, &ours, stored.as_ref()).await.map_err(failed)? {
        Ok(_) => Ok(()),
        Err(_) => Err(format!(
            "the incarnation of node {:?} changed in etcd while starting: another data directory is starting under this id",
            cluster.node_id
        )),
    }
}

/// A node without a data directory (memory mode) under an id a data directory is bound to:
/// refused unless adopting (a memory-mode start by mistake, a lost setting, would otherwise
/// drop the disk's streams from the directory); adopting unbinds the id from any disk.
pub(super) async fn check_memory(cluster: &Cluster, adopt: bool) -> Result<(), String> {
    let failed = |error: EtcdError| format!("cannot check this node's incarnation: {error}");
    let key = incarnation_key(&cluster.node_id);
    let Some(stored) = cluster.etcd().get(&key).await.map_err(failed)? else { return Ok(()) };
    let owned = owned_streams(cluster).await.map_err(failed)?;
    if !adopt {
        return Err(format!(
            "{} (this node keeps no data directory: DS_STORAGE__MODE is memory)",
            refusal(cluster, Path::new("memory"), &owned)
        ));
    }
    tracing::warn!(node = %cluster.node_id, streams = owned.len(), named = %named(&owned), "adopting the node id in memory mode: the streams of the data directory that ran as it leave the directory");
    cluster.etcd().delete_at(&key, stored.mod_revision).await.map_err(failed)?;
    Ok(())
}

/// Puts `incarnation` at `key` where `stored` (or nothing) still is.
async fn publish(
    cluster: &Cluster,
    key: &[u8],
    incarnation: &str,
    stored: Option<&Kv>,
) -> Result<Result<i64, Kv>, EtcdError> {
    let etcd = cluster.etcd();
    match stored {
        None => etcd.create(key, incarnation.as_bytes(), 0).await,
        Some(kv) => etcd.replace(key, incarnation.as_bytes(), kv.mod_revision, 0).await,
    }
}

/// The streams the directory credits to this node id.
async fn owned_streams(cluster: &Cluster) -> Result<Vec<String>, EtcdError> {
    let all = cluster.directory.all_streams().await?;
    Ok(all.into_iter().filter(|(_, entry)| entry.owner == cluster.node_id).map(|(name, _)| name).collect())
}

fn named(names: &[String]) -> String {
    let mut shown: Vec<&str> = names.iter().take(NAMED_MAX).map(String::as_str).collect();
    if names.len() > NAMED_MAX {
        shown.push("…");
    }
    shown.join(", ")
}

fn refusal(cluster: &Cluster, data_dir: &Path, owned: &[String]) -> String {
    format!(
        "node id {id:?} was run from another data directory than {dir}; the cluster's directory credits {count} \
         stream(s) to it ({names}), and starting here would drop them from the directory. Mount that data \
         directory, or start this one under a new node id; if it is lost for good, start with \
         DS_CLUSTER__ADOPT_NODE_ID=true (its streams then answer 404 and may be created again)",
        id = cluster.node_id,
        dir = data_dir.display(),
        count = owned.len(),
        names = named(owned),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_listed_up_to_the_bound() {
        let names: Vec<String> = (0..12).map(|i| format!("s{i}")).collect();
        assert_eq!(named(&names[..2]), "s0, s1");
        assert!(named(&names).ends_with("s9, …"));
    }
}
