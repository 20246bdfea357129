//! `ds-tool streams DIR`: one row per stream. A fork shows its source (name, and in JSON its
//! incarnation), the offset and sub-offset it was forked at and where its own messages
//! start; every stream shows how many live forks read it, and whether it is soft-deleted
//! (gone for clients, kept for its forks).

use std::collections::HashMap;
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
    column("deleted", 7),
    column("forks", 5),
    column("forked_from", 24),
    column("name", 0),
];

pub fn run(store: &Store, format: Format, out: &mut dyn Write) -> Result<Outcome, ToolError> {
    let mut streams = Vec::new();
    for_each_stream(store, |stream| {
        streams.push(stream.clone());
        Ok(())
    })?;
    let mut forks: HashMap<(&str, u64), u64> = HashMap::new();
    for reference in streams.iter().filter_map(|stream| stream.fork.as_ref()) {
        *forks.entry((&reference.origin.source, reference.source_id.raw())).or_default() += 1;
    }
    let mut table = Table::start(out, format, COLUMNS)?;
    for stream in &streams {
        let live_forks = forks.get(&(&*stream.name, stream.id.raw())).copied().unwrap_or(0);
        table.row(row(stream, live_forks, format))?;
    }
    table.finish()?;
    Ok(Outcome::Clean)
}

/// Where a fork comes from: in text `source@offset+sub_offset` (`-` for a plain stream).
fn forked_from(stream: &StreamSnapshot, format: Format) -> Value {
    let Some(fork) = &stream.fork else {
        return Value::Null;
    };
    match format {
        Format::Text => {
            Value::from(format!("{}@{}+{}", fork.origin.source, fork.origin.offset, fork.origin.sub_offset))
        }
        Format::Json => json!({
            "source": &*fork.origin.source,
            "source_id": fork.source_id.raw(),
            "offset": fork.origin.offset.to_string(),
            "sub_offset": fork.origin.sub_offset,
            "start": fork.start().to_string(),
        }),
    }
}

fn row(stream: &StreamSnapshot, live_forks: u64, format: Format) -> Vec<Value> {
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
        Value::from(stream.deleted),
        Value::from(live_forks),
        forked_from(stream, format),
        Value::from(&*stream.name),
    ]
}
