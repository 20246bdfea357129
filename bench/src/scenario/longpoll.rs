//! `longpoll`: L readers long-polling one stream while a writer appends R events a second,
//! each carrying its send time. A reader asks from its last offset, gets what arrived (or a
//! 204 when the wait times out) and asks again; the wake latency of an event is the time
//! from its send to its arrival at a reader. Every event must reach every reader.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;
use tokio::sync::watch;

use super::{create, reconnect, sent_micros, timed_payload, unique_suffix};
use crate::http::Connection;
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
    let clock = Clock::start(settings);
    let live = Arc::new(Live::default());
    let progress = Progress::start("longpoll", settings, clock, Arc::clone(&live));
    let probe = ServerProbe::start(settings, clock);
    let (total_tx, total_rx) = watch::channel(None::<u64>);
    let readers: Vec<_> = (0..options.readers.max(1))
        .map(|_| {
            let (settings, path, total) = (settings.clone(), path.clone(), total_rx.clone());
            tokio::spawn(async move { poll_loop(&settings, clock, &path, total).await })
        })
        .collect();
    let (sent, write_errors) = write_events(&mut writer, &path, clock, &live, options.rate_per_sec).await;
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
    probe.finish(&clock, &mut report).await;
    Ok(report)
}

/// Appends events at a steady pace through the measured phase; returns (sent, errors).
async fn write_events(
    writer: &mut Connection,
    path: &str,
    clock: Clock,
    live: &Live,
    rate: u32,
) -> (u64, u64) {
    tokio::time::sleep_until(clock.measure_from.into()).await;
    let mut ticker = tokio::time::interval(Duration::from_secs(1) / rate.max(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let (mut sent, mut errors) = (0, 0);
    while !clock.done() {
        ticker.tick().await;
        let mut payload = timed_payload(clock.start, 0).to_vec();
        payload.push(SEPARATOR as u8);
        let ok = writer
            .send(Method::POST, path, &[("content-type", "text/plain")], Bytes::from(payload))
            .await
            .is_ok_and(|reply| reply.status == 204);
        if ok {
            sent += 1;
            live.requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        } else {
            errors += 1;
        }
    }
    (sent, errors)
}

/// One reader: polls from the tail until it has every event the writer sent.
async fn poll_loop(
    settings: &Settings,
    clock: Clock,
    path: &str,
    total: watch::Receiver<Option<u64>>,
) -> Result<ReaderTally, String> {
    let mut tally = ReaderTally::default();
    let mut connection = Connection::open(&settings.target).await.map_err(|e| format!("connect: {e}"))?;
    let mut offset = "now".to_string();
    let mut settle_deadline = None;
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
                let now_us = clock.start.elapsed().as_micros() as u64;
                for event in String::from_utf8_lossy(&reply.body).split(SEPARATOR).filter(|e| !e.is_empty()) {
                    if let Some(sent_us) = sent_micros(event) {
                        tally.latencies.record_us(now_us.saturating_sub(sent_us));
                        tally.received += 1;
                    }
                }
            }
            204 => tally.timeouts += 1,
            status => return Err(format!("long-poll {path}: status {status}")),
        }
    }
}
