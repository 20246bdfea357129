//! `ds-tool info DIR`: what a data directory holds.

use std::io::Write;

use ds_engine::inspect::{ShardLog, Store};
use ds_engine::{Lsn, StorageMode};
use serde_json::{json, Value};

use crate::output::{column, optional, write_summary, Column, Format, Table};
use crate::{Outcome, ToolError};

const SHARD_COLUMNS: &[Column] = &[
    column("shard", 5),
    column("segments", 8),
    column("segment_files_bytes", 19),
    column("live_bytes", 12),
    column("streams", 8),
    column("checkpoint_lsn", 14),
    column("next_lsn", 10),
    column("replayed", 8),
    column("clean", 5),
    column("damage", 0),
];

pub fn run(store: &Store, format: Format, out: &mut dyn Write) -> Result<Outcome, ToolError> {
    match store.mode() {
        StorageMode::Acid => acid(store, format, out)?,
        _ => files(store, format, out)?,
    }
    Ok(Outcome::Clean)
}

fn header(store: &Store) -> Vec<(&'static str, Value)> {
    vec![
        ("directory", Value::from(store.dir.display().to_string())),
        ("format", Value::from(store.manifest.format)),
        ("mode", Value::from(store.mode().as_str())),
        ("shards", Value::from(store.shard_count())),
        ("hash", Value::from(store.manifest.hash.clone())),
    ]
}

/// Totals first, then a row per shard.
fn acid(store: &Store, format: Format, out: &mut dyn Write) -> std::io::Result<()> {
    // One shard's analysis at a time: a row each is all that is kept.
    let mut rows: Vec<Vec<Value>> = Vec::new();
    let mut unclean: Vec<u32> = Vec::new();
    for shard in 0..store.shard_count() {
        let log = store.shard(shard)?;
        if !log.analysis.report(&log.dir).clean_shutdown {
            unclean.push(shard);
        }
        rows.push(shard_row(&log));
    }
    let total = |column: usize| rows.iter().map(|row| row[column].as_u64().unwrap_or(0)).sum::<u64>();
    let mut fields = header(store);
    fields.extend([
        ("streams", Value::from(total(4))),
        ("segments", Value::from(total(1))),
        ("segment_files_bytes", Value::from(total(2))),
        ("live_bytes", Value::from(total(3))),
        ("dead_or_unwritten_bytes", Value::from(total(2).saturating_sub(total(3)))),
        ("clean_shutdown", Value::from(unclean.is_empty())),
        ("unclean_shards", Value::from(unclean)),
    ]);
    if format == Format::Json {
        let shards: Vec<Value> = rows
            .into_iter()
            .map(|row| SHARD_COLUMNS.iter().map(|c| c.name.to_string()).zip(row).collect())
            .collect();
        fields.push(("shard_details", Value::from(shards)));
        return write_summary(out, format, fields);
    }
    write_summary(out, format, fields)?;
    writeln!(out)?;
    let mut table = Table::start(out, format, SHARD_COLUMNS)?;
    for row in rows {
        table.row(row)?;
    }
    table.finish().map(|_| ())
}

fn shard_row(log: &ShardLog) -> Vec<Value> {
    let analysis = &log.analysis;
    let report = analysis.report(&log.dir);
    let segment_bytes: u64 = analysis.segments.iter().map(|s| s.size()).sum();
    let live_bytes: u64 = analysis.ledger().live.values().sum();
    let more = match report.damage.len() {
        0 | 1 => String::new(),
        count => format!(" (and {} more)", count - 1),
    };
    let damage = report
        .damage
        .first()
        .map(|d| json!(format!("{} at {}: {}{more}", d.file.display(), d.position, d.reason)));
    vec![
        Value::from(log.shard),
        Value::from(analysis.segments.len()),
        Value::from(segment_bytes),
        Value::from(live_bytes),
        Value::from(analysis.streams().count()),
        optional(report.checkpoint_lsn.map(Lsn::raw)),
        Value::from(analysis.next_lsn().raw()),
        Value::from(report.records_replayed),
        Value::from(report.clean_shutdown),
        damage.unwrap_or(Value::Null),
    ]
}

/// The file modes: totals over every stream file.
fn files(store: &Store, format: Format, out: &mut dyn Write) -> std::io::Result<()> {
    let (mut files, mut streams, mut bytes, mut damaged) = (0u64, 0u64, 0u64, 0u64);
    for (path, suffix) in store.stream_files()? {
        let file = store.stream_file(&path, suffix)?;
        files += 1;
        bytes += file.bytes.len() as u64;
        streams += u64::from(file.analysis.snapshot.is_some());
        damaged += u64::from(file.analysis.failure.is_some());
    }
    let mut fields = header(store);
    fields.extend([
        ("streams", Value::from(streams)),
        ("stream_files", Value::from(files)),
        ("file_bytes", Value::from(bytes)),
        ("damaged_files", Value::from(damaged)),
    ]);
    write_summary(out, format, fields)
}
