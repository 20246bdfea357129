//! The directory cache following etcd: a snapshot of every key under `/ds/`, then a watch
//! from just after it, each change applied as it comes.
//!
//! A watch can freeze without an error: a member cut off from its cluster keeps the
//! stream open and sends nothing. So the watch is asked of a member that has a leader
//! (`Grpc-Metadata-hasleader`, see `super::etcd`), with progress notifications, and every
//! node rewrites its own key at each lease renewal (`super::membership`): a healthy watch
//! hears something at least once a renewal period. One silent for `silence_max` while
//! etcd's store moved past the last revision it delivered is dropped, the cache marked
//! unsynced, and a new snapshot taken; silent while the store stands still (etcd slow to
//! write), it is kept.
//! Stream entries removed, and every snapshot after the first (which follows the start's
//! registration), are passed to `super::register`'s repair, which puts back the entries of
//! streams this node holds.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use serde_json::Value;

use super::directory::{Directory, View, ROOT};
use super::etcd::{self, prefix_end, EtcdError};

/// Wait before a new snapshot after the watch failed.
const RETRY_WAIT: Duration = Duration::from_millis(500);
/// Largest watch answer taken.
const ANSWER_BYTES_MAX: usize = 64 << 20;

impl Directory {
    /// Keeps the cache following etcd until the process ends; a watch silent for
    /// `silence_max` is taken as frozen.
    pub(crate) async fn follow(self: Arc<Self>, silence_max: Duration) {
        // The start registered this node's streams just before: the first snapshot needs no
        // look at every entry; a later one may follow changes the watch missed.
        let mut recheck = false;
        loop {
            let followed = self.snapshot_and_watch(silence_max, recheck).await;
            recheck = true;
            if let Err(error) = followed {
                tracing::warn!(%error, "directory watch interrupted; taking a new snapshot");
            }
            self.view.write().expect("directory view lock").synced = false;
            tokio::time::sleep(RETRY_WAIT).await;
        }
    }

    async fn snapshot_and_watch(&self, silence_max: Duration, recheck: bool) -> Result<(), EtcdError> {
        let (kvs, revision) = self.read_all(ROOT.as_bytes()).await?;
        let mut body = self.etcd.watch(ROOT.as_bytes(), &prefix_end(ROOT.as_bytes()), revision + 1).await?;
        {
            let mut view = self.view.write().expect("directory view lock");
            *view = View::default();
            for kv in &kvs {
                view.apply(kv, false);
            }
            view.synced = true;
        }
        if recheck {
            self.removed.lock().expect("removed entries lock").1 = true;
            self.changed.notify_one();
        }
        let mut pending: Vec<u8> = Vec::new();
        let mut watched = revision;
        loop {
            let Ok(frame) = tokio::time::timeout(silence_max, body.frame()).await else {
                // Quiet is not frozen: etcd may be slow to write (heartbeats stall too). Only
                // a store that moved past what the watch delivered means the watch froze.
                let (_, current, _) = self.etcd.range(ROOT.as_bytes(), None, 1).await?;
                if current <= watched {
                    continue;
                }
                return Err(EtcdError(format!(
                    "watch: nothing heard for {silence_max:?} while etcd moved from revision {watched} to {current}"
                )));
            };
            let Some(frame) = frame else { return Err(EtcdError("watch ended".to_string())) };
            let frame = frame.map_err(|error| EtcdError(format!("watch: {error}")))?;
            let Ok(data) = frame.into_data() else { continue };
            pending.extend_from_slice(&data);
            let consumed = self.apply_answers(&pending, &mut watched)?;
            pending.drain(..consumed);
            if pending.len() > ANSWER_BYTES_MAX {
                return Err(EtcdError("watch: an answer larger than 64 MiB".to_string()));
            }
        }
    }

    /// Applies the whole watch answers at the start of `bytes`; how many bytes they took.
    /// `watched` becomes the newest store revision an answer was sent at.
    fn apply_answers(&self, bytes: &[u8], watched: &mut i64) -> Result<usize, EtcdError> {
        let mut answers = serde_json::Deserializer::from_slice(bytes).into_iter::<Value>();
        let mut consumed = 0;
        while let Some(parsed) = answers.next() {
            let answer = match parsed {
                Ok(answer) => answer,
                // The rest of the answer is in a later frame.
                Err(error) if error.is_eof() => break,
                Err(error) => return Err(EtcdError(format!("watch: an answer that is not JSON ({error})"))),
            };
            consumed = answers.byte_offset();
            let sent_at =
                answer.pointer("/result/header/revision").or_else(|| answer.pointer("/header/revision"));
            if let Some(revision) = etcd::number(sent_at) {
                *watched = (*watched).max(revision);
            }
            let result = answer.get("result").unwrap_or(&answer);
            if answer.get("error").is_some() || result.get("canceled").and_then(Value::as_bool) == Some(true)
            {
                return Err(EtcdError(format!("watch canceled: {answer}")));
            }
            let Some(Value::Array(events)) = result.get("events") else { continue };
            self.apply_events(events)?;
        }
        Ok(consumed)
    }

    fn apply_events(&self, events: &[Value]) -> Result<(), EtcdError> {
        let mut removed = Vec::new();
        {
            let mut view = self.view.write().expect("directory view lock");
            for event in events {
                let deleted = event.get("type").and_then(Value::as_str) == Some("DELETE");
                let Some(kv) = event.get("kv").map(etcd::kv).transpose()? else { continue };
                if let Some(name) = view.apply(&kv, deleted) {
                    self.forget_absence(name);
                    if deleted {
                        removed.push(name.to_string());
                    }
                }
            }
        }
        if !removed.is_empty() {
            let mut pending = self.removed.lock().expect("removed entries lock");
            let (names, check_all) = &mut *pending;
            names.extend(removed);
            if names.len() > super::directory::REMOVED_MAX {
                names.clear();
                *check_all = true;
            }
            drop(pending);
            self.changed.notify_one();
        }
        Ok(())
    }
}
