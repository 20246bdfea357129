//! `mixed`: writers, catch-up readers and live (SSE) readers on the same streams at once —
//! the realistic picture. Writers append timed messages round-robin over S streams;
//! catch-up readers read whole streams from the start, one after another; live readers
//! each follow one stream and measure delivery latency from the messages' send times.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::Method;

use super::{create, fill, recover, sent_micros, timed_payload, unique_suffix};
use crate::http::Connection;
use crate::report::Report;
use crate::run::{Clock, Live, Progress, ServerProbe, Settings, Tally};
use crate::sse::SseParser;
use crate::stats::Latencies;

#[derive(Clone, Debug)]
pub struct MixedOptions {
    pub writers: usize,
    pub catchup_readers: usize,
    pub live_readers: usize,
    pub streams: usize,
    pub bytes: usize,
}

/// Messages each stream holds before the run (so catch-up reads have something to read).
const PREFILL_MESSAGES: u64 = 64;

pub async fn run(settings: &Settings, options: &MixedOptions) -> Result<Report, String> {
    let prefix = format!("mixed-{}", unique_suffix());
    let streams = options.streams.max(1);
    let paths: Arc<Vec<String>> =
        Arc::new((0..streams).map(|i| settings.target.stream_path(&format!("{prefix}-{i}"))).collect());
    let mut setup = Connection::open(&settings.target).await.map_err(|e| format!("connect: {e}"))?;
    let filler = timed_payload(Instant::now(), options.bytes);
    for path in paths.iter() {
        create(&mut setup, path, "text/plain").await?;
        fill(&mut setup, path, "text/plain", filler.clone(), PREFILL_MESSAGES * filler.len() as u64).await?;
    }
    let clock = Clock::start(settings);
    let live = Arc::new(Live::default());
    let progress = Progress::start("mixed", settings, clock, Arc::clone(&live));
    let probe = ServerProbe::start(settings, clock);
    let spawn = |role: Role, index: usize| {
        let (settings, live, paths, bytes) =
            (settings.clone(), Arc::clone(&live), Arc::clone(&paths), options.bytes);
        tokio::spawn(async move { role.run(&settings, clock, &live, &paths, index, bytes).await })
    };
    let mut tasks = Vec::new();
    for (role, count) in [
        (Role::Writer, options.writers),
        (Role::Catchup, options.catchup_readers),
        (Role::Live, options.live_readers),
    ] {
        tasks.extend((0..count).map(|index| (role, spawn(role, index))));
    }
    let (mut writes, mut reads, mut deliveries) = (Tally::default(), Tally::default(), Latencies::default());
    for (role, task) in tasks {
        let outcome = task.await.map_err(|e| format!("worker: {e}"))??;
        match (role, outcome) {
            (Role::Writer, Outcome::Tally(tally)) => writes.merge(tally),
            (Role::Catchup, Outcome::Tally(tally)) => reads.merge(tally),
            (_, Outcome::Deliveries(latencies)) => deliveries.merge(&latencies),
            _ => unreachable!("each role reports its own kind"),
        }
    }
    progress.finish();
    let mut report = Report::new("mixed");
    report
        .add("writers", options.writers as u64, "")
        .add("catchup_readers", options.catchup_readers as u64, "")
        .add("live_readers", options.live_readers as u64, "")
        .add("streams", streams as u64, "");
    writes.report(&mut report, "appends", &clock, &[204]);
    reads.report(&mut report, "reads", &clock, &[200]);
    let summary = deliveries.summary();
    report
        .add("live_deliveries", summary.count, "")
        .add("live_delivery_p50_us", summary.p50_us, "µs")
        .add("live_delivery_p99_us", summary.p99_us, "µs")
        .add("live_delivery_max_us", summary.max_us, "µs");
    probe.finish(&clock, &mut report).await;
    Ok(report)
}

#[derive(Clone, Copy, Debug)]
enum Role {
    Writer,
    Catchup,
    Live,
}

enum Outcome {
    Tally(Tally),
    Deliveries(Latencies),
}

impl Role {
    async fn run(
        self,
        settings: &Settings,
        clock: Clock,
        live: &Live,
        paths: &[String],
        index: usize,
        bytes: usize,
    ) -> Result<Outcome, String> {
        let mut connection = Connection::open(&settings.target).await.map_err(|e| format!("connect: {e}"))?;
        match self {
            Role::Writer => {
                write(settings, &mut connection, clock, live, paths, index, bytes).await.map(Outcome::Tally)
            }
            Role::Catchup => {
                catch_up(settings, &mut connection, clock, live, paths, index).await.map(Outcome::Tally)
            }
            Role::Live => {
                follow(&mut connection, clock, &paths[index % paths.len()]).await.map(Outcome::Deliveries)
            }
        }
    }
}

async fn write(
    settings: &Settings,
    connection: &mut Connection,
    clock: Clock,
    live: &Live,
    paths: &[String],
    index: usize,
    bytes: usize,
) -> Result<Tally, String> {
    let mut tally = Tally::default();
    let mut count = 0u64;
    while !clock.done() && count < settings.requests_max {
        let path = &paths[(index + count as usize * 7919) % paths.len()];
        count += 1;
        let body = timed_payload(clock.start, bytes);
        let sent = Instant::now();
        match connection.send(Method::POST, path, &[("content-type", "text/plain")], body).await {
            Ok(reply) => tally.record(&clock, live, sent, reply.status, reply.status == 204, bytes as u64),
            Err(_) => {
                recover(&mut tally, &clock, live, connection, &settings.target).await?;
            }
        }
    }
    Ok(tally)
}

/// Reads whole streams from the start, one after another.
async fn catch_up(
    settings: &Settings,
    connection: &mut Connection,
    clock: Clock,
    live: &Live,
    paths: &[String],
    index: usize,
) -> Result<Tally, String> {
    let mut tally = Tally::default();
    let (mut count, mut stream, mut offset) = (0u64, index, "-1".to_string());
    while !clock.done() && count < settings.requests_max {
        count += 1;
        let path = &paths[stream % paths.len()];
        let sent = Instant::now();
        let reply = match connection.send_counting(Method::GET, &format!("{path}?offset={offset}")).await {
            Ok(reply) => reply,
            Err(_) => {
                recover(&mut tally, &clock, live, connection, &settings.target).await?;
                continue;
            }
        };
        tally.record(&clock, live, sent, reply.status, reply.status == 200, reply.body_bytes);
        match (reply.header("stream-next-offset"), reply.header("stream-up-to-date")) {
            (Some(next), None) => offset = next.to_string(),
            _ => {
                stream += 1;
                offset = "-1".into();
            }
        }
    }
    Ok(tally)
}

/// Follows one stream over SSE from its tail until the run ends.
async fn follow(connection: &mut Connection, clock: Clock, path: &str) -> Result<Latencies, String> {
    let mut latencies = Latencies::default();
    let response = connection
        .start(Method::GET, &format!("{path}?offset=now&live=sse"), &[], Bytes::new())
        .await
        .map_err(|e| format!("subscribe: {e}"))?;
    if response.status() != 200 {
        return Err(format!("subscribe {path}: status {}", response.status()));
    }
    let mut body = response.into_body();
    let mut parser = SseParser::default();
    let end = tokio::time::Instant::from(clock.end);
    loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            _ = tokio::time::sleep_until(end) => return Ok(latencies),
        };
        let Some(Ok(frame)) = frame else { return Ok(latencies) };
        let Ok(data) = frame.into_data() else { continue };
        for event in parser.push(&data)? {
            if event.event != "data" || !clock.measuring() {
                continue;
            }
            if let Some(sent_us) = sent_micros(&event.data) {
                latencies.record_us((clock.start.elapsed().as_micros() as u64).saturating_sub(sent_us));
            }
        }
    }
}
