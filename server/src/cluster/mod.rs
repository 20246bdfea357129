//! Cluster mode: several nodes, one directory of streams in etcd, any node serves any stream.
//!
//! Each stream has one owner, the node that holds its data and is its only writer, as on a
//! single node. etcd holds which node owns each stream and which nodes are alive (each node
//! keeps its `/ds/nodes/{id}` key under a lease). A request for a stream this node holds is
//! served here with no etcd round trip; one for a stream held elsewhere is forwarded to its
//! owner; a create claims the name in etcd with one compare-and-set before the stream is
//! made, so two racing creates on two nodes never both make it.
//!
//! - `client`: HTTP/1.1 to etcd and to the other nodes, over kept-alive connections.
//! - `etcd`: the few etcd calls the directory needs, through etcd's JSON gateway.
//! - `directory`: the directory's keys and the cache of them this node keeps;
//!   `follow`: the snapshot and watch that keep it, and notice when the watch froze.
//! - `batch`: the directory writes of creates, batched: claims group-committed, `live`
//!   marks off the create's path.
//! - `identity`, `incarnation`: the data directory's node id and incarnation, bound to the
//!   id in etcd so that another data directory never runs as this node unasked.
//! - `membership`: this node's key under its lease, renewed and kept this node's.
//! - `register`: at start, this node's streams entered in the directory, and what a crash
//!   between a local change and its directory change left behind repaired.
//! - `names`: sets of names held back: deletes not settled in the directory (appends
//!   wait), split streams found while running (nothing served).
//!
//! Where a request is served, and the directory's part of creates and deletes, is
//! `crate::placement`'s: this module is the membership and the directory it uses.

mod batch;
mod client;
mod directory;
mod etcd;
mod follow;
mod identity;
mod incarnation;
mod membership;
mod names;
mod register;

pub(crate) use client::{OutBody, PeerError, Peers, Pooled};
pub(crate) use directory::{stream_key, Directory, Entry, State};
pub(crate) use etcd::{Etcd, EtcdError};
pub(crate) use names::NameSet;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ds_engine::{Engine, StorageMode};

use crate::config::ClusterConfig;

/// Longest wait at start for the directory cache to follow etcd.
const FOLLOW_WAIT: Duration = Duration::from_secs(5);

/// This node's membership of the cluster.
pub(crate) struct Cluster {
    pub node_id: String,
    /// `host:port` the other nodes reach this one at.
    advertise: String,
    lease_ttl_secs: u64,
    directory: Arc<Directory>,
    peers: Arc<Peers>,
    /// Claims and `live` marks of this node's creates, batched.
    batcher: batch::Batcher,
    /// Names this node is creating right now, each with the lock its creates take turns on.
    creating: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Names whose delete has not settled in the directory.
    unsettled: NameSet,
    /// Names held here whose entry another node claimed (split streams).
    disowned: NameSet,
    /// Another process has this node's id in the directory (see `membership`).
    identity_taken: AtomicBool,
}

impl Cluster {
    /// Joins the cluster: checks the data directory's node id, enters this node and its
    /// streams in the directory, and starts following the directory and renewing the lease.
    pub(crate) async fn start(config: &ClusterConfig, engine: &Engine) -> Result<Arc<Cluster>, String> {
        let data_dir =
            (engine.config().mode != StorageMode::Memory).then(|| engine.config().data_dir.clone());
        let ran_here_before = match &data_dir {
            Some(data_dir) => identity::check(data_dir, &config.node_id)?,
            None => false,
        };
        let peers = Arc::new(Peers::default());
        let etcd = Arc::new(Etcd::new(&config.etcd_endpoints, Arc::clone(&peers))?);
        let batcher = batch::Batcher::start(Arc::clone(&etcd), config.node_id.clone());
        let cluster = Arc::new(Cluster {
            batcher,
            node_id: config.node_id.clone(),
            advertise: config.advertise.clone(),
            lease_ttl_secs: config.lease_ttl_secs,
            directory: Arc::new(Directory::new(etcd)),
            peers,
            creating: Mutex::default(),
            unsettled: NameSet::default(),
            disowned: NameSet::default(),
            identity_taken: AtomicBool::new(false),
        });
        match &data_dir {
            Some(data_dir) => {
                incarnation::bind(&cluster, data_dir, ran_here_before, config.adopt_node_id).await?;
                if !ran_here_before {
                    identity::record(data_dir, &config.node_id)?;
                }
            }
            None => incarnation::check_memory(&cluster, config.adopt_node_id).await?,
        }
        let lease = cluster.join().await.map_err(|error| format!("cannot join the cluster: {error}"))?;
        register::local_streams(&cluster, engine).await?;
        // Every node rewrites its key each renewal period: a watch that hears nothing for
        // two of them (and a second) is frozen.
        let silence_max = Duration::from_millis(2 * config.lease_ttl_secs * 1000 / 3 + 1000);
        tokio::spawn(Arc::clone(&cluster.directory).follow(silence_max));
        tokio::spawn(register::repair(Arc::clone(&cluster), engine.clone()));
        // Serve with a warm cache where etcd allows (lookups go to etcd until then).
        let deadline = tokio::time::Instant::now() + FOLLOW_WAIT;
        while !cluster.directory.synced() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::spawn(Arc::clone(&cluster).renew(lease));
        tracing::info!(node = %cluster.node_id, advertise = %cluster.advertise, "joined the cluster");
        Ok(cluster)
    }

    pub(crate) fn etcd(&self) -> &Etcd {
        &self.directory.etcd
    }

    /// Marks the entry of `name`, which this node created after claiming it at `revision`,
    /// `live` (soon, batched with others).
    pub(crate) async fn mark_live(&self, name: &str, revision: i64) {
        self.batcher.mark_live(name, revision).await;
    }

    /// Puts `value` at `key` where no entry is (batched with this node's other claims):
    /// `Ok(revision)`, or `Err(existing)` when an entry holds the name.
    pub(crate) async fn claim(&self, key: &[u8], value: &[u8]) -> batch::Claimed {
        self.batcher.claim(key.to_vec(), value.to_vec()).await
    }

    pub(crate) fn directory(&self) -> &Directory {
        &self.directory
    }

    /// Whether another process has this node's id: its streams must not be served here.
    pub(crate) fn identity_taken(&self) -> bool {
        self.identity_taken.load(Ordering::Acquire)
    }

    pub(crate) fn unsettled(&self) -> &NameSet {
        &self.unsettled
    }

    pub(crate) fn disowned(&self) -> &NameSet {
        &self.disowned
    }

    pub(crate) fn peers(&self) -> &Arc<Peers> {
        &self.peers
    }

    /// Names this node is creating right now (see [`Cluster::creating`]'s users in
    /// `crate::placement`).
    pub(crate) fn creating(&self) -> &Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>> {
        &self.creating
    }
}
