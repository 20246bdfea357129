//! `longpoll`: L readers long-polling one stream while a writer appends R events a second,
//! each carrying its send time (events flow through the warm-up too, counted for losses but
//! not timed). A reader asks from its last offset, gets what arrived (or a
//! 204 when the wait times out) and asks again; the wake latency of an event is the time
//! from its send to its arrival at a reader. Every event must reach every reader.
//!
//! With `--server-pid`, the server's resident memory is sampled before the readers connect
//! and again once every reader's first long-poll has waited [`SETTLE`] (long before the
//! server's 30 s timeout): the difference per reader is what a waiting long-poll costs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;
use tokio::sync::watch;

use super::{
    create, is_measured, phase_now, phased_time, reconnect, sent_micros, unique_suffix, PHASE_MEASURED,
};
use crate::http::Connection;
use crate::process;
use crate::report::Report;
use crate::run::{Clock, Live, Progress, ServerProbe, Settings};
use crate::stats::Latencies;

#[derive(Clone, Debug)]
pub struct LongpollOptions {
    pub readers: usize,
    pub rate_per_sec: u32,
}

/// Longest a reader keeps polling for the last events after the writer stops.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long every reader's first long-poll waits before the server's memory is sampled.
const SETTLE: Duration = Duration::from_secs(2);
/// Longest the readers may take to connect and send their first long-poll.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// Events are separated by this byte in the stream (text/plain).
const SEPARATOR: char = ';';

#[derive(Default)]
struct ReaderTally {
    latencies: Latencies,
    received: u64,
    polls: u64,
    timeouts: u64,
}

pub async fn run(settings: &Settings, options: &LongpollOptions) -> Result<Report, String> {
    let path = settings.target.stream_path(&format!("longpoll-{}", unique_suffix()));
    let mut writer = Connection::open(&settings.target).await.map_err(|e| format!("connect: {e}"))?;
    create(&mut writer, &path, "text/plain").await?;
    let memory_before = settings.server_pid.and_then(process::resident_bytes);
    let base = Instant::now();
    let asking = Arc::new(AtomicUsize::new(0));
    let (total_tx, total_rx) = watch::channel(None::<u64>);
    let readers: Vec<_> = (0..options.readers.max(1))
        .map(|_| {
            let (settings, path, total, asking) =
                (settings.clone(), path.clone(), total_rx.clone(), Arc::clone(&asking));
            tokio::spawn(async move { poll_loop(&settings, base, &path, total, &asking).await })
        })
        .collect();
    wait_until_asking(&asking, options.readers.max(1)).await?;
    tokio::time::sleep(SETTLE).await;
    let memory_waiting = settings.server_pid.and_then(process::resident_bytes);
    let clock = Clock::start(settings);
    let live = Arc::new(Live::default());
    let progress = Progress::start("longpoll", settings, clock, Arc::clone(&live));
    let probe = ServerProbe::start(settings, clock);
    let (sent, write_errors) =
        write_events(&mut writer, &path, base, clock, &live, options.rate_per_sec).await;
    let _ = total_tx.send(Some(sent));
    let mut tally = ReaderTally::default();
    for reader in readers {
        let one = reader.await.map_err(|e| format!("reader: {e}"))??;
        tally.latencies.merge(&one.latencies);
        tally.received += one.received;
        tally.polls += one.polls;
        tally.timeouts += one.timeouts;
    }
    progress.finish();
    let summary = tally.latencies.summary();
    let expected = sent * options.readers.max(1) as u64;
    let mut report = Report::new("longpoll");
    report
        .add("readers", options.readers as u64, "")
        .add("events_sent", sent, "")
        .add("write_errors", write_errors, "")
        .add("deliveries", tally.received, "")
        .add("events_lost", expected.saturating_sub(tally.received), "")
        .add("polls", tally.polls, "")
        .add("poll_timeouts", tally.timeouts, "")
        .add("wake_p50_us", summary.p50_us, "µs")
        .add("wake_p90_us", summary.p90_us, "µs")
        .add("wake_p99_us", summary.p99_us, "µs")
        .add("wake_max_us", summary.max_us, "µs");
    if let (Some(before), Some(after)) = (memory_before, memory_waiting) {
        let per_reader = after.saturating_sub(before) / options.readers.max(1) as u64;
        report.add("server_memory_per_reader_bytes", per_reader, "B");
    }
    probe.finish(&clock, &mut report).await;
    Ok(report)
}

/// Appends events at a steady pace through the warm-up and the measured phase; returns
/// (sent, errors).
async fn write_events(
    writer: &mut Connection,
    path: &str,
    base: Instant,
    clock: Clock,
    live: &Live,
    rate: u32,
) -> (u64, u64) {
    let mut ticker = tokio::time::interval(Duration::from_secs(1) / rate.max(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let (mut sent, mut errors) = (0, 0);
    while !clock.done() {
        ticker.tick().await;
        let phase = phase_now(&clock);
        let payload = format!("{}{SEPARATOR}", phased_time(base, phase));
        let ok = writer
            .send(Method::POST, path, &[("content-type", "text/plain")], Bytes::from(payload))
            .await
            .is_ok_and(|reply| reply.status == 204);
        if !ok {
            errors += 1;
            continue;
        }
        sent += 1;
        if phase == PHASE_MEASURED {
            live.requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
    (sent, errors)
}

/// Waits until `readers` readers have sent their first long-poll.
async fn wait_until_asking(asking: &AtomicUsize, readers: usize) -> Result<(), String> {
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    while asking.load(Ordering::Acquire) < readers {
        if Instant::now() > deadline {
            let count = asking.load(Ordering::Acquire);
            return Err(format!("only {count} of {readers} readers connected"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// One reader: polls from the tail until it has every event the writer sent. Its first
/// poll is counted in `asking` as it is sent.
async fn poll_loop(
    settings: &Settings,
    base: Instant,
    path: &str,
    total: watch::Receiver<Option<u64>>,
    asking: &AtomicUsize,
) -> Result<ReaderTally, String> {
    let mut tally = ReaderTally::default();
    let mut connection = Connection::open(&settings.target).await.map_err(|e| format!("connect: {e}"))?;
    let mut offset = "now".to_string();
    let mut settle_deadline = None;
    let mut counted = false;
    loop {
        if let Some(sent) = *total.borrow() {
            if tally.received >= sent {
                return Ok(tally);
            }
            let deadline = *settle_deadline.get_or_insert_with(|| Instant::now() + SETTLE_TIMEOUT);
            if Instant::now() > deadline || tally.polls >= settings.requests_max {
                return Ok(tally);
            }
        }
        let url = format!("{path}?offset={offset}&live=long-poll");
        if !counted {
            counted = true;
            asking.fetch_add(1, Ordering::AcqRel);
        }
        let reply = match connection.send(Method::GET, &url, &[], Bytes::new()).await {
            Ok(reply) => reply,
            Err(_) => {
                connection = reconnect(&settings.target).await.ok_or("the server went away")?;
                continue;
            }
        };
        tally.polls += 1;
        if let Some(next) = reply.header("stream-next-offset") {
            offset = next.to_string();
        }
        match reply.status {
            200 => {
                let now_us = base.elapsed().as_micros() as u64;
                for event in String::from_utf8_lossy(&reply.body).split(SEPARATOR).filter(|e| !e.is_empty()) {
                    let Some(sent_us) = sent_micros(event) else { continue };
                    tally.received += 1;
                    if is_measured(event) {
                        tally.latencies.record_us(now_us.saturating_sub(sent_us));
                    }
                }
            }
            204 => tally.timeouts += 1,
            status => return Err(format!("long-poll {path}: status {status}")),
        }
    }
}
