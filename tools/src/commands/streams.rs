//! `ds-tool streams DIR`: one row per stream.

use std::io::Write;

use ds_engine::format_rfc3339_ms;
use ds_engine::inspect::Store;
use ds_engine::inspect::StreamSnapshot;
use serde_json::{json, Value};

use super::for_each_stream;
use crate::output::{column, optional, Column, Format, Table};
use crate::{Outcome, ToolError};

const COLUMNS: &[Column] = &[
    column("messages", 10),
    column("bytes", 12),
    column("next_offset", 33),
    column("closed", 6),
    column("ttl_secs", 8),
    column("expires_at", 24),
    column("producers", 9),
    column("content_type", 24),
    column("name", 0),
];

pub fn run(store: &Store, format: Format, out: &mut dyn Write) -> Result<Outcome, ToolError> {
    let mut table = Table::start(out, format, COLUMNS)?;
    for_each_stream(store, |stream| table.row(row(stream, format)))?;
    table.finish()?;
    Ok(Outcome::Clean)
}

fn row(stream: &StreamSnapshot, format: Format) -> Vec<Value> {
    let producers = match format {
        // The count in text; every producer's state in JSON.
        Format::Text => Value::from(stream.producers.len()),
        Format::Json => stream
            .producers
            .iter()
            .map(|(id, state)| json!({"id": &**id, "epoch": state.epoch, "seq": state.last_seq}))
            .collect(),
    };
    vec![
        Value::from(stream.tail.messages),
        Value::from(stream.tail.bytes),
        Value::from(stream.tail.to_string()),
        Value::from(stream.closed),
        optional(stream.config.ttl_secs),
        optional(stream.config.expires_at_ms.map(format_rfc3339_ms)),
        producers,
        Value::from(stream.config.content_type.as_str()),
        Value::from(&*stream.name),
    ]
}
