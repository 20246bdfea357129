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
    /// The server's largest append, as it was set (acid: how far a torn batch can reach)
    #[arg(long, env = "DS_LIMITS__MAX_APPEND_BYTES", value_name = "BYTES")]
    pub max_append_bytes: Option<u64>,
    /// The server's per-stream limit, as it was set (caps the largest append)
    #[arg(long, env = "DS_LIMITS__MAX_STREAM_BYTES", value_name = "BYTES", default_value_t = ds_engine::STREAM_BYTES_MAX_DEFAULT)]
    pub max_stream_bytes: u64,
}

impl Common {
    /// The largest record the server took, as it computes it from the same settings.
    pub fn record_bytes_max(&self) -> u64 {
        let append_bytes_max = self.max_append_bytes.unwrap_or(ds_engine::APPEND_BYTES_MAX_DEFAULT);
        let stream_bytes_max = self.max_stream_bytes;
        ds_engine::Limits { append_bytes_max, stream_bytes_max, ..ds_engine::Limits::default() }
            .record_bytes_max()
    }

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
