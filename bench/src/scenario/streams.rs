//! `streams`: create N streams, each with one small first message, over C connections
//! (in the PUT's body, or with `--append` in a POST after an empty PUT).
//!
//! Reports creations per second and, with `--server-pid`, the server's resident memory per
//! stream (growth during the run divided by N) — the figure that says how many idle streams
//! one node holds.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use hyper::Method;

use crate::http::Connection;
use crate::process;
use crate::report::Report;
use crate::run::Settings;
use crate::server_metrics::ServerCounters;
use crate::stats::Latencies;
use crate::target::Target;

#[derive(Clone, Debug)]
pub struct StreamsOptions {
    pub count: usize,
    /// Size of each stream's first (and only) message.
    pub bytes: usize,
    pub connections: usize,
    /// Create empty, then append the message (a creation is the PUT and the POST).
    pub separate_append: bool,
}

pub async fn run(settings: &Settings, options: &StreamsOptions) -> Result<Report, String> {
    let target = &settings.target;
    let prefix = format!("streams-{}", super::unique_suffix());
    let memory_before = settings.server_pid.and_then(process::resident_bytes);
    let cpu_before = settings.server_pid.and_then(process::cpu_seconds);
    let counters_before = ServerCounters::fetch(target).await;
    let next = Arc::new(AtomicUsize::new(0));
    let body = Bytes::from(vec![b'x'; options.bytes]);
    let started = Instant::now();
    let workers: Vec<_> = (0..options.connections.max(1))
        .map(|_| {
            tokio::spawn(create_many(
                target.clone(),
                prefix.clone(),
                Arc::clone(&next),
                options.clone(),
                body.clone(),
            ))
        })
        .collect();
    let mut latencies = Latencies::default();
    let mut failures = 0u64;
    for worker in workers {
        let (worker_latencies, worker_failures) = worker.await.map_err(|e| format!("worker: {e}"))??;
        latencies.merge(&worker_latencies);
        failures += worker_failures;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let summary = latencies.summary();
    let mut report = Report::new("streams");
    report
        .add("streams", options.count as u64, "")
        .add("failures", failures, "")
        .add("creations_per_sec", options.count as f64 / elapsed, "/s")
        .add("latency_p50_us", summary.p50_us, "µs")
        .add("latency_p99_us", summary.p99_us, "µs");
    counters_before.report(&ServerCounters::fetch(target).await, elapsed, &mut report);
    if let Some(pid) = settings.server_pid {
        let memory_after = process::resident_bytes(pid);
        if let (Some(before), Some(after)) = (memory_before, memory_after) {
            let per_stream = after.saturating_sub(before) as f64 / options.count.max(1) as f64;
            report.add("server_memory_per_stream_bytes", per_stream, "B");
            report.add("server_resident_bytes", after, "B");
        }
        if let (Some(before), Some(after)) = (cpu_before, process::cpu_seconds(pid)) {
            report.add("server_cpu_seconds", after - before, "s");
        }
        if let Some(peak) = process::peak_resident_bytes(pid) {
            report.add("server_peak_resident_bytes", peak, "B");
        }
    }
    Ok(report)
}

/// Creates streams until `options.count` have been claimed; returns latencies (of each
/// whole creation) and failures.
async fn create_many(
    target: Target,
    prefix: String,
    next: Arc<AtomicUsize>,
    options: StreamsOptions,
    body: Bytes,
) -> Result<(Latencies, u64), String> {
    const CONTENT_TYPE: [(&str, &str); 1] = [("content-type", "application/octet-stream")];
    let mut connection = Connection::open(&target).await.map_err(|e| format!("connect: {e}"))?;
    let mut latencies = Latencies::default();
    let mut failures = 0;
    let first_body = if options.separate_append { Bytes::new() } else { body.clone() };
    loop {
        let index = next.fetch_add(1, Ordering::Relaxed);
        if index >= options.count {
            return Ok((latencies, failures));
        }
        let path = target.stream_path(&format!("{prefix}-{index}"));
        let started = Instant::now();
        let reply = connection
            .send(Method::PUT, &path, &CONTENT_TYPE, first_body.clone())
            .await
            .map_err(|e| format!("create: {e}"))?;
        let mut created = reply.status == 201;
        if created && options.separate_append {
            let reply = connection
                .send(Method::POST, &path, &CONTENT_TYPE, body.clone())
                .await
                .map_err(|e| format!("append: {e}"))?;
            created = reply.status == 204 || reply.status == 200;
        }
        latencies.record_us(started.elapsed().as_micros() as u64);
        failures += u64::from(!created);
    }
}
