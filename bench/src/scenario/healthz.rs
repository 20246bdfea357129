//! `healthz`: C keep-alive connections requesting `GET /healthz` in a closed loop — what the
//! generator itself reaches against a server that does almost nothing, so its other figures
//! can be trusted to measure the server, not the generator.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use hyper::Method;

use super::recover;
use crate::http::Connection;
use crate::report::Report;
use crate::run::{Clock, Live, Progress, ServerProbe, Settings, Tally};

pub async fn run(settings: &Settings, connections: usize) -> Result<Report, String> {
    let clock = Clock::start(settings);
    let live = Arc::new(Live::default());
    let progress = Progress::start("healthz", settings, clock, Arc::clone(&live));
    let probe = ServerProbe::start(settings, clock);
    let workers: Vec<_> = (0..connections.max(1))
        .map(|_| {
            let (settings, live) = (settings.clone(), Arc::clone(&live));
            tokio::spawn(async move {
                let mut tally = Tally::default();
                let mut connection =
                    Connection::open(&settings.target).await.map_err(|e| format!("connect: {e}"))?;
                let mut count = 0;
                while !clock.done() && count < settings.requests_max {
                    count += 1;
                    let sent = Instant::now();
                    match connection.send(Method::GET, "/healthz", &[], Bytes::new()).await {
                        Ok(reply) => tally.record(&clock, &live, sent, reply.status, reply.status == 200, 0),
                        Err(_) => {
                            recover(&mut tally, &clock, &live, &mut connection, &settings.target).await?;
                        }
                    }
                }
                Ok::<Tally, String>(tally)
            })
        })
        .collect();
    let tally = Tally::join(workers).await?;
    progress.finish();
    let mut report = Report::new("healthz");
    report.add("connections", connections as u64, "");
    tally.report(&mut report, "requests", &clock, &[200]);
    probe.finish(&clock, &mut report).await;
    Ok(report)
}
