//! `ds-tool read DIR NAME [--offset O] [--limit N]`: a stream's messages, as a reader gets
//! them: the bytes of each message in order, or for JSON streams one JSON array. Reading
//! into damage writes the intact messages before it, then fails naming where (exit 1).

use std::io::Write;

use ds_engine::inspect::Store;
use ds_engine::ReadError;
use ds_engine::{Offset, StartAt};

use crate::cli::ReadArgs;
use crate::{Outcome, ToolError};

/// Stored bytes read at a time.
const READ_BYTES_MAX: usize = 1 << 20;

pub fn run(store: &Store, args: &ReadArgs, out: &mut dyn Write) -> Result<Outcome, ToolError> {
    let Some(reader) = store.open_stream(&args.name)? else {
        return Err(ToolError::Usage(format!(
            "there is no stream called {:?} in {}",
            args.name,
            store.dir.display()
        )));
    };
    let start = match &args.offset {
        None => StartAt::Beginning,
        Some(text) => {
            StartAt::parse(text).map_err(|e| ToolError::Usage(format!("--offset {text:?}: {e}")))?
        }
    };
    let mut at = match start {
        StartAt::Beginning => Offset::ZERO,
        StartAt::Tail => reader.snapshot.tail,
        StartAt::At(offset) => offset,
    };
    let json = reader.snapshot.config.content_type.is_json();
    let mut left = args.limit.unwrap_or(u64::MAX);
    let mut first = true;
    if json {
        out.write_all(b"[")?;
    }
    while at < reader.snapshot.tail && left > 0 {
        let messages = match reader.messages(at, READ_BYTES_MAX) {
            Ok(messages) => messages,
            Err(ReadError::Damaged) => {
                if json {
                    out.write_all(b"]\n")?;
                }
                return Err(ToolError::Damaged(format!(
                    "the stored data of {:?} is damaged at offset {at}; the messages before it were written",
                    args.name
                )));
            }
            Err(error) => {
                return Err(ToolError::Usage(format!("cannot read {:?} at {at}: {error}", args.name)))
            }
        };
        if messages.is_empty() {
            break;
        }
        for message in messages.iter().take(left.min(usize::MAX as u64) as usize) {
            if json && !first {
                out.write_all(b",")?;
            }
            out.write_all(&message.payload(json))?;
            first = false;
            left -= 1;
            at = message.next;
        }
    }
    if json {
        out.write_all(b"]\n")?;
    }
    Ok(Outcome::Clean)
}
