//! `fork`: what a fork costs. One source stream is filled with N bytes; then, in alternating
//! turns, C connections create plain (empty) streams and forks of the source (at its tail,
//! so each fork references all N bytes), and one connection reads the source and a fork of
//! it from the start to the end (catch-up, following `Stream-Next-Offset`).
//!
//! Reports creations per second of each kind and catch-up MB/s of each (the median of the
//! turns), with the ratios fork/plain: a fork that copied its source would create at a rate
//! that falls with N, and a fork that read slowly would show below 1.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use hyper::Method;

use super::{create, fill, unique_suffix};
use crate::http::Connection;
use crate::report::Report;
use crate::run::Settings;
use crate::target::Target;

#[derive(Clone, Debug)]
pub struct ForkOptions {
    /// Bytes the source holds.
    pub fill_bytes: u64,
    /// Size of the appends that fill it.
    pub append_bytes: usize,
    /// Streams of each kind created per turn.
    pub creates: usize,
    pub connections: usize,
    /// Turns of each kind (creations and catch-up reads alternate plain/fork).
    pub turns: usize,
}

const CONTENT_TYPE: &str = "application/octet-stream";

pub async fn run(settings: &Settings, options: &ForkOptions) -> Result<Report, String> {
    let target = &settings.target;
    let prefix = format!("fork-{}", unique_suffix());
    let source = target.stream_path(&format!("{prefix}-source"));
    let mut setup = Connection::open(target).await.map_err(|e| format!("connect: {e}"))?;
    create(&mut setup, &source, CONTENT_TYPE).await?;
    let body = Bytes::from(vec![b'f'; options.append_bytes.max(1)]);
    fill(&mut setup, &source, CONTENT_TYPE, body, options.fill_bytes).await?;
    let reader_fork = target.stream_path(&format!("{prefix}-read"));
    make(&mut setup, &reader_fork, Some(&source)).await?;

    let (mut plain_rates, mut fork_rates, mut source_reads, mut fork_reads) =
        (vec![], vec![], vec![], vec![]);
    for turn in 0..options.turns.max(1) {
        let names = format!("{prefix}-t{turn}");
        plain_rates.push(create_turn(target, options, &format!("{names}-plain"), None).await?);
        fork_rates.push(create_turn(target, options, &format!("{names}-fork"), Some(&source)).await?);
        source_reads.push(catch_up(&mut setup, &source).await?);
        fork_reads.push(catch_up(&mut setup, &reader_fork).await?);
    }
    let (plain, fork) = (median(&mut plain_rates), median(&mut fork_rates));
    let (source_read, fork_read) = (median(&mut source_reads), median(&mut fork_reads));
    let mut report = Report::new("fork");
    report
        .add("source_bytes", options.fill_bytes, "B")
        .add("plain_creations_per_sec", plain, "/s")
        .add("fork_creations_per_sec", fork, "/s")
        .add("fork_to_plain_creation_ratio", fork / plain, "")
        .add("source_catch_up_mb_per_sec", source_read, "MB/s")
        .add("fork_catch_up_mb_per_sec", fork_read, "MB/s")
        .add("fork_to_source_catch_up_ratio", fork_read / source_read, "");
    Ok(report)
}

/// Creates `options.creates` streams named `{names}-{i}` over the connections (forks of
/// `source` when given); creations per second.
async fn create_turn(
    target: &Target,
    options: &ForkOptions,
    names: &str,
    source: Option<&str>,
) -> Result<f64, String> {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..options.connections.max(1))
        .map(|_| {
            let (target, next, names) = (target.clone(), Arc::clone(&next), names.to_string());
            let (source, count) = (source.map(str::to_string), options.creates);
            tokio::spawn(async move {
                let mut connection = Connection::open(&target).await.map_err(|e| format!("connect: {e}"))?;
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= count {
                        return Ok::<(), String>(());
                    }
                    let path = target.stream_path(&format!("{names}-{index}"));
                    make(&mut connection, &path, source.as_deref()).await?;
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.map_err(|e| format!("worker: {e}"))??;
    }
    Ok(options.creates as f64 / started.elapsed().as_secs_f64())
}

/// Creates the empty stream `path`, a fork of `source` when given.
async fn make(connection: &mut Connection, path: &str, source: Option<&str>) -> Result<(), String> {
    let mut headers = vec![("content-type", CONTENT_TYPE)];
    if let Some(source) = source {
        headers.push(("stream-forked-from", source));
    }
    let reply = connection
        .send(Method::PUT, path, &headers, Bytes::new())
        .await
        .map_err(|e| format!("create: {e}"))?;
    match reply.status {
        201 => Ok(()),
        status => Err(format!("create {path}: status {status}")),
    }
}

/// Reads `path` from the start to its tail; MB/s.
async fn catch_up(connection: &mut Connection, path: &str) -> Result<f64, String> {
    let started = Instant::now();
    let (mut offset, mut bytes) = ("-1".to_string(), 0u64);
    loop {
        let url = format!("{path}?offset={offset}");
        let reply = connection.send_counting(Method::GET, &url).await.map_err(|e| format!("read: {e}"))?;
        if reply.status != 200 {
            return Err(format!("read {path}: status {}", reply.status));
        }
        bytes += reply.body_bytes;
        let next = reply.header("stream-next-offset").ok_or("a read without Stream-Next-Offset")?;
        offset = next.to_string();
        if reply.header("stream-up-to-date").is_some() {
            return Ok(bytes as f64 / 1e6 / started.elapsed().as_secs_f64());
        }
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
