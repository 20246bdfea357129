//! Where a stream request is served in a cluster (`crate::cluster` is the membership and
//! the directory), and the directory's part of creates and deletes. `forward` passes a
//! request to another node.
//!
//! - A stream this node holds: served here, no etcd round trip (creates of an existing
//!   stream too: the local create answers as the protocol says).
//! - A stream the directory gives to another node: forwarded to it (503 while it is down).
//! - A name the directory does not hold: 404, after asking etcd itself when the cache has
//!   no entry; a create claims it (compare-and-set: absent → `creating` by this node),
//!   creates the stream here, then marks it `live` (or gives the claim back if the create
//!   was refused). A fork is created on the node that holds its source.
//! - A delete marks the entry `deleting`, deletes here, then removes the entry (`delete`);
//!   the name's appends wait while the entry is not settled.
//!
//! An entry this node owns for a stream it does not hold (its create was refused or never
//! finished, or the stream expired) is stale: it is removed when met, unless this node is
//! creating that stream right now.

mod delete;
mod forward;

use std::sync::Arc;

use ds_engine::StreamName;
use hyper::{Method, Request, Response, StatusCode};
use tokio::sync::OwnedMutexGuard;

use crate::app::App;
use crate::cluster::{stream_key, Cluster, Entry, State};
use crate::http::headers::STREAM_FORKED_FROM;
use crate::http::problem::Problem;
use crate::http::request_body::RequestBody;
use crate::http::response::Body;
use crate::metrics::Route;
use crate::routes::{self, Reply, STREAM_PREFIX};
use forward::{forward, unavailable};

/// How often a create retries when the entry it read changed before its compare-and-set.
const CLAIM_ATTEMPTS: usize = 4;

/// Serves a stream request (`label` one of the stream routes) in cluster mode.
pub(crate) async fn serve(
    app: &Arc<App>,
    cluster: &Arc<Cluster>,
    label: Route,
    name: StreamName,
    request: Request<RequestBody>,
) -> Result<Reply, Problem> {
    if cluster.identity_taken() {
        let detail = format!("another process has this node's id ({:?}) in the directory", cluster.node_id);
        return Err(unavailable("identity-taken", detail));
    }
    let held = app.engine.open(&name).is_some();
    match label {
        _ if held && cluster.disowned().holds(name.as_str()) => {
            let detail =
                format!("{name} is held here but the directory gives it to another node (a split stream)");
            Err(Problem::new(StatusCode::CONFLICT, "split-stream", detail))
        }
        Route::Create if !held && cluster.etcd().regressed() => {
            let detail = "etcd went back in time (restored or replaced); creates wait until this node's streams are registered again".to_string();
            Err(unavailable("directory-regressed", detail))
        }
        Route::Create if !held => create(app, cluster, name, request).await.map(Reply::Now),
        Route::Delete if held => delete::delete(app, cluster, name).await.map(Reply::Now),
        Route::Append if held && cluster.unsettled().holds(name.as_str()) => {
            let detail =
                format!("a delete of {name} has not settled in the directory; appends wait until it has");
            Err(unavailable("delete-unsettled", detail))
        }
        _ if held => routes::stream(app, label, name, request).await,
        _ => elsewhere(app, cluster, &name, request).await.map(Reply::Now),
    }
}

fn etcd_down(error: impl std::fmt::Display) -> Problem {
    unavailable("directory-unavailable", format!("the cluster's directory cannot be reached ({error})"))
}

/// A request for a stream this node does not hold: forwarded to its owner, or 404.
async fn elsewhere(
    app: &App,
    cluster: &Cluster,
    name: &StreamName,
    request: Request<RequestBody>,
) -> Result<Response<Body>, Problem> {
    let read = matches!(*request.method(), Method::GET | Method::HEAD);
    match owner_elsewhere(app, cluster, name, read).await? {
        Some(owner) => forward(app, cluster, &owner, request).await,
        None => Err(Problem::not_found()),
    }
}

/// The node other than this one that owns `name`, or `None` when no node does (stale
/// entries of this node's are removed on the way).
async fn owner_elsewhere(
    app: &App,
    cluster: &Cluster,
    name: &StreamName,
    read: bool,
) -> Result<Option<String>, Problem> {
    let entry = cluster.directory().lookup(name.as_str(), read).await.map_err(|error| {
        if cluster.directory().synced() {
            return etcd_down(error);
        }
        let detail = format!("this node's view of the directory is not following etcd, and etcd cannot be asked about {name} ({error})");
        unavailable("directory-stale", detail)
    })?;
    match entry {
        None => Ok(None),
        Some(entry) if entry.owner != cluster.node_id => Ok(Some(entry.owner)),
        Some(entry) => {
            remove_if_stale(app, cluster, name, &entry).await;
            Ok(None)
        }
    }
}

async fn remove_if_stale(app: &App, cluster: &Cluster, name: &StreamName, entry: &Entry) {
    let creating = cluster.creating().lock().expect("creating lock").contains_key(name.as_str());
    if !creating && app.engine.open(name).is_none() {
        remove(cluster, name, entry).await;
    }
}

async fn remove(cluster: &Cluster, name: &StreamName, entry: &Entry) {
    if let Err(error) = cluster.etcd().delete_at(&stream_key(name.as_str()), entry.mod_revision).await {
        tracing::warn!(%error, stream = name.as_str(), "cannot remove a stale directory entry");
    }
}

/// PUT of a name this node does not hold.
async fn create(
    app: &Arc<App>,
    cluster: &Cluster,
    name: StreamName,
    request: Request<RequestBody>,
) -> Result<Response<Body>, Problem> {
    if let Some(source) = fork_source(&request) {
        // A fork lives with its source; `None`: the source is here or nowhere.
        if let Some(owner) = owner_elsewhere(app, cluster, &source, false).await? {
            return forward(app, cluster, &owner, request).await;
        }
    }
    // One create of a name at a time on this node; an entry of this node's for the name is
    // stale unless the stream is here by the time this create has its turn.
    let turn = CreateTurn::take(cluster, name.as_str()).await;
    if app.engine.open(&name).is_some() {
        return routes::create::create(app, name, request).await;
    }
    let key = stream_key(name.as_str());
    let revision = match claim(cluster, &name, &key).await? {
        Claim::Ours(revision) => revision,
        Claim::Owner(owner) => {
            drop(turn);
            return forward(app, cluster, &owner, request).await;
        }
    };
    let created = routes::create::create(app, name.clone(), request).await;
    let made = created.as_ref().is_ok_and(|response| response.status().is_success());
    if made {
        cluster.mark_live(name.as_str(), revision).await;
    } else if let Err(error) = cluster.etcd().delete_at(&key, revision).await {
        // The entry stays `creating`; it is removed when next met, or at the next start.
        tracing::warn!(%error, stream = name.as_str(), "cannot give a claim back after a refused create");
    }
    created
}

enum Claim {
    /// This node holds the name now, at this revision.
    Ours(i64),
    /// Another node does.
    Owner(String),
}

/// Claims `name` for this node, or finds who has it. Called on this node's create turn for
/// the name, with the stream not here: an entry of this node's is stale.
async fn claim(cluster: &Cluster, name: &StreamName, key: &[u8]) -> Result<Claim, Problem> {
    let value = Entry::encode(&cluster.node_id, State::Creating);
    for _ in 0..CLAIM_ATTEMPTS {
        let existing = match cluster.claim(key, &value).await.map_err(etcd_down)? {
            Ok(revision) => return Ok(Claim::Ours(revision)),
            Err(existing) => existing,
        };
        match Entry::decode(&existing) {
            Some(entry) if entry.owner != cluster.node_id => return Ok(Claim::Owner(entry.owner)),
            Some(entry) => remove(cluster, name, &entry).await,
            // Gone again since the compare.
            None if existing.mod_revision == 0 => {}
            None => {
                let detail = format!("the directory entry of {name} is unreadable");
                return Err(unavailable("directory-damaged", detail));
            }
        }
    }
    Err(unavailable("directory-in-flux", format!("the directory entry of {name} kept changing")))
}

/// The source a PUT forks, when it is a fork with a well-formed source path.
fn fork_source(request: &Request<RequestBody>) -> Option<StreamName> {
    let source = request.headers().get(STREAM_FORKED_FROM)?.to_str().ok()?;
    StreamName::from_path(source.strip_prefix(STREAM_PREFIX)?).ok()
}

/// This node's turn to create a name: creates of one name on one node run one at a time,
/// and while one runs (or waits) the name counts as being created here.
struct CreateTurn<'a> {
    cluster: &'a Cluster,
    name: String,
    guard: Option<OwnedMutexGuard<()>>,
}

impl<'a> CreateTurn<'a> {
    async fn take(cluster: &'a Cluster, name: &str) -> CreateTurn<'a> {
        let lock = Arc::clone(
            cluster.creating().lock().expect("creating lock").entry(name.to_string()).or_default(),
        );
        let guard = lock.lock_owned().await;
        CreateTurn { cluster, name: name.to_string(), guard: Some(guard) }
    }
}

impl Drop for CreateTurn<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut creating = self.cluster.creating().lock().expect("creating lock");
        // Only the map holds it: no other create of the name waits.
        if creating.get(&self.name).is_some_and(|lock| Arc::strong_count(lock) == 1) {
            creating.remove(&self.name);
        }
    }
}
