//! `ds-tool records DIR [--shard K] [--stream NAME] [--from SEQ]`: the log records in order,
//! one line each, with the result of their checks. A record that fails them ends its log
//! (segment or stream file) with one line saying why.

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

use bytes::Bytes;
use ds_engine::inspect::Store;
use ds_engine::inspect::{flag_names, RecordKind, RecordScan, ScanEnd, Scanned, Segment};
use ds_engine::{Lsn, StorageMode, StreamId};
use serde_json::Value;

use crate::cli::RecordsArgs;
use crate::output::{column, Column, Format, Table};
use crate::{Outcome, ToolError};

const COLUMNS: &[Column] = &[
    column("log", 32),
    column("position", 10),
    column("seq", 8),
    column("kind", 6),
    column("stream", 8),
    column("offset", 33),
    column("messages", 8),
    column("bytes", 8),
    column("flags", 14),
    column("producer", 16),
    column("check", 0),
];

/// Which records to show.
struct Filter<'a> {
    from: Lsn,
    /// Only records of streams created with this name (every incarnation).
    name: Option<&'a str>,
    ids: HashSet<StreamId>,
}

impl Filter<'_> {
    fn admits(&mut self, record: &Scanned) -> bool {
        if let Some(name) = self.name {
            let created = record.meta.create.as_ref().is_some_and(|c| &*c.name == name);
            if created && record.header.kind == RecordKind::Create {
                self.ids.insert(record.header.stream);
            }
            if !self.ids.contains(&record.header.stream) {
                return false;
            }
        }
        record.header.lsn >= self.from
    }
}

pub fn run(
    store: &Store,
    args: &RecordsArgs,
    format: Format,
    out: &mut dyn Write,
) -> Result<Outcome, ToolError> {
    let mut filter =
        Filter { from: Lsn::from_raw(args.from), name: args.stream.as_deref(), ids: HashSet::new() };
    // Arguments are checked before anything is written.
    let shards: Vec<u32> = match (args.shard, &args.stream) {
        (Some(shard), _) if shard >= store.shard_count() => {
            return Err(ToolError::Usage(format!(
                "--shard {shard}: there are {} shards (0 to {})",
                store.shard_count(),
                store.shard_count() - 1
            )));
        }
        (Some(shard), _) => vec![shard],
        (None, Some(name)) => vec![store.shard_of(name)],
        (None, None) => (0..store.shard_count()).collect(),
    };
    let mut table = Table::start(out, format, COLUMNS)?;
    if store.mode() == StorageMode::Acid {
        for shard in shards {
            // Stream ids are per shard (and per stream file in the file modes).
            filter.ids.clear();
            let log = store.shard(shard)?;
            for segment in &log.analysis.segments {
                let bytes = segment.map.slice(0, segment.readable_len() as usize);
                let start = Segment::records_start();
                write_log(&mut table, &relative(store, &segment.path), bytes, start, &mut filter)?;
            }
        }
    } else {
        for (path, suffix) in store.stream_files()? {
            let file = store.stream_file(&path, suffix)?;
            filter.ids.clear();
            write_log(&mut table, &relative(store, &path), file.bytes, 0, &mut filter)?;
        }
    }
    table.finish()?;
    Ok(Outcome::Clean)
}

/// The rows of one log's records from `start`.
fn write_log(
    table: &mut Table<'_>,
    log: &str,
    bytes: Bytes,
    start: u64,
    filter: &mut Filter<'_>,
) -> std::io::Result<()> {
    let mut scan = RecordScan::new(bytes, start);
    for record in scan.by_ref() {
        if filter.admits(&record) {
            table.row(row(log, &record))?;
        }
    }
    if let Some(ScanEnd::Damaged(error)) = scan.end() {
        let mut values = vec![Value::from(log), Value::from(scan.position())];
        values.extend(std::iter::repeat_n(Value::Null, COLUMNS.len() - 3));
        values.push(Value::from(format!("bad: {error}")));
        table.row(values)?;
    }
    Ok(())
}

fn row(log: &str, record: &Scanned) -> Vec<Value> {
    let header = &record.header;
    let producer = record.meta.producer.as_ref().map(|p| format!("{}/{}/{}", p.id, p.epoch, p.seq));
    vec![
        Value::from(log),
        Value::from(record.position),
        Value::from(header.lsn.raw()),
        Value::from(header.kind.name()),
        if header.kind == RecordKind::Seal { Value::Null } else { Value::from(header.stream.raw()) },
        if header.kind == RecordKind::Append { Value::from(header.offset.to_string()) } else { Value::Null },
        Value::from(header.messages),
        Value::from(header.data_len()),
        Value::from(flags_text(header.kind, header.flags)),
        producer.map_or(Value::Null, Value::from),
        Value::from("ok"),
    ]
}

/// The flags of a record of `kind`, by name (`-` for none).
pub fn flags_text(kind: RecordKind, bits: u8) -> String {
    let set = flag_names(kind, bits);
    if set.is_empty() {
        "-".into()
    } else {
        set.join(",")
    }
}

/// `path` relative to the data directory.
pub fn relative(store: &Store, path: &Path) -> String {
    path.strip_prefix(&store.dir).unwrap_or(path).display().to_string()
}
