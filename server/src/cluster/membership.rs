//! This node's key in the directory (`/ds/nodes/{id}`, its advertised address) under its
//! lease: joining, renewing, and noticing when the key is no longer this node's.
//!
//! Other nodes forward to the address the key names and answer 503 for this node's streams
//! while it is missing, so the key must stay put as long as the node runs. Every renewal
//! (a third of the lease's time to live) renews the lease and reads the key back: one
//! missing or on another lease is put back under this node's lease within that period;
//! one naming another address means another process took this node's id, and this node
//! stops serving its streams (503 `identity-taken`) until the key is its own again.
//! Rewriting the key at each renewal is also the heartbeat every node's directory watch
//! hears (see `super::follow`).
//! A renewal gives each etcd endpoint a quarter of the lease's time to answer, so one slow
//! member never lets the lease expire behind it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::directory::{node_authority, node_key, node_value};
use super::etcd::EtcdError;
use super::Cluster;

/// What reading the node key back found.
#[derive(Debug, PartialEq, Eq)]
enum KeyCheck {
    /// This node's address, under this node's lease (last changed at this revision).
    Ours(i64),
    /// Missing, or this node's address under another lease: to be put back.
    Lost,
    /// Another address: another process has this node's id.
    Taken(String),
}

impl Cluster {
    /// Enters this node under a new lease; returns the lease.
    pub(super) async fn join(&self) -> Result<i64, String> {
        let lease = self.etcd().grant(self.lease_ttl_secs).await.map_err(|e| e.to_string())?;
        self.enter(lease).await?;
        Ok(lease)
    }

    /// Puts this node's key under `lease`. A key left by this node's previous run (same
    /// address, lease not yet expired) is taken over; one naming another address is refused.
    async fn enter(&self, lease: i64) -> Result<(), String> {
        let etcd = self.etcd();
        let (key, value) = (node_key(&self.node_id), node_value(&self.advertise));
        for _ in 0..3 {
            let existing = match etcd.create(&key, &value, lease).await.map_err(|e| e.to_string())? {
                Ok(_) => return Ok(()),
                Err(existing) => existing,
            };
            if existing.mod_revision == 0 {
                continue;
            }
            let address = node_authority(&existing.value);
            if address.as_deref() != Some(self.advertise.as_str()) {
                return Err(format!(
                    "node id {:?} is in use by a live node at {}",
                    self.node_id,
                    address.unwrap_or_default()
                ));
            }
            let replaced = etcd.replace(&key, &value, existing.mod_revision, lease).await;
            if replaced.map_err(|e| e.to_string())?.is_ok() {
                return Ok(());
            }
        }
        Err("the node key kept changing while joining".to_string())
    }

    /// Keeps the lease alive and the node key this node's; rejoins under a new lease when
    /// the lease expired (etcd was out of reach for longer than its time to live).
    ///
    /// The key is checked by a task of its own on the same period, so a slow check (its
    /// calls wait up to etcd's usual timeout per endpoint) never delays a keep-alive.
    pub(super) async fn renew(self: Arc<Self>, lease: i64) {
        let ttl_ms = self.lease_ttl_secs * 1000;
        let period = Duration::from_millis(ttl_ms / 3);
        let answer_timeout = Duration::from_millis((ttl_ms / 4).max(100));
        let current = Arc::new(AtomicI64::new(lease));
        tokio::spawn(Arc::clone(&self).check_key(Arc::clone(&current), period));
        loop {
            tokio::time::sleep(period).await;
            let lease = current.load(Ordering::Acquire);
            match self.etcd().keep_alive(lease, answer_timeout).await {
                Ok(ttl) if ttl > 0 => {}
                Ok(_) => {
                    tracing::warn!("the node's lease expired; rejoining");
                    match self.join().await {
                        Ok(renewed) => current.store(renewed, Ordering::Release),
                        Err(error) => tracing::warn!(%error, "cannot rejoin the cluster"),
                    }
                }
                Err(EtcdError(error)) => tracing::warn!(%error, "cannot renew the node's lease"),
            }
        }
    }

    /// Checks the node key once a `period`, under the lease `current` holds.
    async fn check_key(self: Arc<Self>, current: Arc<AtomicI64>, period: Duration) {
        loop {
            tokio::time::sleep(period).await;
            if let Err(EtcdError(error)) = self.keep_key(current.load(Ordering::Acquire)).await {
                tracing::warn!(%error, "cannot check the node's key");
            }
        }
    }

    /// Reads the node key back and puts it back where it was lost.
    async fn keep_key(&self, lease: i64) -> Result<(), EtcdError> {
        let found = self.etcd().get(&node_key(&self.node_id)).await?;
        let check = match &found {
            None => KeyCheck::Lost,
            Some(kv) => match node_authority(&kv.value) {
                Some(address) if address == self.advertise && kv.lease == lease => {
                    KeyCheck::Ours(kv.mod_revision)
                }
                Some(address) if address == self.advertise => KeyCheck::Lost,
                other => KeyCheck::Taken(other.unwrap_or_default()),
            },
        };
        match check {
            KeyCheck::Ours(mod_revision) => {
                if self.identity_taken.swap(false, Ordering::AcqRel) {
                    tracing::warn!("the node key is this node's again; serving its streams");
                }
                // The heartbeat every node's watch hears (see `super::follow`).
                let (key, value) = (node_key(&self.node_id), node_value(&self.advertise));
                // Changed since it was read: the next renewal looks at it again.
                let _changed = self.etcd().replace(&key, &value, mod_revision, lease).await?;
            }
            KeyCheck::Lost => {
                tracing::warn!("the node key was missing or replaced; putting it back");
                if let Err(error) = self.enter(lease).await {
                    tracing::warn!(%error, "cannot put the node key back");
                }
            }
            KeyCheck::Taken(address) => {
                if !self.identity_taken.swap(true, Ordering::AcqRel) {
                    tracing::error!(
                        %address,
                        "another process has this node's id; its streams answer 503 until the key is this node's again"
                    );
                }
            }
        }
        Ok(())
    }
}
