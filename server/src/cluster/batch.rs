//! The directory writes of creates, batched: claims (group-committed, many per etcd
//! transaction) and `live` marks (off the create's path).
//!
//! etcd makes each write durable before it answers, so a create that wrote its claim alone
//! would wait for one etcd commit per stream. Claims that arrive while a batch is in
//! flight wait in a bounded queue and go together in the next transaction, each guarded by
//! "absent"; if any guard fails (a name claimed elsewhere meanwhile), the batch is retried
//! claim by claim, so each learns its own owner.
//!
//! A create answers once its claim (`creating`) and the local create are done: an entry
//! `creating` by this node for a stream it holds serves every request already. Marking it
//! `live` is bookkeeping and waits for the next batch of marks; a batch whose guards fail
//! (an entry changed meanwhile, say by a delete) is retried mark by mark.
//!
//! Either queue, full, sends the write on its own at once: a full queue never blocks nor
//! drops a create.

use std::collections::HashSet;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::directory::{stream_key, Entry, State};
use super::etcd::{Etcd, EtcdError, Guard, Kv};

/// Most writes in one transaction (etcd allows 128 operations per transaction).
const BATCH_MAX: usize = 64;
/// Most claims, and most marks, waiting.
const QUEUE_MAX: usize = 4096;

/// What a claim finds: `Ok(revision)` when it put its entry, `Err(existing)` when another
/// entry holds the name.
pub(super) type Claimed = Result<Result<i64, Kv>, EtcdError>;

struct ClaimRequest {
    key: Vec<u8>,
    value: Vec<u8>,
    reply: oneshot::Sender<Claimed>,
}

/// The two queues and their workers.
pub(super) struct Batcher {
    claims: mpsc::Sender<ClaimRequest>,
    marks: mpsc::Sender<(String, i64)>,
    etcd: Arc<Etcd>,
    node_id: String,
}

impl Batcher {
    pub(super) fn start(etcd: Arc<Etcd>, node_id: String) -> Batcher {
        let (claims, claims_waiting) = mpsc::channel(QUEUE_MAX);
        let (marks, marks_waiting) = mpsc::channel(QUEUE_MAX);
        tokio::spawn(claim_batches(claims_waiting, Arc::clone(&etcd)));
        tokio::spawn(mark_batches(marks_waiting, Arc::clone(&etcd), node_id.clone()));
        Batcher { claims, marks, etcd, node_id }
    }

    /// Puts `value` at `key` where no entry is.
    pub(super) async fn claim(&self, key: Vec<u8>, value: Vec<u8>) -> Claimed {
        let (reply, answer) = oneshot::channel();
        match self.claims.try_send(ClaimRequest { key, value, reply }) {
            Ok(()) => {
                answer.await.unwrap_or_else(|_| Err(EtcdError("the claim batcher stopped".to_string())))
            }
            Err(refused) => {
                let request = refused.into_inner();
                self.etcd.create(&request.key, &request.value, 0).await
            }
        }
    }

    /// Marks `name`'s entry, claimed at `revision`, `live` (soon).
    pub(super) async fn mark_live(&self, name: &str, revision: i64) {
        if let Err(refused) = self.marks.try_send((name.to_string(), revision)) {
            let (name, revision) = refused.into_inner();
            mark_one(&self.etcd, &self.node_id, &name, revision).await;
        }
    }
}

async fn claim_batches(mut waiting: mpsc::Receiver<ClaimRequest>, etcd: Arc<Etcd>) {
    let mut batch = Vec::with_capacity(BATCH_MAX);
    while waiting.recv_many(&mut batch, BATCH_MAX).await > 0 {
        let distinct = batch.iter().map(|claim| &claim.key).collect::<HashSet<_>>().len() == batch.len();
        let together = match batch.len() {
            1 => None,
            _ if !distinct => None,
            _ => {
                let changes: Vec<_> = batch
                    .iter()
                    .map(|claim| (claim.key.clone(), claim.value.clone(), Guard::Absent))
                    .collect();
                Some(etcd.put_all(&changes).await)
            }
        };
        match together {
            Some(Ok(Some(revision))) => {
                for claim in batch.drain(..) {
                    let _ = claim.reply.send(Ok(Ok(revision)));
                }
            }
            Some(Err(error)) => {
                for claim in batch.drain(..) {
                    let _ = claim.reply.send(Err(error.clone()));
                }
            }
            // Alone, or a guard failed: one by one.
            None | Some(Ok(None)) => {
                for claim in batch.drain(..) {
                    let _ = claim.reply.send(etcd.create(&claim.key, &claim.value, 0).await);
                }
            }
        }
    }
}

async fn mark_batches(mut waiting: mpsc::Receiver<(String, i64)>, etcd: Arc<Etcd>, node_id: String) {
    let mut batch = Vec::with_capacity(BATCH_MAX);
    while waiting.recv_many(&mut batch, BATCH_MAX).await > 0 {
        let live = Entry::encode(&node_id, State::Live);
        let changes: Vec<_> = batch
            .iter()
            .map(|(name, revision)| (stream_key(name), live.clone(), Guard::At(*revision)))
            .collect();
        if !matches!(etcd.put_all(&changes).await, Ok(Some(_))) {
            for (name, revision) in &batch {
                mark_one(&etcd, &node_id, name, *revision).await;
            }
        }
        batch.clear();
    }
}

async fn mark_one(etcd: &Etcd, node_id: &str, name: &str, revision: i64) {
    let live = Entry::encode(node_id, State::Live);
    if let Err(error) = etcd.replace(&stream_key(name), &live, revision, 0).await {
        // It stays `creating`; the next start settles it.
        tracing::warn!(%error, stream = name, "cannot mark a created stream live in the directory");
    }
}
