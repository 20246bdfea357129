//! `fanout`: K SSE subscribers on one stream, one writer at R events/s.
//!
//! Each event's payload carries its sequence number, its send time (microseconds since
//! the run started, on this process's monotonic clock) and its phase, so every subscriber
//! measures delivery latency and notices gaps. Events flow through the warm-up as well
//! (counted for losses, not timed): the first events after the subscribers connected meet
//! cold sockets on both ends, and a warm-up without events would leave them in the
//! measured phase. A subscriber whose connection ends resumes from the last offset it saw,
//! as a real client would; events it never receives count as lost.
//!
//! Delivery is timed twice: when the event reached the subscriber's socket (the kernel's
//! receive stamp, where it gives one: the server's part) and when the subscriber read it
//! (which adds the generator's own queue: with a thousand subscribers on one core, the last
//! is read milliseconds after it arrived). The `delivery_*` figures are arrival where
//! stamped, `read_*` the latter.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use hyper::Method;
use tokio::sync::{watch, Notify};

use super::{is_measured, phase_now, phased_time, sent_micros, PHASE_MEASURED};
use crate::http::Connection;
use crate::process;
use crate::report::Report;
use crate::run::{Clock, Live, Progress, ServerProbe, Settings};
use crate::sse::SseParser;
use crate::sse_stream::SseStream;
use crate::stats::Latencies;
use crate::target::Target;

/// How the fan-out runs.
#[derive(Clone, Debug)]
pub struct FanoutOptions {
    pub subscribers: usize,
    pub rate_per_sec: u32,
    /// Payload size of each event (at least the header of sequence and time).
    pub bytes: usize,
}

/// Longest wait for subscribers to connect, and for the last events after the writer stops.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Latencies a subscriber keeps before adding them to the shared histogram. One histogram
/// for all keeps the generator's memory small and its cache warm (a histogram per
/// subscriber is 150 KB).
const LATENCY_BATCH: usize = 256;

struct Tally {
    /// (arrival, read) latencies not yet in the shared histograms.
    pending_us: Vec<(u32, u32)>,
    received: u64,
    /// Timed deliveries that carried the kernel's receive stamp.
    stamped: u64,
    reconnects: u64,
}

pub async fn run(settings: &Settings, options: &FanoutOptions) -> Result<Report, String> {
    let target = &settings.target;
    let path = target.stream_path(&format!("fanout-{}", super::unique_suffix()));
    let mut writer = Connection::open(target).await.map_err(|e| format!("connect: {e}"))?;
    let created = writer
        .send(Method::PUT, &path, &[("content-type", "text/plain")], Bytes::new())
        .await
        .map_err(|e| format!("create: {e}"))?;
    if created.status != 201 {
        return Err(format!("create {path}: status {}", created.status));
    }
    let memory_before = settings.server_pid.and_then(process::resident_bytes);
    let base = Clocks { monotonic: Instant::now(), wall: SystemTime::now() };
    let ready = Arc::new((AtomicUsize::new(0), Notify::new()));
    let (total_tx, total_rx) = watch::channel(None::<u64>);
    let latencies = Arc::new(Mutex::new(Histograms::default()));
    let subscribers: Vec<_> = (0..options.subscribers)
        .map(|_| {
            let (ready, total, latencies) = (Arc::clone(&ready), total_rx.clone(), Arc::clone(&latencies));
            tokio::spawn(subscribe(target.clone(), path.clone(), base, ready, total, latencies))
        })
        .collect();
    wait_until_ready(&ready, options.subscribers).await?;
    let memory_subscribed = settings.server_pid.and_then(process::resident_bytes);

    let clock = Clock::start(settings);
    let live = Arc::new(Live::default());
    let progress = Progress::start("fanout", settings, clock, Arc::clone(&live));
    let probe = ServerProbe::start(settings, clock);
    let (sent, measured, errors) = write_events(&mut writer, &path, base, clock, &live, options).await;
    let _ = total_tx.send(Some(sent));
    let (mut received, mut reconnects, mut stamped) = (0u64, 0u64, 0u64);
    for subscriber in subscribers {
        let tally = subscriber.await.map_err(|e| format!("subscriber task: {e}"))??;
        received += tally.received;
        reconnects += tally.reconnects;
        stamped += tally.stamped;
    }
    progress.finish();
    let expected = sent * options.subscribers as u64;
    let (summary, read) = {
        let histograms = latencies.lock().expect("latency histogram lock");
        (histograms.arrival.summary(), histograms.read.summary())
    };
    let mut report = Report::new("fanout");
    report
        .add("subscribers", options.subscribers as u64, "")
        .add("events_sent", sent, "")
        .add("events_timed", measured, "")
        .add("write_errors", errors, "")
        .add("deliveries", received, "")
        .add("events_lost", expected.saturating_sub(received), "")
        .add("reconnects", reconnects, "")
        .add("delivery_p50_us", summary.p50_us, "µs")
        .add("delivery_p99_us", summary.p99_us, "µs")
        .add("delivery_max_us", summary.max_us, "µs")
        .add("deliveries_stamped", stamped, "")
        .add("read_p50_us", read.p50_us, "µs")
        .add("read_p99_us", read.p99_us, "µs");
    if let (Some(before), Some(after)) = (memory_before, memory_subscribed) {
        let per_subscriber = after.saturating_sub(before) / options.subscribers.max(1) as u64;
        report.add("server_memory_per_subscriber_bytes", per_subscriber, "B");
    }
    probe.finish(&clock, &mut report).await;
    Ok(report)
}

async fn wait_until_ready(ready: &(AtomicUsize, Notify), subscribers: usize) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + SETTLE_TIMEOUT;
    loop {
        let notified = ready.1.notified();
        if ready.0.load(Ordering::Acquire) >= subscribers {
            return Ok(());
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            let count = ready.0.load(Ordering::Acquire);
            return Err(format!("only {count} of {subscribers} subscribers connected"));
        }
    }
}

/// Appends events at a steady pace through the warm-up and the measured phase; returns
/// (sent, sent in the measured phase, errors).
async fn write_events(
    writer: &mut Connection,
    path: &str,
    base: Clocks,
    clock: Clock,
    live: &Live,
    options: &FanoutOptions,
) -> (u64, u64, u64) {
    let whole_secs = (clock.end - clock.start).as_secs_f64();
    let count = (f64::from(options.rate_per_sec) * whole_secs).ceil() as u64;
    let mut ticker = tokio::time::interval(Duration::from_secs(1) / options.rate_per_sec.max(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let (mut sent, mut measured, mut errors) = (0, 0, 0);
    for seq in 0..count {
        ticker.tick().await;
        let phase = phase_now(&clock);
        let mut payload = format!("{seq} {}", phased_time(base.monotonic, phase));
        if payload.len() < options.bytes {
            payload.push(' ');
            payload.extend(std::iter::repeat_n('x', options.bytes - payload.len()));
        }
        let sent_ok = writer
            .send(Method::POST, path, &[("content-type", "text/plain")], Bytes::from(payload))
            .await
            .is_ok_and(|reply| reply.status == 204);
        if !sent_ok {
            errors += 1;
            continue;
        }
        sent += 1;
        if phase == PHASE_MEASURED {
            measured += 1;
            live.requests.fetch_add(1, Ordering::Relaxed);
        }
    }
    (sent, measured, errors)
}

/// One subscriber: connects at the tail, then reads events until it has all of them.
async fn subscribe(
    target: Target,
    path: String,
    base: Clocks,
    ready: Arc<(AtomicUsize, Notify)>,
    mut total: watch::Receiver<Option<u64>>,
    latencies: Arc<Mutex<Histograms>>,
) -> Result<Tally, String> {
    let mut tally =
        Tally { pending_us: Vec::with_capacity(LATENCY_BATCH), received: 0, stamped: 0, reconnects: 0 };
    let mut offset = "now".to_string();
    let mut announced = false;
    let mut deadline: Option<tokio::time::Instant> = None;
    loop {
        let mut stream = SseStream::open(&target, &format!("{path}?offset={offset}&live=sse")).await?;
        let mut parser = SseParser::default();
        loop {
            if total.borrow().is_some_and(|sent| tally.received >= sent) {
                tally.flush(&latencies);
                return Ok(tally);
            }
            let piece = tokio::select! {
                piece = stream.next_arrived() => piece,
                _ = total.changed(), if deadline.is_none() => {
                    deadline = Some(tokio::time::Instant::now() + SETTLE_TIMEOUT);
                    continue;
                }
                _ = sleep_until(deadline) => {
                    tally.flush(&latencies);
                    return Ok(tally);
                }
            };
            let Ok(Some((piece, arrived_at))) = piece else { break };
            parser.push_each(piece, |event| {
                if event.event == "control" && !announced {
                    announced = true;
                    ready.0.fetch_add(1, Ordering::AcqRel);
                    ready.1.notify_waiters();
                }
                if let Some(id) = &event.id {
                    offset.clone_from(id);
                }
                if event.event == "data" {
                    tally.record(&event.data, base, arrived_at);
                }
            })?;
            if tally.pending_us.len() >= LATENCY_BATCH {
                tally.flush(&latencies);
            }
        }
        tally.reconnects += 1;
    }
}

/// The run's start on both clocks: sends are timed on the monotonic one, kernel receive
/// stamps come on the wall clock.
#[derive(Clone, Copy)]
struct Clocks {
    monotonic: Instant,
    wall: SystemTime,
}

/// Delivery latencies of all subscribers.
#[derive(Default)]
struct Histograms {
    /// Until the event reached the subscriber's socket (or was read, where not stamped).
    arrival: Latencies,
    /// Until the subscriber read it.
    read: Latencies,
}

impl Tally {
    fn record(&mut self, data: &str, base: Clocks, arrived_at: Option<SystemTime>) {
        let Some((_seq, timed)) = data.split_once(' ') else { return };
        let Some(sent_us) = sent_micros(timed) else { return };
        self.received += 1;
        if !is_measured(timed) {
            return;
        }
        let read_us = base.monotonic.elapsed().as_micros() as u64;
        let arrival_us =
            arrived_at.and_then(|at| at.duration_since(base.wall).ok()).map(|since| since.as_micros() as u64);
        self.stamped += u64::from(arrival_us.is_some());
        let latency = |at_us: u64| u32::try_from(at_us.saturating_sub(sent_us)).unwrap_or(u32::MAX);
        self.pending_us.push((latency(arrival_us.unwrap_or(read_us)), latency(read_us)));
    }

    /// Moves the batched latencies into the shared histograms.
    fn flush(&mut self, latencies: &Mutex<Histograms>) {
        let mut shared = latencies.lock().expect("latency histogram lock");
        for (arrival_us, read_us) in self.pending_us.drain(..) {
            shared.arrival.record_us(u64::from(arrival_us));
            shared.read.record_us(u64::from(read_us));
        }
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
