//! What every request handler shares: the engine, the settings, the shutdown signal, the
//! metrics.

use std::sync::Arc;
use std::time::Duration;

use ds_engine::{Engine, StorageMode};
use tokio::sync::Semaphore;

use crate::cluster::Cluster;
use crate::config::Config;
use crate::events::frame::FrameCache;
use crate::http::cors::CorsPolicy;
use crate::http::request_body::{BodyBudget, BodyRules};
use crate::metrics::Metrics;
use crate::per_stream::PerStream;
use crate::shutdown::Shutdown;

/// Shared state of the HTTP front (one per server, behind an `Arc`).
pub(crate) struct App {
    pub engine: Engine,
    pub long_poll_timeout: Duration,
    pub sse_idle_close: Option<Duration>,
    pub read_bytes_max: usize,
    /// How request bodies are read: their largest size (a larger one could never be stored),
    /// how long one may stall, and the bytes all of them may hold at once.
    pub body: BodyRules,
    pub cors: CorsPolicy,
    /// `http` or `https`, for `Location` headers.
    pub scheme: &'static str,
    pub shutdown: Arc<Shutdown>,
    pub metrics: Arc<Metrics>,
    /// Most connections served at once.
    pub connections_max: usize,
    /// How long a response write may stay blocked before the connection is closed.
    pub write_stall_timeout: Duration,
    /// How long a connection may wait with no request open, and a request head may take.
    pub idle_timeout: Duration,
    /// Frames formatted by each stream's SSE readers, shared by the others.
    pub frames: Arc<PerStream<FrameCache>>,
    /// Whether requests without a body on plain TCP are served by the bare front
    /// (`crate::serve::bare`) rather than hyper.
    pub bare_front: bool,
    /// Whether clients may speak HTTP/2 (`crate::serve::http2`).
    pub http2: bool,
    /// Requests open on HTTP/2 connections, all together: at most as many as connections.
    pub http2_streams: Arc<Semaphore>,
    /// The TCP congestion control of connections from this host (`None`: the system's).
    pub local_tcp_congestion: Option<Box<str>>,
    /// Whether the bare front copies catch-up answers of many small messages into gather
    /// buffers before writing them (`crate::serve::bare::gather`): in acid mode, where they
    /// are slices of segment maps (a copy is cheaper there than a `writev` of many slices);
    /// not where they are heap buffers.
    pub gather_reads: bool,
    /// This node's membership of a cluster (`None`: a single node).
    pub cluster: Option<Arc<Cluster>>,
}

impl App {
    pub(crate) fn new(engine: Engine, config: &Config, cluster: Option<Arc<Cluster>>) -> App {
        let (frames, metrics, shutdown) = (Arc::default(), Arc::new(Metrics::default()), Arc::default());
        App {
            body: BodyRules {
                bytes_max: config.engine.limits.append_bytes_max,
                timeout: config.body_timeout,
                budget: Arc::new(BodyBudget::new(config.body_buffer_bytes_max)),
            },
            engine,
            long_poll_timeout: config.long_poll_timeout,
            sse_idle_close: config.sse_idle_close,
            read_bytes_max: config.read_bytes_max,
            cors: config.cors.clone(),
            scheme: if config.tls.is_some() { "https" } else { "http" },
            shutdown,
            metrics,
            connections_max: config.connections_max,
            write_stall_timeout: config.write_stall_timeout,
            idle_timeout: config.idle_timeout,
            frames,
            bare_front: config.bare_front,
            http2: config.http2,
            http2_streams: Arc::new(Semaphore::new(config.connections_max)),
            local_tcp_congestion: config.local_tcp_congestion.clone(),
            gather_reads: config.engine.mode == StorageMode::Acid,
            cluster,
        }
    }

    /// Fires the shutdown signal, then wakes every live reader so each sees it and ends
    /// (SSE bodies wait only on their stream's tail, not on the signal itself).
    pub(crate) fn begin_shutdown(&self) {
        self.shutdown.trigger();
        self.engine.wake_live_readers();
    }
}
