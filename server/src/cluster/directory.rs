//! The cluster's directory as this node sees it: which node owns each stream, and which
//! nodes are alive with the address they serve on. etcd holds it; this is a cache, filled
//! from a snapshot and kept fresh by an etcd watch ([`Directory::follow`]).
//!
//! Keys: `/ds/streams/{name}` → `{"owner": id, "state": "creating"|"live"|"deleting"}`,
//! `/ds/nodes/{id}` → `{"url": "http://host:port"}` under the node's lease. The cache may
//! lag behind etcd: a name it lacks is looked up in etcd itself before anyone is told 404
//! ([`Directory::lookup`]); an owner it still names after a delete answers for itself.
//! While the watch is down the cache is marked unsynced and lookups go to etcd (which then
//! answer 503 if etcd is unreachable).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use http_body_util::BodyExt;
use serde_json::{json, Value};

use super::etcd::{self, prefix_end, Etcd, EtcdError, Kv};

/// Prefix of every key of the directory.
pub(super) const ROOT: &str = "/ds/";
/// Prefix of the stream entries.
pub(super) const STREAMS: &str = "/ds/streams/";
/// Prefix of the live nodes' entries.
pub(super) const NODES: &str = "/ds/nodes/";
/// Keys per page when the directory is read whole.
const PAGE_KEYS: i64 = 1000;

/// Where a stream's directory entry says it is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// Claimed by its owner, whose local create may not have happened yet.
    Creating,
    Live,
    /// Its owner is deleting it.
    Deleting,
}

impl State {
    fn as_str(self) -> &'static str {
        match self {
            State::Creating => "creating",
            State::Live => "live",
            State::Deleting => "deleting",
        }
    }
}

/// A stream's directory entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub owner: String,
    pub state: State,
    /// etcd's revision of the entry's last change (for compare-and-swap).
    pub mod_revision: i64,
}

impl Entry {
    pub(crate) fn encode(owner: &str, state: State) -> Vec<u8> {
        json!({ "owner": owner, "state": state.as_str() }).to_string().into_bytes()
    }

    pub(crate) fn decode(kv: &Kv) -> Option<Entry> {
        let value: Value = serde_json::from_slice(&kv.value).ok()?;
        let state = match value.get("state")?.as_str()? {
            "creating" => State::Creating,
            "live" => State::Live,
            "deleting" => State::Deleting,
            _ => return None,
        };
        let owner = value.get("owner")?.as_str()?.to_string();
        Some(Entry { owner, state, mod_revision: kv.mod_revision })
    }
}

pub(crate) fn stream_key(name: &str) -> Vec<u8> {
    format!("{STREAMS}{name}").into_bytes()
}

pub(super) fn node_key(id: &str) -> Vec<u8> {
    format!("{NODES}{id}").into_bytes()
}

pub(super) fn node_value(authority: &str) -> Vec<u8> {
    json!({ "url": format!("http://{authority}") }).to_string().into_bytes()
}

/// The `host:port` a node entry names.
pub(super) fn node_authority(value: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(value).ok()?;
    Some(value.get("url")?.as_str()?.strip_prefix("http://")?.to_string())
}

#[derive(Default)]
struct View {
    streams: HashMap<String, Entry>,
    nodes: HashMap<String, String>,
    /// The watch is running and the view has every change up to it.
    synced: bool,
}

impl View {
    fn apply(&mut self, kv: &Kv, deleted: bool) {
        let Ok(key) = std::str::from_utf8(&kv.key) else { return };
        if let Some(name) = key.strip_prefix(STREAMS) {
            match (deleted, Entry::decode(kv)) {
                (false, Some(entry)) => self.streams.insert(name.to_string(), entry),
                _ => self.streams.remove(name),
            };
        } else if let Some(id) = key.strip_prefix(NODES) {
            match (deleted, node_authority(&kv.value)) {
                (false, Some(authority)) => self.nodes.insert(id.to_string(), authority),
                _ => self.nodes.remove(id),
            };
        }
    }
}

/// The cached directory and the etcd it follows.
pub(crate) struct Directory {
    view: RwLock<View>,
    pub etcd: Arc<Etcd>,
}

impl Directory {
    pub(crate) fn new(etcd: Arc<Etcd>) -> Directory {
        Directory { view: RwLock::default(), etcd }
    }

    /// The cached entry of `name`, if the cache is synced and has one.
    pub(crate) fn cached(&self, name: &str) -> Option<Entry> {
        let view = self.view.read().expect("directory view lock");
        view.synced.then(|| view.streams.get(name).cloned()).flatten()
    }

    /// `name`'s entry: the cache's, or etcd's where the cache has none.
    pub(crate) async fn lookup(&self, name: &str) -> Result<Option<Entry>, EtcdError> {
        if let Some(entry) = self.cached(name) {
            return Ok(Some(entry));
        }
        let found = self.etcd.get(&stream_key(name)).await?;
        Ok(found.as_ref().and_then(Entry::decode))
    }

    /// Where node `id` serves, while its lease lives: the cache's answer, or etcd's where
    /// the cache does not have the node (it may lag behind a node that just joined).
    pub(crate) async fn node(&self, id: &str) -> Result<Option<String>, EtcdError> {
        if let Some(authority) = self.view.read().expect("directory view lock").nodes.get(id) {
            return Ok(Some(authority.clone()));
        }
        let found = self.etcd.get(&node_key(id)).await?;
        Ok(found.and_then(|kv| node_authority(&kv.value)))
    }

    /// Whether the cache follows etcd.
    pub(crate) fn synced(&self) -> bool {
        self.view.read().expect("directory view lock").synced
    }

    /// Every stream entry, read from etcd page by page.
    pub(crate) async fn all_streams(&self) -> Result<Vec<(String, Entry)>, EtcdError> {
        let (kvs, _) = self.read_all(STREAMS.as_bytes()).await?;
        let entries = kvs.iter().filter_map(|kv| {
            let name = std::str::from_utf8(&kv.key).ok()?.strip_prefix(STREAMS)?.to_string();
            Some((name, Entry::decode(kv)?))
        });
        Ok(entries.collect())
    }

    /// Every key under `prefix` and the revision they were read at.
    async fn read_all(&self, prefix: &[u8]) -> Result<(Vec<Kv>, i64), EtcdError> {
        let end = prefix_end(prefix);
        let (mut all, revision, mut more) = self.etcd.range(prefix, Some(&end), PAGE_KEYS).await?;
        while more {
            let mut from = all.last().map(|kv| kv.key.clone()).unwrap_or_default();
            from.push(0);
            let (page, _, page_more) = self.etcd.range(&from, Some(&end), PAGE_KEYS).await?;
            more = page_more && !page.is_empty();
            all.extend(page);
        }
        Ok((all, revision))
    }

    /// Keeps the cache following etcd until the process ends: a snapshot, then the watch
    /// from just after it; when either fails, the cache is unsynced until they work again.
    pub(crate) async fn follow(self: Arc<Self>) {
        loop {
            if let Err(error) = self.snapshot_and_watch().await {
                tracing::warn!(%error, "directory watch interrupted; retrying");
            }
            self.view.write().expect("directory view lock").synced = false;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    async fn snapshot_and_watch(&self) -> Result<(), EtcdError> {
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
        let mut pending: Vec<u8> = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|error| EtcdError(format!("watch: {error}")))?;
            let Ok(data) = frame.into_data() else { continue };
            pending.extend_from_slice(&data);
            let consumed = self.apply_answers(&pending)?;
            pending.drain(..consumed);
            if pending.len() > 64 << 20 {
                return Err(EtcdError("watch: an answer larger than 64 MiB".to_string()));
            }
        }
        Err(EtcdError("watch ended".to_string()))
    }

    /// Applies the whole watch answers at the start of `bytes`; how many bytes they took.
    fn apply_answers(&self, bytes: &[u8]) -> Result<usize, EtcdError> {
        let mut answers = serde_json::Deserializer::from_slice(bytes).into_iter::<Value>();
        let mut consumed = 0;
        while let Some(Ok(answer)) = answers.next() {
            consumed = answers.byte_offset();
            let result = answer.get("result").unwrap_or(&answer);
            if answer.get("error").is_some() || result.get("canceled").and_then(Value::as_bool) == Some(true)
            {
                return Err(EtcdError(format!("watch canceled: {answer}")));
            }
            let Some(Value::Array(events)) = result.get("events") else { continue };
            let mut view = self.view.write().expect("directory view lock");
            for event in events {
                let deleted = event.get("type").and_then(Value::as_str) == Some("DELETE");
                if let Some(kv) = event.get("kv").map(etcd::kv).transpose()? {
                    view.apply(&kv, deleted);
                }
            }
        }
        Ok(consumed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: &[u8], mod_revision: i64) -> Kv {
        Kv { key: key.as_bytes().to_vec(), value: value.to_vec(), mod_revision, lease: 0 }
    }

    #[test]
    fn entries_round_trip_and_changes_apply_to_the_view() {
        let mut view = View::default();
        view.apply(&kv("/ds/streams/a/b", &Entry::encode("n1", State::Live), 7), false);
        view.apply(&kv("/ds/nodes/n1", &node_value("127.0.0.1:9"), 8), false);
        let entry = view.streams.get("a/b").unwrap();
        assert_eq!((entry.owner.as_str(), entry.state, entry.mod_revision), ("n1", State::Live, 7));
        assert_eq!(view.nodes.get("n1").map(String::as_str), Some("127.0.0.1:9"));
        view.apply(&kv("/ds/streams/a/b", b"", 9), true);
        view.apply(&kv("/ds/nodes/n1", b"", 9), true);
        assert!(view.streams.is_empty() && view.nodes.is_empty());
        assert_eq!(Entry::decode(&kv("/ds/streams/x", b"{\"owner\":\"n\",\"state\":\"odd\"}", 1)), None);
    }
}
