//! The `ds-server` binary: read the configuration, set up logging, run until signalled.

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::Parser;
use ds_server::{gather_log_lines, write_log_lines, Args, LogWriter};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    ds_server::fix_heap_thresholds();
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(LogWriter)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let config = match args.into_config() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("ds-server: configuration error: {error}");
            return ExitCode::from(2);
        }
    };
    let runtime = match runtime_builder().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("ds-server: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(ds_server::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("ds-server: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The async runtime, with two things a worker does once per turn rather than per request:
///
/// - it writes the access lines it gathered when it is about to go idle;
/// - with a single CPU to run on, it holds back shard wake-ups until then too
///   (`ds_engine::wake_batch`): a shard woken earlier could not run sooner, only cut the
///   worker's turn short and commit smaller batches.
///
/// A worker opts in on its first wake-up; blocking-pool threads never do, so they write
/// their lines and ring their shards at once.
fn runtime_builder() -> tokio::runtime::Builder {
    let one_cpu = std::thread::available_parallelism().is_ok_and(|cpus| cpus.get() == 1);
    if one_cpu {
        tracing::info!("one CPU: the worker rings the shards it sent ops to once per turn");
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder
        .enable_all()
        .on_thread_unpark(move || {
            gather_log_lines();
            if one_cpu {
                ds_engine::wake_batch::defer_on_this_thread();
            }
        })
        .on_thread_park(|| {
            ds_engine::wake_batch::ring_deferred();
            write_log_lines();
        })
        .on_thread_stop(write_log_lines);
    builder
}
