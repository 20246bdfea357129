//! The `ds-bench` command: pick a scenario (or `compare` two servers on one), run it, print
//! the table, write JSON if asked.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use ds_bench::compare::Comparison;
use ds_bench::report::Report;
use ds_bench::run::Settings;
use ds_bench::scenario::{append, fanout, fork, healthz, idle, longpoll, mixed, read, streams};
use ds_bench::target::Target;

#[derive(Parser)]
#[command(
    name = "ds-bench",
    version,
    about = "Load generator for Durable Streams servers",
    max_term_width = 100
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    #[command(flatten)]
    Scenario(Scenario),
    /// Run a scenario against two servers in turn (A, B, A, B, …) and print each figure
    /// with the ratio A/B
    Compare {
        /// Base URL of server A
        #[arg(long)]
        a: String,
        /// Base URL of server B
        #[arg(long)]
        b: String,
        /// Runs against each server
        #[arg(long, default_value_t = 3)]
        rounds: u32,
        /// Path prefix of streams on server A (default: the scenario's --prefix)
        #[arg(long)]
        a_prefix: Option<String>,
        /// Path prefix of streams on server B (default: the scenario's --prefix), for a
        /// peer that mounts streams elsewhere (`--b-prefix /` for one at the root)
        #[arg(long)]
        b_prefix: Option<String>,
        #[command(subcommand)]
        scenario: Scenario,
    },
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
    /// Seconds of the measured phase
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds of warm-up before it (not measured)
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Most requests one connection sends
    #[arg(long, default_value_t = 100_000_000)]
    requests_max: u64,
    /// Write all figures as JSON to this file
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also report the server's CPU time and memory (from /proc/PID)
    #[arg(long)]
    server_pid: Option<u32>,
    /// No progress line
    #[arg(long)]
    quiet: bool,
    /// Bearer token sent with every request (a proxy that checks tokens)
    #[arg(long)]
    bearer: Option<String>,
}

#[derive(Subcommand, Clone)]
enum Scenario {
    /// C keep-alive connections appending B-byte bodies to S streams
    Append {
        #[command(flatten)]
        common: Common,
        /// Keep-alive connections, each appending in a closed loop
        #[arg(long, default_value_t = 64)]
        connections: usize,
        /// Streams the appends are spread over
        #[arg(long, default_value_t = 100)]
        streams: usize,
        /// Bytes per append body
        #[arg(long, default_value_t = 256)]
        bytes: usize,
        /// Send idempotent-producer headers (each connection a producer on its own stream)
        #[arg(long)]
        producer: bool,
        /// Create the streams through this base URL instead (a cluster's other node: every
        /// append is then forwarded)
        #[arg(long)]
        create_url: Option<String>,
    },
    /// C connections reading a pre-filled stream from the start, following Stream-Next-Offset
    Read {
        #[command(flatten)]
        common: Common,
        /// Connections reading the stream again and again
        #[arg(long, default_value_t = 8)]
        connections: usize,
        /// Bytes the stream holds
        #[arg(long, default_value_t = 16 << 20)]
        fill_bytes: u64,
        /// Size of the appends that fill it
        #[arg(long, default_value_t = 4096)]
        append_bytes: usize,
        /// Streams of that size; each connection reads the next one after each pass (more
        /// bytes than a server keeps in memory measure reads of the log itself)
        #[arg(long, default_value_t = 1)]
        streams: usize,
    },
    /// K SSE subscribers on one stream and a writer at R events/s
    Fanout {
        #[command(flatten)]
        common: Common,
        /// SSE subscribers on the stream
        #[arg(long, default_value_t = 100)]
        subscribers: usize,
        /// Events per second
        #[arg(long, default_value_t = 50)]
        rate: u32,
        /// Bytes per event payload
        #[arg(long, default_value_t = 64)]
        bytes: usize,
    },
    /// L long-polling readers following a writer at R events/s
    Longpoll {
        #[command(flatten)]
        common: Common,
        /// Long-polling readers following the stream
        #[arg(long, default_value_t = 100)]
        readers: usize,
        /// Events per second
        #[arg(long, default_value_t = 50)]
        rate: u32,
    },
    /// C connections appending one message each, then left open and idle: the server's
    /// memory per idle producer connection (with --server-pid)
    Idle {
        #[command(flatten)]
        common: Common,
        /// Connections, each appending once and then idle
        #[arg(long, default_value_t = 4000)]
        connections: usize,
        /// Bytes of each connection's append
        #[arg(long, default_value_t = 16)]
        bytes: usize,
    },
    /// Create N streams with one small message each
    Streams {
        #[command(flatten)]
        common: Common,
        /// Streams to create
        #[arg(long, default_value_t = 10_000)]
        count: usize,
        /// Bytes of each stream's first message
        #[arg(long, default_value_t = 64)]
        bytes: usize,
        /// Connections creating streams in a closed loop
        #[arg(long, default_value_t = 16)]
        connections: usize,
        /// Create each stream empty, then append its first message with a POST (a
        /// creation is the pair; without it, the message is the PUT's body)
        #[arg(long)]
        append: bool,
    },
    /// Fork creation against plain creation, and catch-up of a fork against its source
    Fork {
        #[command(flatten)]
        common: Common,
        /// Bytes the source holds (each fork inherits all of them; within the server's
        /// stream limit, 10 MiB by default)
        #[arg(long, default_value_t = 8 << 20)]
        fill_bytes: u64,
        /// Size of the appends that fill the source
        #[arg(long, default_value_t = 64 << 10)]
        append_bytes: usize,
        /// Streams of each kind created per turn
        #[arg(long, default_value_t = 2000)]
        creates: usize,
        /// Connections creating streams in a closed loop
        #[arg(long, default_value_t = 16)]
        connections: usize,
        /// Turns of each kind, alternating plain and fork
        #[arg(long, default_value_t = 5)]
        turns: usize,
    },
    /// Writers, catch-up readers and live (SSE) readers together
    Mixed {
        #[command(flatten)]
        common: Common,
        /// Connections appending timed messages round-robin over the streams
        #[arg(long, default_value_t = 16)]
        writers: usize,
        /// Connections reading whole streams from the start, one stream after another
        #[arg(long, default_value_t = 8)]
        catchup_readers: usize,
        /// SSE readers, each following one stream and timing delivery
        #[arg(long, default_value_t = 64)]
        live_readers: usize,
        /// Streams shared by the writers and readers (each pre-filled with 64 messages)
        #[arg(long, default_value_t = 32)]
        streams: usize,
        /// Bytes per appended message
        #[arg(long, default_value_t = 256)]
        bytes: usize,
    },
    /// C connections requesting GET /healthz: the generator's own ceiling
    Healthz {
        #[command(flatten)]
        common: Common,
        /// Connections requesting in a closed loop
        #[arg(long, default_value_t = 64)]
        connections: usize,
    },
}

impl Scenario {
    fn common(&self) -> &Common {
        match self {
            Scenario::Append { common, .. }
            | Scenario::Read { common, .. }
            | Scenario::Fanout { common, .. }
            | Scenario::Longpoll { common, .. }
            | Scenario::Idle { common, .. }
            | Scenario::Streams { common, .. }
            | Scenario::Fork { common, .. }
            | Scenario::Mixed { common, .. }
            | Scenario::Healthz { common, .. } => common,
        }
    }
}

fn settings(common: &Common, url: &str) -> Result<Settings, String> {
    let seconds = |value: f64, name: &str| {
        Duration::try_from_secs_f64(value).map_err(|_| format!("--{name} {value}: give a number of seconds"))
    };
    Ok(Settings {
        target: Target {
            authorization: common.bearer.as_ref().map(|t| format!("Bearer {t}")),
            ..Target::parse(url, &common.prefix)?
        },
        warmup: seconds(common.warmup, "warmup")?,
        duration: seconds(common.duration, "duration")?,
        requests_max: common.requests_max,
        server_pid: common.server_pid,
        progress: !common.quiet && std::io::IsTerminal::is_terminal(&std::io::stderr()),
    })
}

/// [`settings`] for the server at `url`, its streams under `prefix` when given.
fn settings_at(common: &Common, url: &str, prefix: Option<&str>) -> Result<Settings, String> {
    let mut settings = settings(common, url)?;
    if let Some(prefix) = prefix {
        settings.target.prefix = Target::parse(url, prefix)?.prefix;
    }
    Ok(settings)
}

async fn run(scenario: &Scenario, settings: &Settings) -> Result<Report, String> {
    match scenario.clone() {
        Scenario::Append { connections, streams, bytes, producer, create_url, .. } => {
            let create_at = create_url
                .map(|url| {
                    Ok::<_, String>(Target {
                        authorization: settings.target.authorization.clone(),
                        ..Target::parse(&url, &settings.target.prefix)?
                    })
                })
                .transpose()?;
            let options = append::AppendOptions { connections, streams, bytes, producer, create_at };
            append::run(settings, &options).await
        }
        Scenario::Read { connections, fill_bytes, append_bytes, streams, .. } => {
            read::run(settings, &read::ReadOptions { connections, fill_bytes, append_bytes, streams }).await
        }
        Scenario::Fanout { subscribers, rate, bytes, .. } => {
            fanout::run(settings, &fanout::FanoutOptions { subscribers, rate_per_sec: rate, bytes }).await
        }
        Scenario::Longpoll { readers, rate, .. } => {
            longpoll::run(settings, &longpoll::LongpollOptions { readers, rate_per_sec: rate }).await
        }
        Scenario::Idle { connections, bytes, .. } => {
            idle::run(settings, &idle::IdleOptions { connections, bytes }).await
        }
        Scenario::Streams { count, bytes, connections, append, .. } => {
            let options = streams::StreamsOptions { count, bytes, connections, separate_append: append };
            streams::run(settings, &options).await
        }
        Scenario::Fork { fill_bytes, append_bytes, creates, connections, turns, .. } => {
            let options = fork::ForkOptions { fill_bytes, append_bytes, creates, connections, turns };
            fork::run(settings, &options).await
        }
        Scenario::Mixed { writers, catchup_readers, live_readers, streams, bytes, .. } => {
            let options = mixed::MixedOptions { writers, catchup_readers, live_readers, streams, bytes };
            mixed::run(settings, &options).await
        }
        Scenario::Healthz { connections, .. } => healthz::run(settings, connections).await,
    }
}

/// Runs the scenario alone, or in turns against two servers.
async fn execute(command: &Command) -> Result<(String, serde_json::Value), String> {
    match command {
        Command::Scenario(scenario) => {
            let report = run(scenario, &settings(scenario.common(), &scenario.common().url)?).await?;
            Ok((report.table(), report.to_json()))
        }
        Command::Compare { a, b, rounds, a_prefix, b_prefix, scenario } => {
            let settings_a = settings_at(scenario.common(), a, a_prefix.as_deref())?;
            let settings_b = settings_at(scenario.common(), b, b_prefix.as_deref())?;
            let mut comparison = Comparison::new(a, b);
            for round in 0..(*rounds).max(1) {
                eprintln!("round {} of {rounds}: A ({a})", round + 1);
                comparison.add_a(run(scenario, &settings_a).await?);
                eprintln!("round {} of {rounds}: B ({b})", round + 1);
                comparison.add_b(run(scenario, &settings_b).await?);
            }
            Ok((comparison.table(), comparison.to_json()))
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let json_path = match &cli.command {
        Command::Scenario(scenario) | Command::Compare { scenario, .. } => scenario.common().json.clone(),
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let (table, json) = match runtime.block_on(execute(&cli.command)) {
        Ok(outcome) => outcome,
        Err(error) => {
            eprintln!("ds-bench: {error}");
            return ExitCode::FAILURE;
        }
    };
    print!("{table}");
    if let Some(path) = json_path {
        let text = serde_json::to_string_pretty(&json).expect("figures serialize");
        if let Err(error) = std::fs::write(&path, text) {
            eprintln!("ds-bench: cannot write {}: {error}", path.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
