//! DELETE of a stream this node holds, in the directory and here: the entry is marked
//! `deleting`, the stream deleted here, then the entry removed (the stream gone) or marked
//! `live` again (still here: the delete was refused, or the stream is soft-deleted while
//! forks read it).
//!
//! A `deleting` entry never outlives its request silently. From the mark until the entry is
//! settled the name's appends are refused (`crate::cluster::NameSet`); when etcd leaves a
//! step's outcome unknown (no answer, or an error after the mark), a task settles the entry
//! from what is here, retrying until etcd answers. A delete the client was not told
//! succeeded is rolled back, never finished later (see `crate::cluster`'s start too).

use std::sync::Arc;
use std::time::Duration;

use ds_engine::StreamName;
use hyper::{Response, StatusCode};

use super::{etcd_down, unavailable};
use crate::app::App;
use crate::cluster::{stream_key, Cluster, Entry, EtcdError, State};
use crate::http::problem::Problem;
use crate::http::response::Body;
use crate::routes;

/// First wait between tries to settle an entry; doubled up to [`SETTLE_RETRY_MAX`].
const SETTLE_RETRY_FIRST: Duration = Duration::from_millis(100);
const SETTLE_RETRY_MAX: Duration = Duration::from_secs(5);

/// DELETE of a stream this node holds.
pub(super) async fn delete(
    app: &Arc<App>,
    cluster: &Arc<Cluster>,
    name: StreamName,
) -> Result<Response<Body>, Problem> {
    let key = stream_key(name.as_str());
    let etcd = cluster.etcd();
    let entry = etcd.get(&key).await.map_err(etcd_down)?.as_ref().and_then(Entry::decode);
    let revision = match entry {
        Some(entry) if entry.owner != cluster.node_id => {
            let detail = format!("{name} is held here but the directory gives it to node {:?}", entry.owner);
            return Err(Problem::new(StatusCode::CONFLICT, "split-stream", detail));
        }
        Some(entry) => {
            cluster.unsettled().hold(name.as_str());
            let deleting = Entry::encode(&cluster.node_id, State::Deleting);
            match etcd.replace(&key, &deleting, entry.mod_revision, 0).await {
                Ok(Ok(revision)) => Some(revision),
                Ok(Err(_)) => {
                    cluster.unsettled().release(name.as_str());
                    return Err(unavailable("directory-in-flux", format!("the entry of {name} changed")));
                }
                Err(error) => {
                    // The mark may have been made: settle from what is here, later.
                    settle_later(app, cluster, name);
                    return Err(etcd_down(error));
                }
            }
        }
        None => None,
    };
    let deleted = routes::delete::delete(app, name.clone()).await;
    let Some(revision) = revision else { return deleted };
    match settle_at(app, cluster, &name, revision).await {
        Ok(()) => cluster.unsettled().release(name.as_str()),
        Err(error) => {
            tracing::warn!(%error, stream = name.as_str(), "cannot settle a directory entry after a delete");
            settle_later(app, cluster, name);
        }
    }
    deleted
}

/// Settles the entry this node marked `deleting` at `revision`: removed if the stream is
/// gone, `live` again if it is still here.
async fn settle_at(app: &App, cluster: &Cluster, name: &StreamName, revision: i64) -> Result<(), EtcdError> {
    let (key, etcd) = (stream_key(name.as_str()), cluster.etcd());
    match app.engine.open(name) {
        None => etcd.delete_at(&key, revision).await.map(|_| ()),
        Some(_) => {
            etcd.replace(&key, &Entry::encode(&cluster.node_id, State::Live), revision, 0).await.map(|_| ())
        }
    }
}

/// Settles `name`'s entry in the background, retrying until etcd answers; its appends stay
/// held back until then.
fn settle_later(app: &Arc<App>, cluster: &Arc<Cluster>, name: StreamName) {
    let (app, cluster) = (Arc::clone(app), Arc::clone(cluster));
    tokio::spawn(async move {
        let mut wait = SETTLE_RETRY_FIRST;
        loop {
            match settle_unknown(&app, &cluster, &name).await {
                Ok(()) => break,
                Err(error) => {
                    tracing::warn!(%error, stream = name.as_str(), "cannot settle a directory entry yet")
                }
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(SETTLE_RETRY_MAX);
        }
        cluster.unsettled().release(name.as_str());
        tracing::info!(stream = name.as_str(), "a delete's directory entry settled");
    });
}

/// Settles an entry in an unknown state from what is here: one of this node's left
/// `deleting` is settled as [`settle_at`] does; any other is left as it is.
async fn settle_unknown(app: &App, cluster: &Cluster, name: &StreamName) -> Result<(), EtcdError> {
    let found = cluster.etcd().get(&stream_key(name.as_str())).await?;
    match found.as_ref().and_then(Entry::decode) {
        Some(entry) if entry.owner == cluster.node_id && entry.state == State::Deleting => {
            settle_at(app, cluster, name, entry.mod_revision).await
        }
        _ => Ok(()),
    }
}
