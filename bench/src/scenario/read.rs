//! `read`: one stream pre-filled with N bytes, then C connections each reading it from the
//! start again and again, following `Stream-Next-Offset` until `Stream-Up-To-Date` (one
//! pass). Reports read throughput, requests per second and per-request latency.
//!
//! With `--streams S`, S such streams: connection c starts on stream c mod S and moves to the
//! next one after each pass, so with more bytes than a server keeps of recent answers
//! (`ds` keeps 32 MiB) a pass rarely finds another connection's answers still kept, and the
//! figure is that of reads of the log itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use hyper::Method;

use super::{create, fill, recover, unique_suffix};
use crate::http::Connection;
use crate::report::Report;
use crate::run::{Clock, Live, Progress, ServerProbe, Settings, Tally};

#[derive(Clone, Debug)]
pub struct ReadOptions {
    pub connections: usize,
    /// Bytes the stream is filled with before reading.
    pub fill_bytes: u64,
    /// Size of each append that fills it.
    pub append_bytes: usize,
    /// Streams of `fill_bytes` each (connections move to the next after each pass).
    pub streams: usize,
}

pub async fn run(settings: &Settings, options: &ReadOptions) -> Result<Report, String> {
    let suffix = unique_suffix();
    let paths: Arc<Vec<String>> = Arc::new(
        (0..options.streams.max(1))
            .map(|k| settings.target.stream_path(&format!("read-{suffix}-{k}")))
            .collect(),
    );
    let mut setup = Connection::open(&settings.target).await.map_err(|e| format!("connect: {e}"))?;
    let body = Bytes::from(vec![b'r'; options.append_bytes.max(1)]);
    for path in paths.iter() {
        create(&mut setup, path, "application/octet-stream").await?;
        fill(&mut setup, path, "application/octet-stream", body.clone(), options.fill_bytes).await?;
    }

    let clock = Clock::start(settings);
    let live = Arc::new(Live::default());
    let progress = Progress::start("read", settings, clock, Arc::clone(&live));
    let probe = ServerProbe::start(settings, clock);
    let passes = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..options.connections.max(1))
        .map(|first| {
            let (settings, live, passes, paths) =
                (settings.clone(), Arc::clone(&live), Arc::clone(&passes), Arc::clone(&paths));
            tokio::spawn(async move { read_loop(&settings, clock, &live, &passes, &paths, first).await })
        })
        .collect();
    let tally = Tally::join(workers).await?;
    progress.finish();
    let mut report = Report::new("read");
    report
        .add("connections", options.connections as u64, "")
        .add("streams", paths.len() as u64, "")
        .add("stream_bytes", options.fill_bytes, "B")
        .add("passes", passes.load(Ordering::Relaxed), "");
    tally.report(&mut report, "reads", &clock, &[200]);
    probe.finish(&clock, &mut report).await;
    Ok(report)
}

/// Whole passes over the streams (one at a time, from `paths[first]` on) until the run ends.
async fn read_loop(
    settings: &Settings,
    clock: Clock,
    live: &Live,
    passes: &AtomicU64,
    paths: &[String],
    first: usize,
) -> Result<Tally, String> {
    let mut stream = first % paths.len();
    let mut tally = Tally::default();
    let mut connection = Connection::open(&settings.target).await.map_err(|e| format!("connect: {e}"))?;
    let mut offset = "-1".to_string();
    let mut count = 0;
    while !clock.done() && count < settings.requests_max {
        count += 1;
        let path = &paths[stream];
        let sent = Instant::now();
        let reply = match connection.send_counting(Method::GET, &format!("{path}?offset={offset}")).await {
            Ok(reply) => reply,
            Err(_) => {
                recover(&mut tally, &clock, live, &mut connection, &settings.target).await?;
                continue;
            }
        };
        tally.record(&clock, live, sent, reply.status, reply.status == 200, reply.body_bytes);
        let next = reply.header("stream-next-offset").map(str::to_string);
        match (reply.status, next, reply.header("stream-up-to-date").is_some()) {
            (200, Some(_), true) => {
                if clock.measuring() {
                    passes.fetch_add(1, Ordering::Relaxed);
                }
                offset = "-1".into();
                stream = (stream + 1) % paths.len();
            }
            (200, Some(next), false) => offset = next,
            (status, ..) => return Err(format!("read {path}: status {status}")),
        }
    }
    Ok(tally)
}
