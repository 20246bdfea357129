//! `ds-tool stats DIR`: size distributions for capacity planning — messages and bytes per
//! stream, bytes per append, records per log (segment or stream file).
//!
//! Each distribution is counted in power-of-two buckets as the records stream past (constant
//! memory whatever the directory's size). The quantiles are read from the buckets: each is
//! the upper bound of its bucket, or the maximum when that is lower (`p50_at_most`: half the
//! values are at most this), so they are exact to within a factor of two; min, max and mean
//! are exact.

use std::io::Write;

use bytes::Bytes;
use ds_engine::inspect::Store;
use ds_engine::inspect::{RecordKind, RecordScan, Segment};
use ds_engine::StorageMode;
use serde_json::{json, Value};

use super::for_each_stream;
use crate::output::{column, Column, Format, Table};
use crate::{Outcome, ToolError};

/// Counts of values in power-of-two buckets: bucket `k` holds values in `[2^(k-1), 2^k)`
/// (bucket 0 holds zeros).
pub struct Distribution {
    name: &'static str,
    buckets: [u64; 65],
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Distribution {
    pub fn new(name: &'static str) -> Distribution {
        Distribution { name, buckets: [0; 65], count: 0, sum: 0, min: u64::MAX, max: 0 }
    }

    pub fn add(&mut self, value: u64) {
        self.buckets[(u64::BITS - value.leading_zeros()) as usize] += 1;
        self.count += 1;
        self.sum += u128::from(value);
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    /// The upper bound of the bucket holding quantile `q` (at most the maximum seen).
    pub fn quantile(&self, q: f64) -> u64 {
        let rank = ((self.count as f64 * q).ceil() as u64).max(1);
        let mut seen = 0;
        for (bucket, count) in self.buckets.iter().enumerate() {
            seen += count;
            if seen >= rank {
                let upper = if bucket == 0 { 0 } else { (1u128 << bucket) - 1 };
                return (upper.min(u128::from(u64::MAX)) as u64).min(self.max);
            }
        }
        self.max
    }

    fn row(&self) -> Vec<Value> {
        let empty = self.count == 0;
        let figure = |value: u64| if empty { Value::Null } else { Value::from(value) };
        let mean = if empty { Value::Null } else { json!((self.sum / u128::from(self.count)) as u64) };
        vec![
            Value::from(self.name),
            Value::from(self.count),
            figure(self.min),
            figure(self.quantile(0.5)),
            figure(self.quantile(0.99)),
            figure(self.max),
            mean,
            self.histogram(),
        ]
    }

    /// Non-empty buckets as `"lo-hi": count`.
    fn histogram(&self) -> Value {
        let mut buckets = serde_json::Map::new();
        for (bucket, count) in self.buckets.iter().enumerate().filter(|(_, count)| **count > 0) {
            let (low, high) =
                if bucket == 0 { (0, 0) } else { (1u128 << (bucket - 1), (1u128 << bucket) - 1) };
            let label = if low == high { low.to_string() } else { format!("{low}-{high}") };
            buckets.insert(label, Value::from(*count));
        }
        Value::Object(buckets)
    }
}

const COLUMNS: &[Column] = &[
    column("distribution", 20),
    column("count", 10),
    column("min", 8),
    column("p50_at_most", 11),
    column("p99_at_most", 11),
    column("max", 10),
    column("mean", 10),
    column("buckets", 0),
];

pub fn run(store: &Store, format: Format, out: &mut dyn Write) -> Result<Outcome, ToolError> {
    let mut messages = Distribution::new("messages_per_stream");
    let mut stream_bytes = Distribution::new("bytes_per_stream");
    for_each_stream(store, |stream| {
        messages.add(stream.tail.messages);
        stream_bytes.add(stream.tail.bytes);
        Ok(())
    })?;
    let mut appends = Distribution::new("bytes_per_append");
    let per_log = if store.mode() == StorageMode::Acid { "records_per_segment" } else { "records_per_file" };
    let mut records = Distribution::new(per_log);
    for_each_log(store, |bytes, start| {
        let mut count = 0;
        for record in RecordScan::new(bytes, start) {
            count += 1;
            if record.header.kind == RecordKind::Append {
                appends.add(u64::from(record.header.data_len()));
            }
        }
        records.add(count);
    })?;
    let mut table = Table::start(out, format, COLUMNS)?;
    for distribution in [&messages, &stream_bytes, &appends, &records] {
        table.row(distribution.row())?;
    }
    table.finish()?;
    Ok(Outcome::Clean)
}

/// Calls `visit` with the bytes of every log (segment or stream file) and where its records
/// start.
fn for_each_log(store: &Store, mut visit: impl FnMut(Bytes, u64)) -> std::io::Result<()> {
    if store.mode() == StorageMode::Acid {
        for shard in 0..store.shard_count() {
            for segment in &store.shard(shard)?.analysis.segments {
                visit(segment.map.slice(0, segment.readable_len() as usize), Segment::records_start());
            }
        }
        return Ok(());
    }
    for (path, suffix) in store.stream_files()? {
        visit(store.stream_file(&path, suffix)?.bytes, 0);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_come_from_power_of_two_buckets() {
        let mut distribution = Distribution::new("d");
        for value in [0, 1, 3, 100, 1000] {
            distribution.add(value);
        }
        assert_eq!((distribution.min, distribution.max, distribution.count), (0, 1000, 5));
        assert_eq!(distribution.quantile(0.5), 3, "the median is in the 2-3 bucket");
        assert_eq!(distribution.quantile(1.0), 1000, "capped at the maximum");
        assert_eq!(distribution.histogram(), json!({"0": 1, "1": 1, "2-3": 1, "64-127": 1, "512-1023": 1}));
    }
}
