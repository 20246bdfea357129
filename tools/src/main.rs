//! `ds-tool`: offline inspection of a ds data directory. See the crate documentation.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use ds_tool::cli::Cli;
use ds_tool::{run, Outcome, ToolError};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = run(cli, &mut out).and_then(|outcome| out.flush().map(|()| outcome).map_err(ToolError::Io));
    match result {
        Ok(Outcome::Clean) => ExitCode::SUCCESS,
        Ok(Outcome::Damaged) => ExitCode::from(1),
        // A reader that went away (`ds-tool streams DIR | head`) is not an error.
        Err(ToolError::Io(error)) if error.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(error @ ToolError::Damaged(_)) => {
            eprintln!("ds-tool: {error}");
            ExitCode::from(1)
        }
        Err(error) => {
            eprintln!("ds-tool: {error}");
            ExitCode::from(2)
        }
    }
}
