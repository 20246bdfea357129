//! Counters of the HTTP front, and the Prometheus text rendering of them and the engine's.
//!
//! Everything here is a relaxed atomic bumped on the request path: no lock, no allocation.
//! `GET /metrics` ([`crate::routes::metrics`]) renders a snapshot with [`render`]. Request
//! counts are kept per route and per status code in a fixed table.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use ds_engine::HistogramSnapshot;
use ds_engine::{EngineStats, FlushStats, ShardStats, ZeroWaitStats};

/// What a request was, for the `route` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    Create,
    Append,
    Read,
    LongPoll,
    Sse,
    Head,
    Delete,
    Preflight,
    Health,
    Metrics,
    Other,
}

impl Route {
    const ALL: [Route; 11] = [
        Route::Create,
        Route::Append,
        Route::Read,
        Route::LongPoll,
        Route::Sse,
        Route::Head,
        Route::Delete,
        Route::Preflight,
        Route::Health,
        Route::Metrics,
        Route::Other,
    ];

    fn label(self) -> &'static str {
        match self {
            Route::Create => "create",
            Route::Append => "append",
            Route::Read => "read",
            Route::LongPoll => "long-poll",
            Route::Sse => "sse",
            Route::Head => "head",
            Route::Delete => "delete",
            Route::Preflight => "preflight",
            Route::Health => "health",
            Route::Metrics => "metrics",
            Route::Other => "other",
        }
    }
}

/// Errors outside request handling, for the `kind` label of `ds_errors_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// `accept` failed (such as running out of file descriptors).
    Accept,
    /// A connection ended with an I/O or protocol error.
    Connection,
    /// A TLS handshake failed or timed out.
    TlsHandshake,
    /// A client stopped reading and was disconnected (see `crate::serve::stall`).
    WriteStall,
}

impl ErrorKind {
    const ALL: [ErrorKind; 4] =
        [ErrorKind::Accept, ErrorKind::Connection, ErrorKind::TlsHandshake, ErrorKind::WriteStall];

    fn label(self) -> &'static str {
        match self {
            ErrorKind::Accept => "accept",
            ErrorKind::Connection => "connection",
            ErrorKind::TlsHandshake => "tls-handshake",
            ErrorKind::WriteStall => "write-stall",
        }
    }
}

/// Most connections lingering at once (`crate::serve::linger` holds to it; the gauge's help
/// says it).
pub(crate) const CONNECTIONS_LINGERING_MAX: i64 = 1024;

/// Status codes counted one by one: 100 to 599.
const STATUS_FIRST: u16 = 100;
const STATUSES: usize = 500;

/// The front's counters (one per server).
pub(crate) struct Metrics {
    requests: Box<[AtomicU64]>,
    errors: [AtomicU64; ErrorKind::ALL.len()],
    pub append_bytes: AtomicU64,
    pub read_bytes: AtomicU64,
    live_long_poll: AtomicI64,
    live_sse: AtomicI64,
    /// SSE readers parked by the bare front (caught up, held by a lot rather than a task).
    pub sse_parked: AtomicI64,
    pub connections_open: AtomicI64,
    pub connections_refused: AtomicU64,
    /// Connections closed by the server whose client is still being read before the socket
    /// closes (`crate::serve::linger`).
    pub connections_lingering: AtomicI64,
    /// Requests the bare front answered (`crate::serve::bare`).
    pub bare_requests: AtomicU64,
    /// Connections the bare front handed to hyper (at a request with a body, or one it
    /// leaves to hyper's checks).
    pub bare_handoffs: AtomicU64,
    /// Connections served as HTTP/2, and their requests refused past the HTTP/2 budget.
    pub http2_connections: AtomicU64,
    pub http2_refused: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            requests: (0..Route::ALL.len() * STATUSES).map(|_| AtomicU64::new(0)).collect(),
            errors: Default::default(),
            append_bytes: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
            live_long_poll: AtomicI64::new(0),
            live_sse: AtomicI64::new(0),
            sse_parked: AtomicI64::new(0),
            connections_open: AtomicI64::new(0),
            connections_refused: AtomicU64::new(0),
            connections_lingering: AtomicI64::new(0),
            bare_requests: AtomicU64::new(0),
            bare_handoffs: AtomicU64::new(0),
            http2_connections: AtomicU64::new(0),
            http2_refused: AtomicU64::new(0),
        }
    }
}

/// Counts one live reader while it exists.
pub(crate) struct LiveReader<'a> {
    gauge: &'a AtomicI64,
}

impl Drop for LiveReader<'_> {
    fn drop(&mut self) {
        self.gauge.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Metrics {
    pub(crate) fn request(&self, route: Route, status: u16) {
        let Some(slot) = status.checked_sub(STATUS_FIRST).map(usize::from).filter(|&s| s < STATUSES) else {
            return;
        };
        self.requests[route as usize * STATUSES + slot].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn error(&self, kind: ErrorKind) {
        self.errors[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add(counter: &AtomicU64, amount: u64) {
        counter.fetch_add(amount, Ordering::Relaxed);
    }

    /// Counts a long-poll (`sse == false`) or SSE reader until the guard drops.
    pub(crate) fn live_reader(&self, sse: bool) -> LiveReader<'_> {
        let gauge = if sse { &self.live_sse } else { &self.live_long_poll };
        gauge.fetch_add(1, Ordering::Relaxed);
        LiveReader { gauge }
    }

    /// An SSE body began (it owns the app, so it counts itself instead of holding a guard).
    pub(crate) fn sse_started(&self) {
        self.live_sse.fetch_add(1, Ordering::Relaxed);
    }

    /// An SSE body ended (dropped).
    pub(crate) fn sse_ended(&self) {
        self.live_sse.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What the front holds right now, besides its counters.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FrontGauges {
    /// Request body bytes held in memory across connections (against their cap).
    pub body_held_bytes: u64,
}

/// What the engine reports, for one exposition.
pub(crate) struct EngineView<'a> {
    pub stats: &'a EngineStats,
    pub shards: &'a [ShardStats],
    /// A disk mode: commits write and sync.
    pub disk: bool,
    /// The device flushes that made commits durable (acid).
    pub flushes: Option<&'a FlushStats>,
    /// How long shards waited for zeros before writing (acid).
    pub zero_waits: Option<&'a ZeroWaitStats>,
}

/// The whole exposition: the front's counters, then the engine's.
pub(crate) fn render(metrics: &Metrics, front: FrontGauges, engine: EngineView<'_>) -> String {
    let mut out = String::with_capacity(8192);
    render_front(&mut out, metrics);
    let held_help = "Request body bytes held in memory (against DS_LIMITS__MAX_BODY_BUFFER_BYTES).";
    single(&mut out, "ds_request_body_held_bytes", "gauge", held_help, front.body_held_bytes);
    render_engine(&mut out, engine.stats, engine.shards, engine.disk);
    if let Some(flushes) = engine.flushes {
        render_flushes(&mut out, flushes);
    }
    if let Some(zero_waits) = engine.zero_waits {
        render_zero_waits(&mut out, zero_waits);
    }
    out
}

/// acid's waits for zeros: a commit that caught up with its segment's zero-filled prefix.
fn render_zero_waits(out: &mut String, waits: &ZeroWaitStats) {
    let waits_help = "Times a shard waited for zeros before it could write (its records caught up with the zero-fill ahead of them); every shard of its worker waits too.";
    single(out, "ds_wal_zero_waits_total", "counter", waits_help, waits.waits);
    header(out, "ds_wal_zero_wait_seconds", "histogram", "Time one wait for zeros took.");
    histogram(out, "ds_wal_zero_wait_seconds", &waits.wait_us, 1e-6);
}

/// The device flushes of acid's commits: how many, what each covered, how long each took.
fn render_flushes(out: &mut String, flushes: &FlushStats) {
    let shared_help = "1 when shards on one file system share each device flush (ext4 or XFS), 0 when each shard flushes its own log.";
    single(out, "ds_flush_shared", "gauge", shared_help, u8::from(flushes.shared));
    single(
        out,
        "ds_flushes_total",
        "counter",
        "Device flushes (fdatasync) that made commits durable.",
        flushes.flushes,
    );
    let commits_help =
        "Shard commits (batches) made durable by those flushes: more than one per flush when shared.";
    single(out, "ds_flush_commits_total", "counter", commits_help, flushes.commits);
    let records_help =
        "Records (one per accepted create, append, close or delete) made durable by those flushes.";
    single(out, "ds_flush_records_total", "counter", records_help, flushes.records);
    header(out, "ds_flush_records", "histogram", "Records made durable per device flush.");
    histogram(out, "ds_flush_records", &flushes.records_per_flush, 1.0);
    header(out, "ds_flush_seconds", "histogram", "Time one device flush (fdatasync) took.");
    histogram(out, "ds_flush_seconds", &flushes.flush_us, 1e-6);
}

fn render_front(out: &mut String, metrics: &Metrics) {
    header(out, "ds_requests_total", "counter", "HTTP requests answered, by route and status.");
    for route in Route::ALL {
        for slot in 0..STATUSES {
            let count = metrics.requests[route as usize * STATUSES + slot].load(Ordering::Relaxed);
            if count > 0 {
                let status = STATUS_FIRST as usize + slot;
                let _ = writeln!(
                    out,
                    "ds_requests_total{{route=\"{}\",status=\"{status}\"}} {count}",
                    route.label()
                );
            }
        }
    }
    let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    let append_help = "Request body bytes of accepted appends and creates.";
    single(out, "ds_append_bytes_total", "counter", append_help, load(&metrics.append_bytes));
    let read_help = "Response body bytes sent by reads (catch-up, long-poll, SSE).";
    single(out, "ds_read_bytes_total", "counter", read_help, load(&metrics.read_bytes));
    header(out, "ds_live_readers", "gauge", "Live reads in progress.");
    for (kind, gauge) in [("long-poll", &metrics.live_long_poll), ("sse", &metrics.live_sse)] {
        let _ = writeln!(out, "ds_live_readers{{kind=\"{kind}\"}} {}", gauge.load(Ordering::Relaxed));
    }
    let parked_help = "Caught-up SSE readers parked by the bare front (part of the SSE live readers).";
    single(out, "ds_sse_parked_readers", "gauge", parked_help, metrics.sse_parked.load(Ordering::Relaxed));
    let open = metrics.connections_open.load(Ordering::Relaxed);
    single(out, "ds_connections", "gauge", "Client connections open.", open);
    let lingering = metrics.connections_lingering.load(Ordering::Relaxed);
    let lingering_help = format!(
        "Connections the server closed, read until the client ends its side (at most {CONNECTIONS_LINGERING_MAX})."
    );
    single(out, "ds_connections_lingering", "gauge", &lingering_help, lingering);
    let refused_help = "Connections refused (503) past the connection limit.";
    single(out, "ds_connections_refused_total", "counter", refused_help, load(&metrics.connections_refused));
    let bare_help = "Requests without a body answered by the bare HTTP/1.1 front.";
    single(out, "ds_bare_requests_total", "counter", bare_help, load(&metrics.bare_requests));
    let handoff_help = "Connections the bare front handed to hyper.";
    single(out, "ds_bare_handoffs_total", "counter", handoff_help, load(&metrics.bare_handoffs));
    let http2_help = "Connections served as HTTP/2.";
    single(out, "ds_http2_connections_total", "counter", http2_help, load(&metrics.http2_connections));
    let http2_refused_help = "HTTP/2 requests refused (503) past the HTTP/2 request limit.";
    single(out, "ds_http2_refused_total", "counter", http2_refused_help, load(&metrics.http2_refused));
    header(out, "ds_errors_total", "counter", "Errors outside request handling, by kind.");
    for kind in ErrorKind::ALL {
        let _ = writeln!(
            out,
            "ds_errors_total{{kind=\"{}\"}} {}",
            kind.label(),
            load(&metrics.errors[kind as usize])
        );
    }
}

fn render_engine(out: &mut String, engine: &EngineStats, shards: &[ShardStats], disk: bool) {
    single(out, "ds_streams", "gauge", "Streams stored.", engine.streams);
    single(out, "ds_stored_bytes", "gauge", "Message bytes stored across all streams.", engine.stored_bytes);
    single(
        out,
        "ds_charged_bytes",
        "gauge",
        "What all streams cost against DS_LIMITS__MAX_MEMORY_BYTES (data and per-stream, per-append, per-producer charges).",
        engine.charged_bytes,
    );
    single(
        out,
        "ds_damaged_streams",
        "gauge",
        "Streams whose stored data is damaged (served up to the damage, refusing writes).",
        engine.damaged_streams,
    );
    if disk {
        let faults_help = "Pages of data files that could not be read (a file cut short under the server, a device error): read as zeros, which no checksum passes, instead of killing the process.";
        single(out, "ds_map_faults_total", "counter", faults_help, engine.map_faults);
        let unguarded_help = "Data file maps read without that protection (its table of maps was full).";
        single(out, "ds_maps_unguarded_total", "counter", unguarded_help, engine.maps_unguarded);
        let failed_help = "Shards whose log could not be written (a file system gone read-only, an I/O error): their streams refuse writes (503) until a restart; reads go on.";
        single(out, "ds_shards_failed", "gauge", failed_help, engine.shards_failed);
        let moves_help =
            "Streams compaction moved to the head of the log out of mostly-dead segments (acid).";
        single(out, "ds_compaction_moves_total", "counter", moves_help, engine.moves);
    }
    header(out, "ds_shard_queue_depth", "gauge", "Operations waiting in each shard's queue.");
    for (index, shard) in shards.iter().enumerate() {
        let _ = writeln!(out, "ds_shard_queue_depth{{shard=\"{index}\"}} {}", shard.queue_depth);
    }
    let mut batch_ops = HistogramSnapshot::default();
    let mut commit_us = HistogramSnapshot::default();
    for shard in shards {
        batch_ops.merge(&shard.batch_ops);
        commit_us.merge(&shard.commit_us);
    }
    header(out, "ds_batch_ops", "histogram", "Operations committed per batch (group commit).");
    histogram(out, "ds_batch_ops", &batch_ops, 1.0);
    if disk {
        single(
            out,
            "ds_read_copies_held_bytes",
            "gauge",
            "Bytes catch-up answers hold in copies of small records (capped at 64 MiB; past it, reads send slices of the log).",
            engine.read_copies_held_bytes,
        );
        single(
            out,
            "ds_read_copies_refused_total",
            "counter",
            "Catch-up reads that found the copies cap reached and sent their small records as slices of the log.",
            engine.read_copies_refused,
        );
        single(
            out,
            "ds_kept_answer_bytes",
            "gauge",
            "Bytes of recent catch-up answers kept for readers that ask for the same start (part of the copies above; at most 32 MiB).",
            engine.kept_answer_bytes,
        );
        single(
            out,
            "ds_kept_answer_hits_total",
            "counter",
            "Catch-up reads answered with a kept answer instead of a read of the log.",
            engine.kept_answer_hits,
        );
        header(
            out,
            "ds_commit_seconds",
            "histogram",
            "Time to make one batch durable: its write and the flush that covers it.",
        );
        histogram(out, "ds_commit_seconds", &commit_us, 1e-6);
    }
}

/// A metric with one unlabelled sample.
fn single(out: &mut String, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
    header(out, name, kind, help);
    let _ = writeln!(out, "{name} {value}");
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Cumulative buckets; `scale` turns recorded units into the metric's unit.
fn histogram(out: &mut String, name: &str, snapshot: &HistogramSnapshot, scale: f64) {
    let mut cumulative = 0;
    for (index, count) in snapshot.counts.iter().enumerate() {
        cumulative += count;
        match HistogramSnapshot::bound(index) {
            Some(bound) => {
                let _ = writeln!(out, "{name}_bucket{{le=\"{}\"}} {cumulative}", bound as f64 * scale);
            }
            None => {
                let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
            }
        }
    }
    let _ = writeln!(out, "{name}_sum {}", snapshot.sum as f64 * scale);
    let _ = writeln!(out, "{name}_count {cumulative}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_requests_by_route_and_status() {
        let metrics = Metrics::default();
        metrics.request(Route::Append, 200);
        metrics.request(Route::Append, 200);
        metrics.request(Route::Read, 404);
        metrics.request(Route::Other, 999);
        let text = render(&metrics, FrontGauges::default(), memory(&EngineStats::default()));
        assert!(text.contains("ds_requests_total{route=\"append\",status=\"200\"} 2\n"), "{text}");
        assert!(text.contains("ds_requests_total{route=\"read\",status=\"404\"} 1\n"), "{text}");
        assert!(!text.contains("999"), "out-of-range statuses are not counted: {text}");
        assert!(!text.contains("ds_commit_seconds"), "no commit histogram in memory mode");
        assert!(!text.contains("ds_flushes_total"), "no flushes in memory mode");
        assert!(!text.contains("ds_wal_zero_waits_total"), "no zero-fill in memory mode");
    }

    #[test]
    fn live_reader_guards_count_while_alive() {
        let metrics = Metrics::default();
        let first = metrics.live_reader(true);
        let _second = metrics.live_reader(true);
        drop(first);
        let _poll = metrics.live_reader(false);
        let text = render(&metrics, FrontGauges::default(), memory(&EngineStats::default()));
        assert!(text.contains("ds_live_readers{kind=\"sse\"} 1\n"), "{text}");
        assert!(text.contains("ds_live_readers{kind=\"long-poll\"} 1\n"), "{text}");
    }

    #[test]
    fn histograms_are_cumulative_and_scaled() {
        let histogram = ds_engine::testing::Histogram::default();
        histogram.record(3);
        histogram.record(1000);
        let shard =
            ShardStats { queue_depth: 2, batch_ops: histogram.snapshot(), commit_us: histogram.snapshot() };
        let flushes = ds_engine::FlushStats {
            shared: true,
            flushes: 2,
            commits: 5,
            records: 40,
            records_per_flush: histogram.snapshot(),
            flush_us: histogram.snapshot(),
        };
        let stats = EngineStats {
            read_copies_held_bytes: 4096,
            kept_answer_bytes: 512,
            kept_answer_hits: 3,
            ..EngineStats::default()
        };
        let zero_waits = ZeroWaitStats { waits: 2, wait_us: histogram.snapshot() };
        let shards = [shard];
        let engine = EngineView {
            stats: &stats,
            shards: &shards,
            disk: true,
            flushes: Some(&flushes),
            zero_waits: Some(&zero_waits),
        };
        let text = render(&Metrics::default(), FrontGauges::default(), engine);
        assert!(text.contains("ds_batch_ops_bucket{le=\"4\"} 1\n"), "{text}");
        assert!(text.contains("ds_batch_ops_bucket{le=\"1024\"} 2\n"), "{text}");
        assert!(text.contains("ds_batch_ops_bucket{le=\"+Inf\"} 2\n"), "{text}");
        assert!(text.contains("ds_batch_ops_count 2\n"), "{text}");
        assert!(text.contains("ds_commit_seconds_bucket{le=\"0.000004\"} 1\n"), "{text}");
        assert!(text.contains("ds_shard_queue_depth{shard=\"0\"} 2\n"), "{text}");
        assert!(text.contains("ds_flush_shared 1\n"), "{text}");
        assert!(text.contains("ds_read_copies_held_bytes 4096\n"), "{text}");
        assert!(text.contains("ds_kept_answer_bytes 512\n"), "{text}");
        assert!(text.contains("ds_kept_answer_hits_total 3\n"), "{text}");
        assert!(
            text.contains("ds_flushes_total 2\n") && text.contains("ds_flush_records_total 40\n"),
            "{text}"
        );
        assert!(text.contains("ds_flush_seconds_bucket{le=\"0.000004\"} 1\n"), "{text}");
        assert!(text.contains("ds_wal_zero_waits_total 2\n"), "{text}");
        assert!(text.contains("ds_wal_zero_wait_seconds_bucket{le=\"0.001024\"} 2\n"), "{text}");
    }

    fn memory(stats: &EngineStats) -> EngineView<'_> {
        EngineView { stats, shards: &[], disk: false, flushes: None, zero_waits: None }
    }
}
