//! The `ds-server` binary: read the configuration, set up logging, run until signalled.

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::Parser;
use ds_server::config::Args;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let config = match args.into_config() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("ds-server: configuration error: {error}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
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
