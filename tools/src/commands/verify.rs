//! `ds-tool verify DIR`: checks every record's checksums and sequence number in every log,
//! every checkpoint file, and says what recovery would drop. Exit code 0 when all is clean,
//! 1 when anything is damaged.
//!
//! acid: each segment is read from its start (not only after the checkpoint, as recovery
//! does), so damage in data a checkpoint already covers is found too; sequence numbers must
//! run on across segments. File modes: every stream file is read as recovery reads it.

use std::io::Write;

use ds_engine::inspect::{ShardLog, Store};
use ds_engine::record::scan::{RecordScan, ScanEnd};
use ds_engine::wal::segment::Segment;
use ds_engine::StorageMode;
use serde_json::{json, Value};

use super::records::relative;
use crate::output::Format;
use crate::{Outcome, ToolError};

/// One thing found wrong.
struct Problem {
    log: String,
    position: u64,
    what: String,
}

#[derive(Default)]
struct Findings {
    problems: Vec<Problem>,
    /// What recovery would drop, in words.
    would_drop: Vec<String>,
    logs: u64,
    records: u64,
}

pub fn run(store: &Store, format: Format, out: &mut dyn Write) -> Result<Outcome, ToolError> {
    let mut findings = Findings::default();
    if store.mode() == StorageMode::Acid {
        for shard in 0..store.shard_count() {
            verify_shard(store, &store.shard(shard)?, &mut findings);
        }
    } else {
        verify_files(store, &mut findings)?;
    }
    report(&findings, format, out)?;
    Ok(if findings.problems.is_empty() && findings.would_drop.is_empty() {
        Outcome::Clean
    } else {
        Outcome::Damaged
    })
}

fn verify_shard(store: &Store, log: &ShardLog, findings: &mut Findings) {
    for (path, readable) in &log.checkpoints {
        if let Err(why) = readable {
            findings.problems.push(Problem {
                log: relative(store, path),
                position: 0,
                what: format!("unreadable checkpoint: {why}"),
            });
        }
    }
    let segments = &log.analysis.segments;
    let mut expected_lsn = segments.first().map_or(0, |s| s.header.first_lsn);
    for (index, segment) in segments.iter().enumerate() {
        let name = relative(store, &segment.path);
        findings.logs += 1;
        if segment.header.first_lsn != expected_lsn {
            let what = format!(
                "segment starts at sequence {}, {expected_lsn} was expected",
                segment.header.first_lsn
            );
            findings.problems.push(Problem { log: name.clone(), position: 0, what });
            expected_lsn = segment.header.first_lsn;
        }
        if segment.readable_len() < segment.size() {
            let what = format!("truncated: {} bytes of {}", segment.readable_len(), segment.size());
            findings.problems.push(Problem { log: name.clone(), position: segment.readable_len(), what });
        }
        let bytes = segment.map.slice(0, segment.readable_len() as usize);
        let mut scan = RecordScan::new(bytes, Segment::records_start());
        let mut out_of_sequence = None;
        for record in scan.by_ref() {
            if record.header.lsn != expected_lsn {
                out_of_sequence = Some((record.position, record.header.lsn));
                break;
            }
            expected_lsn += 1;
            findings.records += 1;
        }
        let last = index + 1 == segments.len();
        let stop = match (out_of_sequence, scan.end()) {
            (Some((position, lsn)), _) => {
                Some((position, format!("sequence {lsn} where {expected_lsn} was expected")))
            }
            (None, Some(ScanEnd::Damaged(error))) => Some((scan.position(), format!("bad record: {error}"))),
            (None, Some(ScanEnd::Unwritten)) if !last => {
                Some((scan.position(), "unsealed segment followed by another".to_string()))
            }
            _ => None,
        };
        if let Some((position, mut what)) = stop {
            let resume = log.analysis.checkpoint.map(|c| (c.resume_ordinal, c.resume_position));
            if resume.is_some_and(|resume| (segment.ordinal(), position) < resume) {
                what.push_str(" (before the checkpoint: recovery keeps the streams' state, but reading this record fails)");
            }
            findings.problems.push(Problem { log: name, position, what });
        }
    }
    if let Some(damage) = log.analysis.damage() {
        let later = segments.iter().filter(|s| s.path > damage.file).count();
        findings.would_drop.push(format!(
            "shard {}: everything after {} at {} ({}), and {later} later segments",
            log.shard,
            relative(store, &damage.file),
            damage.position,
            damage.reason
        ));
    } else if log.analysis.stale_bytes > 0 {
        findings.would_drop.push(format!(
            "shard {}: {} bytes of an unfinished write after the last whole record",
            log.shard, log.analysis.stale_bytes
        ));
    }
}

fn verify_files(store: &Store, findings: &mut Findings) -> std::io::Result<()> {
    for (path, suffix) in store.stream_files()? {
        let file = store.stream_file(&path, suffix)?;
        findings.logs += 1;
        findings.records += file.analysis.records;
        let Some(why) = &file.analysis.failure else { continue };
        let name = relative(store, &path);
        let position = file.analysis.valid_end;
        findings.problems.push(Problem { log: name.clone(), position, what: why.clone() });
        findings.would_drop.push(match &file.analysis.snapshot {
            Some(_) => format!("{name}: the {} bytes after {position}", file.bytes.len() as u64 - position),
            None => format!("{name}: the whole file (moved to dropped/)"),
        });
    }
    Ok(())
}

fn report(findings: &Findings, format: Format, out: &mut dyn Write) -> std::io::Result<()> {
    let clean = findings.problems.is_empty() && findings.would_drop.is_empty();
    if format == Format::Json {
        let problems: Vec<Value> = findings
            .problems
            .iter()
            .map(|p| json!({"log": p.log, "position": p.position, "problem": p.what}))
            .collect();
        let summary = json!({
            "clean": clean,
            "logs": findings.logs,
            "records": findings.records,
            "problems": problems,
            "recovery_would_drop": findings.would_drop,
        });
        serde_json::to_writer_pretty(&mut *out, &summary)?;
        return writeln!(out);
    }
    for problem in &findings.problems {
        writeln!(out, "{} at {}: {}", problem.log, problem.position, problem.what)?;
    }
    for drop in &findings.would_drop {
        writeln!(out, "recovery would drop: {drop}")?;
    }
    let verdict = if clean { "clean" } else { "DAMAGED" };
    writeln!(
        out,
        "{verdict}: {} records checked in {} logs, {} problems",
        findings.records,
        findings.logs,
        findings.problems.len()
    )
}
