//! `fanout`: K SSE subscribers on one stream, one writer at R events/s.
//!
//! Each event's payload carries its sequence number and its send time (microseconds since
//! the run started, on this process's monotonic clock), so every subscriber measures
//! delivery latency and notices gaps. A subscriber whose connection ends resumes from the
//! last offset it saw, as a real client would; events it never receives count as lost.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::Method;
use tokio::sync::{watch, Notify};

use crate::http::Connection;
use crate::process;
use crate::report::Report;
use crate::run::{Clock, Live, Progress, ServerProbe, Settings};
use crate::sse::SseParser;
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

struct Tally {
    latencies: Latencies,
    received: u64,
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
    let base = Instant::now();
    let ready = Arc::new((AtomicUsize::new(0), Notify::new()));
    let (total_tx, total_rx) = watch::channel(None::<u64>);
    let subscribers: Vec<_> = (0..options.subscribers)
        .map(|_| {
            tokio::spawn(subscribe(target.clone(), path.clone(), base, Arc::clone(&ready), total_rx.clone()))
        })
        .collect();
    wait_until_ready(&ready, options.subscribers).await?;
    let memory_subscribed = settings.server_pid.and_then(process::resident_bytes);

    let clock = Clock::start(settings);
    let live = Arc::new(Live::default());
    let progress = Progress::start("fanout", settings, clock, Arc::clone(&live));
    let probe = ServerProbe::start(settings.server_pid, clock);
    let (sent, errors) = write_events(&mut writer, &path, base, clock, &live, options).await;
    let _ = total_tx.send(Some(sent));
    let mut all = Latencies::default();
    let (mut received, mut reconnects) = (0u64, 0u64);
    for subscriber in subscribers {
        let tally = subscriber.await.map_err(|e| format!("subscriber task: {e}"))??;
        all.merge(&tally.latencies);
        received += tally.received;
        reconnects += tally.reconnects;
    }
    progress.finish();
    let expected = sent * options.subscribers as u64;
    let summary = all.summary();
    let mut report = Report::new("fanout");
    report
        .add("subscribers", options.subscribers as u64, "")
        .add("events_sent", sent, "")
        .add("write_errors", errors, "")
        .add("deliveries", received, "")
        .add("events_lost", expected.saturating_sub(received), "")
        .add("reconnects", reconnects, "")
        .add("delivery_p50_us", summary.p50_us, "µs")
        .add("delivery_p99_us", summary.p99_us, "µs")
        .add("delivery_max_us", summary.max_us, "µs");
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

/// Appends events at a steady pace through the measured phase (after the warm-up); returns
/// (sent, errors).
async fn write_events(
    writer: &mut Connection,
    path: &str,
    base: Instant,
    clock: Clock,
    live: &Live,
    options: &FanoutOptions,
) -> (u64, u64) {
    tokio::time::sleep_until(clock.measure_from.into()).await;
    let count = (f64::from(options.rate_per_sec) * clock.measured_secs()).ceil() as u64;
    let mut ticker = tokio::time::interval(Duration::from_secs(1) / options.rate_per_sec.max(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let (mut sent, mut errors) = (0, 0);
    for seq in 0..count {
        ticker.tick().await;
        let mut payload = format!("{seq} {}", base.elapsed().as_micros());
        if payload.len() < options.bytes {
            payload.push(' ');
            payload.extend(std::iter::repeat_n('x', options.bytes - payload.len()));
        }
        let sent_ok = writer
            .send(Method::POST, path, &[("content-type", "text/plain")], Bytes::from(payload))
            .await
            .is_ok_and(|reply| reply.status == 204);
        if sent_ok {
            sent += 1;
            live.requests.fetch_add(1, Ordering::Relaxed);
        } else {
            errors += 1;
        }
    }
    (sent, errors)
}

/// One subscriber: connects at the tail, then reads events until it has all of them.
async fn subscribe(
    target: Target,
    path: String,
    base: Instant,
    ready: Arc<(AtomicUsize, Notify)>,
    mut total: watch::Receiver<Option<u64>>,
) -> Result<Tally, String> {
    let mut tally = Tally { latencies: Latencies::default(), received: 0, reconnects: 0 };
    let mut offset = "now".to_string();
    let mut announced = false;
    let mut deadline: Option<tokio::time::Instant> = None;
    loop {
        let mut connection =
            Connection::open(&target).await.map_err(|e| format!("subscriber connect: {e}"))?;
        let url = format!("{path}?offset={offset}&live=sse");
        let response =
            connection.start(Method::GET, &url, &[], Bytes::new()).await.map_err(|e| e.to_string())?;
        if response.status() != 200 {
            return Err(format!("subscribe: status {}", response.status()));
        }
        let mut body = response.into_body();
        let mut parser = SseParser::default();
        loop {
            if total.borrow().is_some_and(|sent| tally.received >= sent) {
                return Ok(tally);
            }
            let frame = tokio::select! {
                frame = body.frame() => frame,
                _ = total.changed(), if deadline.is_none() => {
                    deadline = Some(tokio::time::Instant::now() + SETTLE_TIMEOUT);
                    continue;
                }
                _ = sleep_until(deadline) => return Ok(tally),
            };
            let Some(Ok(frame)) = frame else { break };
            let Ok(data) = frame.into_data() else { continue };
            for event in parser.push(&data)? {
                if event.event == "control" && !announced {
                    announced = true;
                    ready.0.fetch_add(1, Ordering::AcqRel);
                    ready.1.notify_waiters();
                }
                if let Some(id) = &event.id {
                    offset = id.clone();
                }
                if event.event == "data" {
                    record(&mut tally, &event.data, base);
                }
            }
        }
        tally.reconnects += 1;
    }
}

fn record(tally: &mut Tally, data: &str, base: Instant) {
    let mut fields = data.split(' ');
    let _seq = fields.next();
    if let Some(sent_us) = fields.next().and_then(|f| f.parse::<u64>().ok()) {
        let now_us = base.elapsed().as_micros() as u64;
        tally.latencies.record_us(now_us.saturating_sub(sent_us));
        tally.received += 1;
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
