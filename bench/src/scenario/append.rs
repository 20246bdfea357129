//! `append`: C keep-alive connections appending B-byte bodies to S streams as fast as the
//! server answers (a closed loop: each connection sends its next append when the last is
//! answered). With `--producer`, each connection is an idempotent producer on its own
//! stream, and retries an unanswered append with the same sequence number. With
//! `--create-url`, the streams are created through another server than the one appended to
//! (in a cluster: appends forwarded to the streams' owner).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use hyper::Method;

use super::{create, recover, unique_suffix};
use crate::http::Connection;
use crate::report::Report;
use crate::run::{Clock, Live, Progress, ServerProbe, Settings, Tally};

#[derive(Clone, Debug)]
pub struct AppendOptions {
    pub connections: usize,
    pub streams: usize,
    pub bytes: usize,
    pub producer: bool,
    /// Where the streams are created, when not at the target (in a cluster: another node,
    /// so that the target forwards every append to it).
    pub create_at: Option<crate::target::Target>,
}

pub async fn run(settings: &Settings, options: &AppendOptions) -> Result<Report, String> {
    let prefix = format!("append-{}", unique_suffix());
    let streams = options.streams.max(1);
    let create_at = options.create_at.as_ref().unwrap_or(&settings.target);
    let mut setup = Connection::open(create_at).await.map_err(|e| format!("connect: {e}"))?;
    let paths: Arc<Vec<String>> =
        Arc::new((0..streams).map(|i| settings.target.stream_path(&format!("{prefix}-{i}"))).collect());
    for path in paths.iter() {
        create(&mut setup, path, "application/octet-stream").await?;
    }
    let clock = Clock::start(settings);
    let live = Arc::new(Live::default());
    let progress = Progress::start("append", settings, clock, Arc::clone(&live));
    let probe = ServerProbe::start(settings, clock);
    let body = Bytes::from(vec![b'x'; options.bytes]);
    let workers: Vec<_> = (0..options.connections.max(1))
        .map(|worker| {
            let (settings, paths, live, body) =
                (settings.clone(), Arc::clone(&paths), Arc::clone(&live), body.clone());
            let producer = options.producer;
            tokio::spawn(
                async move { append_loop(&settings, clock, &live, &paths, worker, body, producer).await },
            )
        })
        .collect();
    let tally = Tally::join(workers).await?;
    progress.finish();
    let mut report = Report::new("append");
    report.add("connections", options.connections as u64, "").add("streams", streams as u64, "").add(
        "body_bytes",
        options.bytes as u64,
        "B",
    );
    tally.report(&mut report, "appends", &clock, &[200, 204]);
    probe.finish(&clock, &mut report).await;
    Ok(report)
}

/// One connection's appends until the run ends.
async fn append_loop(
    settings: &crate::run::Settings,
    clock: Clock,
    live: &Live,
    paths: &[String],
    worker: usize,
    body: Bytes,
    producer: bool,
) -> Result<Tally, String> {
    let mut tally = Tally::default();
    let mut connection = Connection::open(&settings.target).await.map_err(|e| format!("connect: {e}"))?;
    let id = format!("bench-{worker}");
    let (mut seq, mut sent_count) = (0u64, 0u64);
    while !clock.done() && sent_count < settings.requests_max {
        let stream = if producer { worker } else { worker + sent_count as usize * 7919 };
        let path = &paths[stream % paths.len()];
        let seq_text = seq.to_string();
        let mut headers = vec![("content-type", "application/octet-stream")];
        if producer {
            headers.extend([
                ("producer-id", id.as_str()),
                ("producer-epoch", "0"),
                ("producer-seq", seq_text.as_str()),
            ]);
        }
        let sent = Instant::now();
        sent_count += 1;
        match connection.send(Method::POST, path, &headers, body.clone()).await {
            Ok(reply) => {
                let ok = matches!(reply.status, 200 | 204);
                tally.record(&clock, live, sent, reply.status, ok, body.len() as u64);
                seq += u64::from(ok);
            }
            Err(_) => {
                recover(&mut tally, &clock, live, &mut connection, &settings.target).await?;
            }
        }
    }
    Ok(tally)
}
