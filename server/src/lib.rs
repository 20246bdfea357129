//! ds-server: the HTTP front of the ds Durable Streams server.
//!
//! The front door is [`run`] with its [`Args`]/[`Config`], and the two log-writer hooks the
//! binary installs on its runtime ([`gather_log_lines`], [`write_log_lines`]); every module
//! is private.
//!
//! # Layout
//!
//! Bottom up; a module uses only those above it in this list.
//!
//! - `congestion`: the TCP congestion control of connections from this host; `config`:
//!   every `DS_*` variable as a flag, checked into a `Config`; `descriptors`: the
//!   open-file limit raised and checked at start; `heap`: the allocator's thresholds, fixed
//!   before any thread starts; `log_writer`: where log lines go (access lines gathered per
//!   worker turn); `shutdown`, `metrics`: server-wide state.
//! - `http`: the protocol's vocabulary: headers, problems, queries, CORS, cursors, bounded
//!   request bodies, response bodies, and what every read answer shares (`read_reply`).
//! - `per_stream`: what the live readers of one stream share in the server.
//! - `events`: the SSE wire format, and frames of events shared by a stream's readers.
//! - `cluster`: cluster mode's membership: this node's lease in etcd, the directory of
//!   which node owns each stream (cached, kept fresh by watch), HTTP to etcd and the other
//!   nodes, the streams registered at start.
//! - `app`: the state every request handler shares.
//! - `live`: long-poll and SSE reads.
//! - `routes`: one module per endpoint (create, append, read, head, delete, health,
//!   metrics, preflight); `access_log`: one line per request.
//! - `placement`: in cluster mode, where a stream request is served (here, forwarded to the
//!   stream's owner, or 503), and the directory's part of creates and deletes.
//! - `router`: path and method to route; the headers every response carries; metrics and
//!   the access line of each request.
//! - `serve`: the accept loop (the connection limit, TLS handshakes, graceful shutdown); the
//!   bare front, ds's own lean HTTP/1.1 on plain TCP for requests without a body (reads:
//!   catch-up, long-poll, SSE) and short ones whose body arrived with the head (appends),
//!   and hyper for the rest (a connection goes to hyper at its first request with a body it
//!   does not take: chunked, over 64 KiB or still arriving; write stalls, small writes
//!   joined, heads hyper would refuse answered before hyper reads them: `serve::gate`); HTTP/2 through hyper for clients that speak it (`serve::http2`:
//!   the preface on plain TCP, ALPN `h2` on TLS; its request limits).
//! - `fuzz` (the `testing` feature only): what the request-head fuzz target runs.
//!
//! # How a request flows
//!
//! `serve` accepts a connection; the bare front (or hyper, for long or chunked bodies and
//! TLS) reads each request and hands it to `router::handle`, which picks a route. A write
//! route parses and checks headers and body into an engine request and awaits
//! the shard's answer; a read route opens the stream's published view and answers from it
//! (live routes wait on the stream's tail notifications). In cluster mode `placement` comes
//! first: a stream this node does not hold is forwarded to its owner. Errors become problem documents;
//! `router::handle` adds the common headers to whatever comes back.

mod access_log;
mod app;
mod cluster;
mod config;
mod congestion;
mod descriptors;
mod events;
#[cfg(feature = "testing")]
pub mod fuzz;
mod heap;
mod http;
mod live;
mod log_writer;
mod metrics;
mod per_stream;
mod placement;
mod router;
mod routes;
mod serve;
mod shutdown;

pub use config::{Args, Config, ConfigError};
pub use heap::fix_thresholds as fix_heap_thresholds;
pub use log_writer::{
    gather_on_this_thread as gather_log_lines, write_gathered as write_log_lines, LogWriter,
};

use std::net::SocketAddr;
use std::sync::Arc;

use ds_engine::{Engine, StorageMode};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::app::App;
use crate::shutdown::StopSignals;

/// Why the server could not run.
#[derive(Debug)]
pub enum RunError {
    Descriptors(String),
    Engine(ds_engine::EngineError),
    Bind(SocketAddr, std::io::Error),
    Tls(serve::tls::TlsError),
    Cluster(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Descriptors(why) => write!(f, "not enough file descriptors: {why}"),
            RunError::Engine(error) => write!(f, "cannot start the engine: {error}"),
            RunError::Bind(address, error) => write!(f, "cannot listen on {address}: {error}"),
            RunError::Tls(error) => write!(f, "cannot set up TLS: {error}"),
            RunError::Cluster(why) => write!(f, "cluster: {why}"),
        }
    }
}

impl std::error::Error for RunError {}

/// Runs the server until SIGINT or SIGTERM, then shuts down gracefully.
pub async fn run(config: Config) -> Result<(), RunError> {
    let (serving, app_ready) = oneshot::channel();
    tokio::spawn(stop_on_signals(StopSignals::watch(), app_ready));
    tracing::info!(
        "ds-server {} starting (mode {}{})",
        env!("CARGO_PKG_VERSION"),
        config.engine.mode,
        match config.engine.mode {
            StorageMode::Memory => String::new(),
            _ => format!(", data directory {}", config.engine.data_dir.display()),
        }
    );
    let tls = config
        .tls
        .as_ref()
        .map(|files| serve::tls::acceptor(files, config.http2))
        .transpose()
        .map_err(RunError::Tls)?;
    let mut config = config;
    let descriptors = descriptors::prepare(&mut config).map_err(RunError::Descriptors)?;
    tracing::debug!(descriptors, "file descriptors the configuration needs at most");
    let engine = Engine::start(config.engine.clone()).map_err(RunError::Engine)?;
    let address = SocketAddr::new(config.host, config.port);
    let listener = TcpListener::bind(address).await.map_err(|error| RunError::Bind(address, error))?;
    let bound = listener.local_addr().map_err(|error| RunError::Bind(address, error))?;
    let cluster = match &config.cluster {
        Some(cluster) => Some(cluster::Cluster::start(cluster, &engine).await.map_err(RunError::Cluster)?),
        None => None,
    };
    let app = Arc::new(App::new(engine.clone(), &config, cluster));
    tracing::info!(
        "ds-server listening on {}://{bound} (mode {}, {} shards)",
        app.scheme,
        config.engine.mode,
        config.engine.shard_count
    );
    log_recovery(&engine);
    log_shard_hint(&engine);
    let _ = serving.send(Arc::clone(&app));
    serve::serve(listener, app, tls).await;
    let stats = engine.stats();
    tokio::task::spawn_blocking(move || engine.shutdown()).await.ok();
    let ops_per_batch = stats.ops as f64 / stats.batches.max(1) as f64;
    tracing::info!(
        "ds-server stopped ({} streams, {} ops in {} batches, {ops_per_batch:.1} ops per batch)",
        stats.streams,
        stats.ops,
        stats.batches
    );
    Ok(())
}

/// acid where each shard flushes its own log (a file system where device flushes cannot be
/// shared, or `DS_STORAGE__SHARED_FLUSH=false`): shards beyond the CPUs there are to run them
/// split the same appends into more, smaller group commits, each with its own device flush
/// (see the shard-count tables in docs/performance/README.md). Said at start, because the count is fixed when the
/// data directory is created. Where flushes are shared the shard count costs far less, and
/// nothing is said.
fn log_shard_hint(engine: &Engine) {
    let config = engine.config();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let flushes_shared = engine.flush_stats().shared;
    if config.mode == StorageMode::Acid && !flushes_shared && config.shard_count as usize > cpus {
        tracing::info!(
            "acid: {} shards on {cpus} CPU(s), each flushing its own log; fewer shards would group \
             more appends per device flush (DS_STORAGE__ACID_SHARD_COUNT, fixed when the data directory is created)",
            config.shard_count
        );
    }
}

/// One line per recovered shard that had something to replay or found damage.
fn log_recovery(engine: &Engine) {
    let reports = engine.recovery_reports();
    if reports.is_empty() {
        return;
    }
    let records: u64 = reports.iter().map(|r| r.records_replayed).sum();
    let bytes: u64 = reports.iter().map(|r| r.bytes_replayed).sum();
    let files: u64 = reports.iter().map(|r| r.files).sum();
    let clean = reports.iter().all(|r| r.clean_shutdown);
    let fresh =
        reports.iter().all(|r| r.checkpoint_lsn.is_none() && r.records_replayed == 0 && r.damage.is_empty());
    match engine.config().mode {
        ds_engine::StorageMode::Acid if fresh => {
            tracing::info!("acid: a new data directory, {} shards", reports.len())
        }
        ds_engine::StorageMode::Acid => {
            tracing::info!(records, bytes, clean_shutdown = clean, "recovered {} shards", reports.len())
        }
        _ => tracing::info!(records, bytes, "recovered {files} stream files"),
    }
    for (shard, report) in reports.iter().enumerate() {
        for damage in &report.damage {
            let what = match damage.torn {
                true => "recovery cut the unfinished end of a log a crash left (a write never acknowledged; cut bytes kept in dropped/)",
                false => "recovery found damage (stepped over; what it touches is marked, set aside files kept in dropped/)",
            };
            tracing::warn!(
                shard,
                file = %damage.file.display(),
                position = damage.position,
                reason = %damage.reason,
                quarantined = damage.quarantined.len(),
                "{what}"
            );
        }
        if report.damage.is_empty() && report.stale_bytes > 0 {
            tracing::info!(
                shard,
                stale_bytes = report.stale_bytes,
                "an unfinished write was left behind a seal"
            );
        }
    }
}

/// The first SIGINT or SIGTERM shuts the server down gracefully: at once when it serves
/// (`app_ready` has its app), else as soon as its start is done (recovering a data directory
/// cannot be cut short). The next one ends the process at once by the signal's default
/// action, as a crash would (nothing acknowledged is lost; the next start recovers; access
/// lines still gathered by a worker are).
async fn stop_on_signals(mut signals: StopSignals, mut app_ready: oneshot::Receiver<Arc<App>>) {
    let (first, _) = signals.next().await;
    let app = match app_ready.try_recv() {
        Ok(app) => app,
        // The start failed: the process is on its way out.
        Err(oneshot::error::TryRecvError::Closed) => return,
        Err(oneshot::error::TryRecvError::Empty) => {
            tracing::info!(
                "{first} during the start: the server stops once it is up (send it again to exit at once)"
            );
            tokio::select! {
                app = app_ready => match app {
                    Ok(app) => app,
                    Err(_) => return,
                },
                (again, number) = signals.next() => exit_at_once(again, number),
            }
        }
    };
    tracing::info!("{first}: shutting down");
    app.begin_shutdown();
    let (again, number) = signals.next().await;
    exit_at_once(again, number);
}

fn exit_at_once(name: &str, number: libc::c_int) -> ! {
    tracing::warn!("{name} again: exiting at once, without a clean shutdown (the next start recovers)");
    shutdown::die_by(number)
}
