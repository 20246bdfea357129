//! ds-tool: offline inspection of a ds data directory.
//!
//! # Layout
//!
//! - [`cli`]: the command line (clap): subcommands and their options.
//! - [`commands`]: one module per subcommand — `info`, `streams`, `read`, `records`,
//!   `verify`, `stats` — each turning what the engine's inspection API reads into rows.
//! - [`output`]: aligned text tables or streamed JSON, and value formatting.
//!
//! # How a command flows
//!
//! `main` parses the arguments and calls [`run`], which opens the directory read-only with
//! [`ds_engine::inspect`] (a shared lock, refused while a server runs unless `--force`; the
//! manifest says which mode's layout to read) and hands it to the subcommand. Everything is
//! read through the engine's own codec, scans and recovery analysis — nothing here knows the
//! format — and rows are written as they are found, so a large directory is never held in
//! memory.

pub mod cli;
pub mod commands;
pub mod output;

use std::io::Write;

use cli::{Cli, Command};
use ds_engine::inspect::{self, InspectError};

/// What a run ends with.
#[derive(Debug)]
pub enum Outcome {
    /// Everything fine (exit code 0).
    Clean,
    /// `verify` found damage (exit code 1).
    Damaged,
}

/// Why a run failed (exit code 2; 1 for [`ToolError::Damaged`]).
#[derive(Debug)]
pub enum ToolError {
    Open(InspectError),
    Io(std::io::Error),
    Usage(String),
    /// `read` reached stored data that fails its checks (after writing what came before).
    Damaged(String),
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToolError::Open(error) => write!(f, "{error}"),
            ToolError::Io(error) => write!(f, "{error}"),
            ToolError::Usage(message) | ToolError::Damaged(message) => f.write_str(message),
        }
    }
}

impl From<std::io::Error> for ToolError {
    fn from(error: std::io::Error) -> Self {
        ToolError::Io(error)
    }
}

/// Runs `cli`, writing to `out`.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<Outcome, ToolError> {
    let common = cli.command.common();
    let store = inspect::open_dir(&common.dir, common.force)
        .map_err(ToolError::Open)?
        .with_record_bytes_max(common.record_bytes_max());
    let format = common.format();
    match &cli.command {
        Command::Info(_) => commands::info::run(&store, format, out),
        Command::Streams(_) => commands::streams::run(&store, format, out),
        Command::Read(args) => commands::read::run(&store, args, out),
        Command::Records(args) => commands::records::run(&store, args, format, out),
        Command::Verify(_) => commands::verify::run(&store, format, out),
        Command::Stats(_) => commands::stats::run(&store, format, out),
    }
}
