//! The cluster's directory as this node sees it: which node owns each stream, and which
//! nodes are alive with the address they serve on. etcd holds it; this is a cache, filled
//! from a snapshot and kept fresh by an etcd watch ([`Directory::follow`]).
//!
//! Keys: `/ds/streams/{name}` → `{"owner": id, "state": "creating"|"live"|"deleting"}`,
//! `/ds/nodes/{id}` → `{"url": "http://host:port"}` under the node's lease. The cache may
//! lag behind etcd: a name it lacks is looked up in etcd itself before anyone is told 404
//! ([`Directory::lookup`]); an owner it still names after a delete answers for itself.
//! While the watch is down the cache is marked unsynced: its entries still route requests
//! (an owner never changes while its entry lives), and names it lacks are asked of etcd
//! (503 while etcd is unreachable). How the cache follows etcd is `super::follow`'s.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::Notify;

use super::etcd::{prefix_end, Etcd, EtcdError, Kv};

/// Prefix of every key of the directory.
pub(super) const ROOT: &str = "/ds/";
/// Prefix of the stream entries.
pub(super) const STREAMS: &str = "/ds/streams/";
/// Prefix of the live nodes' entries.
pub(super) const NODES: &str = "/ds/nodes/";
/// Keys per page when the directory is read whole.
const PAGE_KEYS: i64 = 1000;
/// How long etcd's word that no entry holds a name is taken without asking again.
const ABSENT_FOR: Duration = Duration::from_secs(1);
/// Most names remembered as absent (all are forgotten when there would be more).
const ABSENT_MAX: usize = 65_536;
/// Most removed entries kept for the repair to look at one by one (past it, the repair
/// looks at every entry instead).
pub(super) const REMOVED_MAX: usize = 65_536;

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
pub(super) struct View {
    pub(super) streams: HashMap<String, Entry>,
    nodes: HashMap<String, String>,
    /// The watch is running and the view has every change up to it.
    pub(super) synced: bool,
}

impl View {
    /// Applies one change; the stream's name when it was a stream entry's.
    pub(super) fn apply<'k>(&mut self, kv: &'k Kv, deleted: bool) -> Option<&'k str> {
        let key = std::str::from_utf8(&kv.key).ok()?;
        if let Some(name) = key.strip_prefix(STREAMS) {
            match (deleted, Entry::decode(kv)) {
                (false, Some(entry)) => self.streams.insert(name.to_string(), entry),
                _ => self.streams.remove(name),
            };
            return Some(name);
        }
        if let Some(id) = key.strip_prefix(NODES) {
            match (deleted, node_authority(&kv.value)) {
                (false, Some(authority)) => self.nodes.insert(id.to_string(), authority),
                _ => self.nodes.remove(id),
            };
        }
        None
    }
}

/// The cached directory and the etcd it follows.
pub(crate) struct Directory {
    pub(super) view: RwLock<View>,
    pub etcd: Arc<Etcd>,
    /// Names etcd said no entry holds, and when it said so (see [`ABSENT_FOR`]).
    absent: Mutex<HashMap<String, Instant>>,
    /// Stream entries the watch saw removed, and whether every entry is to be looked at
    /// (after a new snapshot), for `register::repair`.
    pub(super) removed: Mutex<(HashSet<String>, bool)>,
    /// Wakes `register::repair` when `removed` gained something.
    pub(super) changed: Notify,
}

impl Directory {
    pub(crate) fn new(etcd: Arc<Etcd>) -> Directory {
        Directory {
            view: RwLock::default(),
            etcd,
            absent: Mutex::default(),
            removed: Mutex::default(),
            changed: Notify::new(),
        }
    }

    /// `name`'s entry: the cache's, or etcd's where the cache has none.
    ///
    /// A cached entry serves even while the watch is down: an entry's owner never changes
    /// while the entry lives, so the worst a stale one does is send a request to a former
    /// owner, which answers for itself. Absence is etcd's word only, remembered for
    /// [`ABSENT_FOR`] while the watch runs (the watch forgets it at any change of the name),
    /// so that a storm of requests for unknown names does not become a storm on etcd. Only a
    /// read takes it (`absence_ok`): a write right after a create on another node must find
    /// the stream even before the watch has brought its entry.
    pub(crate) async fn lookup(&self, name: &str, absence_ok: bool) -> Result<Option<Entry>, EtcdError> {
        let synced = {
            let view = self.view.read().expect("directory view lock");
            if let Some(entry) = view.streams.get(name) {
                return Ok(Some(entry.clone()));
            }
            view.synced
        };
        if synced && absence_ok && self.recently_absent(name) {
            return Ok(None);
        }
        let found = self.etcd.get(&stream_key(name)).await?;
        let entry = found.as_ref().and_then(Entry::decode);
        if entry.is_none() && synced {
            let mut absent = self.absent.lock().expect("absent names lock");
            if absent.len() >= ABSENT_MAX {
                absent.clear();
            }
            absent.insert(name.to_string(), Instant::now());
        }
        Ok(entry)
    }

    fn recently_absent(&self, name: &str) -> bool {
        let absent = self.absent.lock().expect("absent names lock");
        absent.get(name).is_some_and(|at| at.elapsed() < ABSENT_FOR)
    }

    /// Forgets what etcd said of `name`'s absence (its entry changed).
    pub(super) fn forget_absence(&self, name: &str) {
        self.absent.lock().expect("absent names lock").remove(name);
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
    pub(super) async fn read_all(&self, prefix: &[u8]) -> Result<(Vec<Kv>, i64), EtcdError> {
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
