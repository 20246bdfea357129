//! The command line: `ds-tool <subcommand> DIR [options]`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::output::Format;

#[derive(Parser, Debug)]
#[command(
    name = "ds-tool",
    version,
    about = "Offline inspection of a ds data directory",
    max_term_width = 100
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Mode, format, shards, segments, streams, checkpoints, last shutdown
    Info(Common),
    /// One row per stream: name, content type, messages, bytes, next offset, closed, TTL,
    /// expiry, producers
    Streams(Common),
    /// A stream's messages as a reader gets them (JSON streams as one JSON array)
    Read(ReadArgs),
    /// The log records in order, one line each
    Records(RecordsArgs),
    /// Check every checksum and sequence number; exit code 1 when anything is damaged
    Verify(Common),
    /// Size distributions for capacity planning
    Stats(Common),
}

/// What every subcommand takes.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// The data directory (DS_STORAGE__DATA_DIR of the server)
    pub dir: PathBuf,
    /// Read even while a server holds the directory (a consistent prefix of each log)
    #[arg(long)]
    pub force: bool,
    /// JSON instead of aligned text
    #[arg(long)]
    pub json: bool,
}

impl Common {
    pub fn format(&self) -> Format {
        if self.json {
            Format::Json
        } else {
            Format::Text
        }
    }
}

#[derive(Args, Debug)]
pub struct ReadArgs {
    #[command(flatten)]
    pub common: Common,
    /// The stream's name (as in /v1/stream/NAME, decoded)
    pub name: String,
    /// Start at this offset (as Stream-Next-Offset gives it), at -1 (the beginning, the
    /// default) or at now (the tail: nothing is read)
    #[arg(long, allow_hyphen_values = true)]
    pub offset: Option<String>,
    /// Read at most this many messages
    #[arg(long)]
    pub limit: Option<u64>,
}

#[derive(Args, Debug)]
pub struct RecordsArgs {
    #[command(flatten)]
    pub common: Common,
    /// Only this shard (acid)
    #[arg(long)]
    pub shard: Option<u32>,
    /// Only the records of the stream with this name
    #[arg(long)]
    pub stream: Option<String>,
    /// Start at this sequence number (acid: the LSN; file modes: the record's index)
    #[arg(long, default_value_t = 0)]
    pub from: u64,
}

impl Command {
    pub fn common(&self) -> &Common {
        match self {
            Command::Info(common)
            | Command::Streams(common)
            | Command::Verify(common)
            | Command::Stats(common) => common,
            Command::Read(args) => &args.common,
            Command::Records(args) => &args.common,
        }
    }
}
