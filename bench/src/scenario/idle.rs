//! `idle`: C keep-alive connections, each appending one message to one stream and then
//! staying open without a request: what an idle producer's connection costs the server.
//!
//! A producer that appends now and then keeps its connection open between appends; the
//! server holds that connection's state (buffers, its answer's slot) the whole time. With
//! `--server-pid`, the server's resident memory is sampled before the connections open and
//! again once every connection has had its answer and [`SETTLE`] has passed: the difference
//! per connection is what an idle producer costs (the stream's one stored message per
//! connection included, a few dozen bytes).

use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;

use super::{create, unique_suffix};
use crate::http::Connection;
use crate::process;
use crate::report::Report;
use crate::run::Settings;
use crate::target::Target;

#[derive(Clone, Debug)]
pub struct IdleOptions {
    pub connections: usize,
    pub bytes: usize,
}

/// How long the connections sit idle, after their appends, before the memory is sampled.
const SETTLE: Duration = Duration::from_secs(1);
/// Connections opened and appending at once (so the generator does not exhaust the
/// listener's backlog).
const OPENING_AT_ONCE: usize = 256;

pub async fn run(settings: &Settings, options: &IdleOptions) -> Result<Report, String> {
    let path = settings.target.stream_path(&format!("idle-{}", unique_suffix()));
    let mut first = Connection::open(&settings.target).await.map_err(|e| format!("connect: {e}"))?;
    create(&mut first, &path, "application/octet-stream").await?;
    drop(first);
    tokio::time::sleep(SETTLE).await;
    let memory_before = settings.server_pid.and_then(process::resident_bytes);
    let started = Instant::now();
    let body = Bytes::from(vec![b'x'; options.bytes.max(1)]);
    let mut open = Vec::with_capacity(options.connections);
    let mut errors = 0u64;
    while open.len() + (errors as usize) < options.connections {
        let wave = OPENING_AT_ONCE.min(options.connections - open.len() - errors as usize);
        let openers: Vec<_> = (0..wave)
            .map(|_| {
                let (target, path, body) = (settings.target.clone(), path.clone(), body.clone());
                tokio::spawn(async move { open_and_append(&target, &path, body).await })
            })
            .collect();
        for opener in openers {
            match opener.await.map_err(|e| format!("opener: {e}"))? {
                Ok(connection) => open.push(connection),
                Err(_) => errors += 1,
            }
        }
    }
    let open_seconds = started.elapsed().as_secs_f64();
    tokio::time::sleep(SETTLE).await;
    let memory_idle = settings.server_pid.and_then(process::resident_bytes);
    let mut report = Report::new("idle");
    report.add("connections", open.len() as u64, "").add("append_errors", errors, "").add(
        "open_and_append_per_sec",
        (open.len() as f64 / open_seconds.max(1e-9)) as u64,
        "/s",
    );
    if let (Some(before), Some(after)) = (memory_before, memory_idle) {
        let per_connection = after.saturating_sub(before) / open.len().max(1) as u64;
        report.add("server_memory_per_connection_bytes", per_connection, "B");
    }
    drop(open);
    Ok(report)
}

/// A new connection that has appended `body` to `path` once (204 expected), kept open.
async fn open_and_append(target: &Target, path: &str, body: Bytes) -> Result<Connection, String> {
    let mut connection = Connection::open(target).await.map_err(|e| format!("connect: {e}"))?;
    let reply = connection
        .send(Method::POST, path, &[("content-type", "application/octet-stream")], body)
        .await
        .map_err(|e| format!("append {path}: {e}"))?;
    match reply.status {
        204 => Ok(connection),
        status => Err(format!("append {path}: status {status}")),
    }
}
