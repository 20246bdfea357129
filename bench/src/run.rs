//! What every scenario shares: its settings, the clock of its phases (warm-up, then the
//! measured phase), what each worker counts, the progress line, and the server's resource
//! use over the measured phase.
//!
//! Workers record only what completes inside the measured phase; the warm-up fills caches
//! and connection pools and is thrown away. Every worker loop ends at the phase's end or
//! after `requests_max` requests, whichever comes first.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::process;
use crate::report::Report;
use crate::server_metrics::ServerCounters;
use crate::stats::Latencies;
use crate::target::Target;

/// How a scenario runs.
#[derive(Clone, Debug)]
pub struct Settings {
    pub target: Target,
    pub warmup: Duration,
    pub duration: Duration,
    /// Most requests one worker sends (a bound beside the time).
    pub requests_max: u64,
    pub server_pid: Option<u32>,
    /// Show the progress line (on a terminal).
    pub progress: bool,
}

/// The phases of a run.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    pub start: Instant,
    pub measure_from: Instant,
    pub end: Instant,
}

impl Clock {
    pub fn start(settings: &Settings) -> Clock {
        let start = Instant::now();
        let measure_from = start + settings.warmup;
        Clock { start, measure_from, end: measure_from + settings.duration }
    }

    /// Whether something that completes now counts.
    pub fn measuring(&self) -> bool {
        let now = Instant::now();
        now >= self.measure_from && now < self.end
    }

    pub fn done(&self) -> bool {
        Instant::now() >= self.end
    }

    pub fn measured_secs(&self) -> f64 {
        (self.end - self.measure_from).as_secs_f64()
    }
}

/// Running totals of the measured phase, for the progress line.
#[derive(Default)]
pub struct Live {
    pub requests: AtomicU64,
    pub bytes: AtomicU64,
    pub errors: AtomicU64,
}

/// What one worker counted in the measured phase.
#[derive(Default)]
pub struct Tally {
    pub latencies: Latencies,
    pub requests: u64,
    /// Payload bytes moved (request bodies written, or response bodies read).
    pub bytes: u64,
    /// Responses by status.
    pub statuses: BTreeMap<u16, u64>,
    /// Requests that got no response (connection errors).
    pub failures: u64,
}

impl Tally {
    /// Counts a response with `status` to a request sent at `sent`, if it completes in the
    /// measured phase; `ok` says whether the status is the expected one.
    pub fn record(&mut self, clock: &Clock, live: &Live, sent: Instant, status: u16, ok: bool, bytes: u64) {
        if !clock.measuring() {
            return;
        }
        self.latencies.record_us(sent.elapsed().as_micros() as u64);
        self.requests += 1;
        self.bytes += bytes;
        *self.statuses.entry(status).or_default() += 1;
        live.requests.fetch_add(1, Ordering::Relaxed);
        live.bytes.fetch_add(bytes, Ordering::Relaxed);
        if !ok {
            live.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn failed(&mut self, clock: &Clock, live: &Live) {
        if clock.measuring() {
            self.failures += 1;
            live.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Waits for every worker and adds up their tallies; the first failed worker's error.
    pub async fn join(workers: Vec<tokio::task::JoinHandle<Result<Tally, String>>>) -> Result<Tally, String> {
        let mut tally = Tally::default();
        for worker in workers {
            tally.merge(worker.await.map_err(|e| format!("worker: {e}"))??);
        }
        Ok(tally)
    }

    pub fn merge(&mut self, other: Tally) {
        self.latencies.merge(&other.latencies);
        self.requests += other.requests;
        self.bytes += other.bytes;
        self.failures += other.failures;
        for (status, count) in other.statuses {
            *self.statuses.entry(status).or_default() += count;
        }
    }

    /// Adds the rate, throughput, latency and error figures under `prefix` (e.g. `appends`).
    pub fn report(&self, report: &mut Report, prefix: &str, clock: &Clock, expected: &[u16]) {
        let secs = clock.measured_secs();
        let summary = self.latencies.summary();
        report
            .add(prefix, self.requests, "")
            .add(&format!("{prefix}_per_sec"), self.requests as f64 / secs, "/s")
            .add(&format!("{prefix}_mb_per_sec"), self.bytes as f64 / secs / 1e6, "MB/s")
            .add(&format!("{prefix}_latency_p50_us"), summary.p50_us, "µs")
            .add(&format!("{prefix}_latency_p90_us"), summary.p90_us, "µs")
            .add(&format!("{prefix}_latency_p99_us"), summary.p99_us, "µs")
            .add(&format!("{prefix}_latency_p999_us"), summary.p999_us, "µs")
            .add(&format!("{prefix}_latency_max_us"), summary.max_us, "µs");
        let errors: u64 = self
            .statuses
            .iter()
            .filter(|(status, _)| !expected.contains(status))
            .map(|(_, count)| count)
            .sum();
        report.add(&format!("{prefix}_errors"), errors + self.failures, "");
        for (status, count) in self.statuses.iter().filter(|(status, _)| !expected.contains(status)) {
            report.add(&format!("{prefix}_status_{status}"), *count, "");
        }
        if self.failures > 0 {
            report.add(&format!("{prefix}_connection_failures"), self.failures, "");
        }
    }
}

/// The progress line, redrawn four times a second until [`Progress::finish`].
pub struct Progress {
    bar: ProgressBar,
    ticker: tokio::task::JoinHandle<()>,
}

impl Progress {
    pub fn start(scenario: &str, settings: &Settings, clock: Clock, live: Arc<Live>) -> Progress {
        let bar = if settings.progress { ProgressBar::new_spinner() } else { ProgressBar::hidden() };
        bar.set_style(ProgressStyle::with_template("{spinner} {prefix} {msg}").expect("valid template"));
        bar.set_prefix(scenario.to_string());
        let shown = bar.clone();
        let ticker = tokio::spawn(async move {
            let mut interval = tokio::time::interval(Duration::from_millis(250));
            loop {
                interval.tick().await;
                shown.set_message(progress_message(&clock, &live));
                shown.tick();
            }
        });
        Progress { bar, ticker }
    }

    pub fn finish(self) {
        self.ticker.abort();
        self.bar.finish_and_clear();
    }
}

fn progress_message(clock: &Clock, live: &Live) -> String {
    let now = Instant::now();
    if now < clock.measure_from {
        return format!("warming up, {:.0} s left", (clock.measure_from - now).as_secs_f64());
    }
    let elapsed = (now.min(clock.end) - clock.measure_from).as_secs_f64().max(0.001);
    let requests = live.requests.load(Ordering::Relaxed);
    format!(
        "{:.0}/{:.0} s  {requests} requests  {:.0}/s  {:.1} MB/s  {} errors",
        elapsed,
        clock.measured_secs(),
        requests as f64 / elapsed,
        live.bytes.load(Ordering::Relaxed) as f64 / elapsed / 1e6,
        live.errors.load(Ordering::Relaxed)
    )
}

/// The server's CPU time over the measured phase and its memory (`--server-pid`).
pub struct ServerProbe {
    pid: Option<u32>,
    cpu_at_start: tokio::task::JoinHandle<Option<f64>>,
    target: Target,
    counters_at_start: tokio::task::JoinHandle<ServerCounters>,
}

impl ServerProbe {
    /// Samples the server's CPU time (and its own counters) when the measured phase begins.
    pub fn start(settings: &Settings, clock: Clock) -> ServerProbe {
        let pid = settings.server_pid;
        let cpu_at_start = tokio::spawn(async move {
            tokio::time::sleep_until(clock.measure_from.into()).await;
            pid.and_then(process::cpu_seconds)
        });
        let target = settings.target.clone();
        let probed = target.clone();
        let counters_at_start = tokio::spawn(async move {
            tokio::time::sleep_until(clock.measure_from.into()).await;
            ServerCounters::fetch(&probed).await
        });
        ServerProbe { pid, cpu_at_start, target, counters_at_start }
    }

    /// Adds the server's device flushes and read counters over the measured phase (a ds server),
    /// its CPU seconds and share of one core, and its peak and current resident memory.
    pub async fn finish(self, clock: &Clock, report: &mut Report) {
        if let Ok(before) = self.counters_at_start.await {
            before.report(&ServerCounters::fetch(&self.target).await, clock.measured_secs(), report);
        }
        let Some(pid) = self.pid else { return };
        let before = self.cpu_at_start.await.ok().flatten();
        if let (Some(before), Some(after)) = (before, process::cpu_seconds(pid)) {
            let cpu = after - before;
            report.add("server_cpu_seconds", cpu, "s").add(
                "server_cpu_percent",
                cpu / clock.measured_secs() * 100.0,
                "%",
            );
        }
        if let Some(peak) = process::peak_resident_bytes(pid) {
            report.add("server_peak_resident_bytes", peak, "B");
        }
        if let Some(resident) = process::resident_bytes(pid) {
            report.add("server_resident_bytes", resident, "B");
        }
    }
}
