//! A small client of etcd's v3 API through its JSON gateway (`POST /v3/kv/range` and the
//! like; keys and values base64, 64-bit numbers as strings): the few calls the directory
//! needs (read, create-if-absent, compare-and-swap, compare-and-delete, leases, watch).
//!
//! Every call but the watch must answer within [`CALL_TIMEOUT`] (a lease's keep-alive, within
//! the shorter timeout its caller gives); endpoints are tried in
//! turn, starting with the last one that answered. Anything that is not a well-formed
//! answer is an [`EtcdError`]: the directory turns it into 503s, never into a guess.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HOST};
use hyper::{Method, Request};
use serde_json::{json, Value};

use super::client::{OutBody, PeerError, Peers, Pooled};

/// Longest wait for one call's answer.
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// etcd could not be asked, or answered something unexpected.
#[derive(Clone, Debug)]
pub(crate) struct EtcdError(pub String);

impl std::fmt::Display for EtcdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "etcd: {}", self.0)
    }
}

/// One key and its value, with the revisions a compare needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Kv {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub mod_revision: i64,
    /// The lease the key is attached to (0: none).
    pub lease: i64,
}

/// What must hold of a key for a transaction to put it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Guard {
    /// The key does not exist.
    Absent,
    /// The key's last change is at this revision.
    At(i64),
}

impl Guard {
    fn compare(self, key: &[u8]) -> Value {
        match self {
            Guard::Absent => {
                json!({ "key": BASE64.encode(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0" })
            }
            Guard::At(revision) => {
                json!({ "key": BASE64.encode(key), "target": "MOD", "result": "EQUAL", "mod_revision": revision.to_string() })
            }
        }
    }
}

/// The etcd cluster, by its endpoints' `host:port`.
pub(crate) struct Etcd {
    endpoints: Vec<String>,
    next: AtomicUsize,
    peers: Arc<Peers>,
    /// The newest revision an answer carried (see [`Etcd::regressed`]).
    revision_high: AtomicI64,
    /// The id of the etcd cluster that answered (0: none yet).
    cluster_id: AtomicU64,
    /// An answer's revision went below one seen before the request was sent, or its cluster
    /// id changed: etcd was restored or replaced.
    regressed: AtomicBool,
}

impl Etcd {
    /// Endpoints as `http://host:port` URLs (comma-separated in the configuration).
    pub(crate) fn new(urls: &[String], peers: Arc<Peers>) -> Result<Etcd, String> {
        let endpoints = urls
            .iter()
            .map(|url| {
                let authority =
                    url.trim().strip_prefix("http://").unwrap_or(url.trim()).trim_end_matches('/');
                if authority.is_empty() || authority.contains('/') {
                    return Err(format!("{url}: an etcd endpoint is http://host:port"));
                }
                Ok(authority.to_string())
            })
            .collect::<Result<Vec<_>, _>>()?;
        if endpoints.is_empty() {
            return Err("no etcd endpoint".to_string());
        }
        Ok(Etcd {
            endpoints,
            next: AtomicUsize::new(0),
            peers,
            revision_high: AtomicI64::new(0),
            cluster_id: AtomicU64::new(0),
            regressed: AtomicBool::new(false),
        })
    }

    /// Sends `body` to `path` on the endpoints in turn; the first answer that parses wins.
    async fn call(&self, path: &str, body: &Value) -> Result<Value, EtcdError> {
        self.call_within(path, body, CALL_TIMEOUT).await
    }

    /// As [`Etcd::call`], each endpoint given `timeout` to answer.
    async fn call_within(&self, path: &str, body: &Value, timeout: Duration) -> Result<Value, EtcdError> {
        let start = self.next.load(Ordering::Relaxed);
        let mut last_error = String::new();
        for step in 0..self.endpoints.len() {
            let index = (start + step) % self.endpoints.len();
            let answer = tokio::time::timeout(timeout, self.call_one(index, path, body)).await;
            match answer {
                Ok(Ok(value)) => {
                    self.next.store(index, Ordering::Relaxed);
                    return Ok(value);
                }
                Ok(Err(error)) => last_error = error.0,
                Err(_) => last_error = format!("{}: no answer within {timeout:?}", self.endpoints[index]),
            }
        }
        Err(EtcdError(last_error))
    }

    /// Whether etcd went back in time (restored from a backup, or replaced): its revision
    /// fell below one this node had seen, or its cluster id changed. The directory may then
    /// lack entries of streams this node holds; creates wait until they are put back.
    pub(crate) fn regressed(&self) -> bool {
        self.regressed.load(Ordering::Acquire)
    }

    /// Takes etcd as it now is, after this node re-registered its streams in it.
    pub(crate) fn accept_regression(&self) {
        self.revision_high.store(0, Ordering::Release);
        self.regressed.store(false, Ordering::Release);
    }

    /// Notes the revision and cluster id of an answer to a request sent when the newest
    /// revision seen was `floor` (a later request never sees an older revision).
    fn observe(&self, answer: &Value, floor: i64) {
        let Some(header) = answer.get("header") else { return };
        let id = header.get("cluster_id").and_then(Value::as_str).and_then(|text| text.parse::<u64>().ok());
        if let Some(id) = id {
            let known = self.cluster_id.swap(id, Ordering::AcqRel);
            if known != 0 && known != id {
                tracing::error!(known, id, "etcd's cluster id changed");
                self.regressed.store(true, Ordering::Release);
            }
        }
        if let Some(revision) = number(header.get("revision")) {
            self.revision_high.fetch_max(revision, Ordering::AcqRel);
            if revision < floor {
                tracing::error!(revision, seen = floor, "etcd's revision went backwards");
                self.regressed.store(true, Ordering::Release);
            }
        }
    }

    async fn call_one(&self, index: usize, path: &str, body: &Value) -> Result<Value, EtcdError> {
        let floor = self.revision_high.load(Ordering::Acquire);
        let response = self.post(index, path, body).await?;
        let status = response.status();
        let bytes = response.into_body().collect().await.map_err(|e| EtcdError(e.to_string()))?.to_bytes();
        let value: Value =
            serde_json::from_slice(&bytes).map_err(|_| EtcdError(format!("{path}: not JSON ({status})")))?;
        if !status.is_success() || value.get("error").is_some() {
            return Err(EtcdError(format!("{path}: {status} {value}")));
        }
        // A keep-alive is answered by whichever member took it, from its own applied state,
        // which may lag a revision the leader gave: only reads (linearizable) and writes
        // (committed) carry a revision no later request can go below.
        if path != "/v3/lease/keepalive" {
            self.observe(&value, floor);
        }
        Ok(value)
    }

    async fn post(
        &self,
        index: usize,
        path: &str,
        body: &Value,
    ) -> Result<hyper::Response<Pooled>, EtcdError> {
        let authority = &self.endpoints[index];
        let full: OutBody = Full::new(Bytes::from(body.to_string())).map_err(|never| match never {}).boxed();
        let request = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(HOST, authority.as_str())
            .header(CONTENT_TYPE, "application/json")
            // A member cut off from the leader refuses (and cancels a watch) rather than
            // answering from a view that no longer moves.
            .header("Grpc-Metadata-hasleader", "true")
            .body(full)
            .expect("a well-formed etcd request");
        let response = self.peers.send(authority, request, CALL_TIMEOUT).await;
        response.map_err(|error: PeerError| EtcdError(format!("{authority}: {error}")))
    }

    /// The keys from `key` up to `range_end` (exclusive; `None`: `key` alone), at most
    /// `limit` of them (0: all), with the store's revision and whether more follow.
    pub(crate) async fn range(
        &self,
        key: &[u8],
        range_end: Option<&[u8]>,
        limit: i64,
    ) -> Result<(Vec<Kv>, i64, bool), EtcdError> {
        let mut body = json!({ "key": BASE64.encode(key), "limit": limit.to_string() });
        if let Some(end) = range_end {
            body["range_end"] = Value::String(BASE64.encode(end));
        }
        let answer = self.call("/v3/kv/range", &body).await?;
        let kvs = kvs(answer.get("kvs"))?;
        Ok((kvs, revision(&answer)?, answer.get("more").and_then(Value::as_bool).unwrap_or(false)))
    }

    /// `key` alone, if present.
    pub(crate) async fn get(&self, key: &[u8]) -> Result<Option<Kv>, EtcdError> {
        Ok(self.range(key, None, 1).await?.0.into_iter().next())
    }

    /// Puts `key` only where it does not exist: `Ok(Ok(mod_revision))` when put, or
    /// `Ok(Err(existing))` when another value holds it.
    pub(crate) async fn create(
        &self,
        key: &[u8],
        value: &[u8],
        lease: i64,
    ) -> Result<Result<i64, Kv>, EtcdError> {
        self.put_if(key, value, lease, Guard::Absent.compare(key)).await
    }

    /// Puts `key` only where its last change is `mod_revision`.
    pub(crate) async fn replace(
        &self,
        key: &[u8],
        value: &[u8],
        mod_revision: i64,
        lease: i64,
    ) -> Result<Result<i64, Kv>, EtcdError> {
        self.put_if(key, value, lease, Guard::At(mod_revision).compare(key)).await
    }

    async fn put_if(
        &self,
        key: &[u8],
        value: &[u8],
        lease: i64,
        compare: Value,
    ) -> Result<Result<i64, Kv>, EtcdError> {
        let mut put = json!({ "key": BASE64.encode(key), "value": BASE64.encode(value) });
        if lease != 0 {
            put["lease"] = Value::String(lease.to_string());
        }
        let body = json!({
            "compare": [compare],
            "success": [{ "request_put": put }],
            "failure": [{ "request_range": { "key": BASE64.encode(key) } }],
        });
        let answer = self.call("/v3/kv/txn", &body).await?;
        if answer.get("succeeded").and_then(Value::as_bool).unwrap_or(false) {
            return Ok(Ok(revision(&answer)?));
        }
        let existing = answer
            .pointer("/responses/0/response_range/kvs")
            .map(|kvs_value| kvs(Some(kvs_value)))
            .transpose()?
            .and_then(|found| found.into_iter().next());
        match existing {
            Some(kv) => Ok(Err(kv)),
            // Gone between the compare and the read: an absent key, as it now is.
            None => Ok(Err(Kv { key: key.to_vec(), value: Vec::new(), mod_revision: 0, lease: 0 })),
        }
    }

    /// Puts every `(key, value)` in one transaction, only where each key's [`Guard`] holds;
    /// the store's revision when they were put, `None` when any guard failed (none is put).
    pub(crate) async fn put_all(
        &self,
        changes: &[(Vec<u8>, Vec<u8>, Guard)],
    ) -> Result<Option<i64>, EtcdError> {
        let compare: Vec<Value> = changes.iter().map(|(key, _, guard)| guard.compare(key)).collect();
        let success: Vec<Value> = changes
            .iter()
            .map(|(key, value, _)| json!({ "request_put": { "key": BASE64.encode(key), "value": BASE64.encode(value) } }))
            .collect();
        let answer = self.call("/v3/kv/txn", &json!({ "compare": compare, "success": success })).await?;
        match answer.get("succeeded").and_then(Value::as_bool).unwrap_or(false) {
            true => Ok(Some(revision(&answer)?)),
            false => Ok(None),
        }
    }

    /// Deletes `key` only where its last change is `mod_revision`; whether it did.
    pub(crate) async fn delete_at(&self, key: &[u8], mod_revision: i64) -> Result<bool, EtcdError> {
        let body = json!({
            "compare": [Guard::At(mod_revision).compare(key)],
            "success": [{ "request_delete_range": { "key": BASE64.encode(key) } }],
        });
        let answer = self.call("/v3/kv/txn", &body).await?;
        Ok(answer.get("succeeded").and_then(Value::as_bool).unwrap_or(false))
    }

    /// A new lease of `ttl_secs`; its id.
    pub(crate) async fn grant(&self, ttl_secs: u64) -> Result<i64, EtcdError> {
        let answer = self.call("/v3/lease/grant", &json!({ "TTL": ttl_secs.to_string() })).await?;
        number(answer.get("ID")).ok_or_else(|| EtcdError(format!("lease grant: no ID in {answer}")))
    }

    /// Renews `lease`, each endpoint given `timeout`; its remaining seconds (0: expired).
    pub(crate) async fn keep_alive(&self, lease: i64, timeout: Duration) -> Result<i64, EtcdError> {
        let body = json!({ "ID": lease.to_string() });
        let answer = self.call_within("/v3/lease/keepalive", &body, timeout).await?;
        Ok(answer.pointer("/result/TTL").and_then(|ttl| number(Some(ttl))).unwrap_or(0))
    }

    /// Opens a watch of the keys from `key` to `range_end` from `start_revision` on; its
    /// answers stream in the returned body, one JSON object after another.
    pub(crate) async fn watch(
        &self,
        key: &[u8],
        range_end: &[u8],
        start_revision: i64,
    ) -> Result<Pooled, EtcdError> {
        let body = json!({ "create_request": {
            "key": BASE64.encode(key),
            "range_end": BASE64.encode(range_end),
            "start_revision": start_revision.to_string(),
            "progress_notify": true,
        }});
        let index = self.next.load(Ordering::Relaxed) % self.endpoints.len();
        let answer = tokio::time::timeout(CALL_TIMEOUT, self.post(index, "/v3/watch", &body)).await;
        let response = answer.map_err(|_| EtcdError("watch: no answer".to_string()))??;
        if !response.status().is_success() {
            self.next.store(index + 1, Ordering::Relaxed);
            return Err(EtcdError(format!("watch: {}", response.status())));
        }
        Ok(response.into_body())
    }
}

/// The key just past every key that starts with `prefix` (etcd's range end of a prefix).
pub(super) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// A 64-bit number the gateway spells as a string (or, sometimes, as a number).
pub(super) fn number(value: Option<&Value>) -> Option<i64> {
    match value? {
        Value::String(text) => text.parse().ok(),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

fn revision(answer: &Value) -> Result<i64, EtcdError> {
    number(answer.pointer("/header/revision")).ok_or_else(|| EtcdError(format!("no revision in {answer}")))
}

/// The key-values of an answer's `kvs` (absent: none).
pub(super) fn kvs(value: Option<&Value>) -> Result<Vec<Kv>, EtcdError> {
    let Some(Value::Array(items)) = value else { return Ok(Vec::new()) };
    items.iter().map(kv).collect()
}

pub(super) fn kv(item: &Value) -> Result<Kv, EtcdError> {
    let bytes = |field: &str| -> Result<Vec<u8>, EtcdError> {
        match item.get(field).and_then(Value::as_str) {
            Some(text) => BASE64.decode(text).map_err(|_| EtcdError(format!("{field}: not base64"))),
            None => Ok(Vec::new()),
        }
    };
    Ok(Kv {
        key: bytes("key")?,
        value: bytes("value")?,
        mod_revision: number(item.get("mod_revision")).unwrap_or(0),
        lease: number(item.get("lease")).unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_just_past_its_last_key() {
        assert_eq!(prefix_end(b"/ds/"), b"/ds0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }

    #[test]
    fn key_values_decode_from_the_gateways_spelling() {
        let item = json!({ "key": BASE64.encode("k"), "value": BASE64.encode("v"), "mod_revision": "42", "lease": "7" });
        let expected = Kv { key: b"k".to_vec(), value: b"v".to_vec(), mod_revision: 42, lease: 7 };
        assert_eq!(kv(&item).unwrap(), expected);
        assert!(kvs(None).unwrap().is_empty());
        assert!(kv(&json!({ "key": "!!" })).is_err());
        assert_eq!(number(Some(&json!(7))), Some(7));
    }
}
