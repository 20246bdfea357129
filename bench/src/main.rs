//! The `ds-bench` command: pick a scenario, run it, print the table, write JSON if asked.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use ds_bench::report::Report;
use ds_bench::scenario::{fanout, streams};
use ds_bench::target::Target;

#[derive(Parser)]
#[command(name = "ds-bench", version, about = "Load generator for Durable Streams servers")]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
}

/// Options every scenario takes.
#[derive(Args, Clone)]
struct Common {
    /// Base URL of the server
    #[arg(long, default_value = "http://127.0.0.1:4437")]
    url: String,
    /// Path prefix of streams (`/` for servers that mount streams at the root)
    #[arg(long, default_value = "/v1/stream/")]
    prefix: String,
    /// Seconds to run the measured phase
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Write all figures as JSON to this file
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also report the server's memory (from /proc/PID)
    #[arg(long)]
    server_pid: Option<u32>,
}

#[derive(Subcommand)]
enum Scenario {
    /// K SSE subscribers on one stream and a writer at R events/s
    Fanout {
        #[command(flatten)]
        common: Common,
        #[arg(long, default_value_t = 100)]
        subscribers: usize,
        /// Events per second
        #[arg(long, default_value_t = 50)]
        rate: u32,
        /// Bytes per event payload
        #[arg(long, default_value_t = 64)]
        bytes: usize,
    },
    /// Create N streams with one small message each
    Streams {
        #[command(flatten)]
        common: Common,
        #[arg(long, default_value_t = 10_000)]
        count: usize,
        #[arg(long, default_value_t = 64)]
        bytes: usize,
        #[arg(long, default_value_t = 16)]
        connections: usize,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let (common, result) = runtime.block_on(run(cli.scenario));
    let report = match result {
        Ok(report) => report,
        Err(error) => {
            eprintln!("ds-bench: {error}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", report.table());
    if let Some(path) = &common.json {
        let text = serde_json::to_string_pretty(&report.to_json()).expect("report serializes");
        if let Err(error) = std::fs::write(path, text) {
            eprintln!("ds-bench: cannot write {}: {error}", path.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

async fn run(scenario: Scenario) -> (Common, Result<Report, String>) {
    match scenario {
        Scenario::Fanout { common, subscribers, rate, bytes } => {
            let options = fanout::FanoutOptions {
                subscribers,
                rate_per_sec: rate,
                duration: Duration::from_secs(common.duration),
                bytes,
                server_pid: common.server_pid,
            };
            let result = match Target::parse(&common.url, &common.prefix) {
                Ok(target) => fanout::run(&target, &options).await,
                Err(error) => Err(error),
            };
            (common, result)
        }
        Scenario::Streams { common, count, bytes, connections } => {
            let options =
                streams::StreamsOptions { count, bytes, connections, server_pid: common.server_pid };
            let result = match Target::parse(&common.url, &common.prefix) {
                Ok(target) => streams::run(&target, &options).await,
                Err(error) => Err(error),
            };
            (common, result)
        }
    }
}
