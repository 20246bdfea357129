//! `ds-tool verify DIR`: checks every record's checksums and sequence number in every log,
//! every checkpoint file and the manifest's two copies, and says what recovery would drop. Exit code 0 when all is clean,
//! 1 when anything is damaged.
//!
//! acid: what recovery finds (segments that are missing, cut short or not this shard's,
//! damage it would step over, streams it would mark damaged), plus every record a
//! checkpoint covers (recovery does not replay those), and whether each stream's last
//! record is where the checkpoint says. File modes: every stream file is read as recovery
//! reads it. Every mode: each fork's reference points at its source's incarnation, and its
//! fork point at bytes the source holds.

use std::io::Write;

use std::collections::HashMap;

use ds_engine::inspect::{next_header, RecordScan, ScanEnd, Segment, ShardLog, Store, StreamSnapshot};
use ds_engine::StorageMode;
use serde_json::{json, Value};

use super::for_each_stream;
use super::records::relative;
use crate::output::Format;
use crate::{Outcome, ToolError};

/// One thing found wrong: in a log at a byte position, or in a file or stream as a whole.
struct Problem {
    log: String,
    position: Option<u64>,
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
    for (file, state) in store.manifest_problems() {
        findings.problems.push(Problem { log: file.to_string(), position: None, what: state.clone() });
    }
    if store.mode() == StorageMode::Acid {
        for shard in 0..store.shard_count() {
            verify_shard(store, &store.shard(shard)?, &mut findings);
        }
    } else {
        verify_files(store, &mut findings)?;
    }
    verify_fork_references(store, &mut findings)?;
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
                position: None,
                what: format!("unreadable checkpoint: {why}"),
            });
        }
    }
    let analysis = &log.analysis;
    findings.logs += analysis.segments.len() as u64;
    findings.records += analysis.records_replayed();
    for damage in analysis.damage(&log.dir) {
        let what = damage.reason.clone();
        findings.problems.push(Problem {
            log: relative(store, &damage.file),
            position: Some(damage.position),
            what,
        });
    }
    scan_checkpointed(store, log, findings);
    for stream in analysis.streams() {
        if let Some(damage) = &stream.damage {
            let what =
                format!("stream {} is damaged at offset {}: {}", stream.name, damage.at, damage.reason);
            findings.problems.push(Problem { log: format!("shard-{:03}", log.shard), position: None, what });
        } else if !log.holds_last_record_of(stream) {
            let what = format!(
                "stream {}: the checkpoint names its last record at {:#x}, which is not there",
                stream.name, stream.chain_tail
            );
            findings.problems.push(Problem { log: format!("shard-{:03}", log.shard), position: None, what });
        }
    }
    if let Some(torn) = analysis.torn() {
        findings.would_drop.push(format!(
            "shard {}: the torn write at {} {} ({}) and what follows it",
            log.shard,
            relative(store, &torn.file),
            torn.position,
            torn.reason
        ));
    } else if analysis.stale_bytes > 0 {
        findings.would_drop.push(format!(
            "shard {}: {} bytes of an unfinished write after the last whole record",
            log.shard, analysis.stale_bytes
        ));
    }
}

/// Checks the records a checkpoint covers (recovery does not replay them), stepping over
/// damage to the next record that passes its checks.
fn scan_checkpointed(store: &Store, log: &ShardLog, findings: &mut Findings) {
    let Some(checkpoint) = log.analysis.checkpoint else {
        return;
    };
    for segment in log.analysis.segments.iter().filter(|s| s.ordinal() <= checkpoint.resume_ordinal) {
        let end = match segment.ordinal() == checkpoint.resume_ordinal {
            true => checkpoint.resume_position.min(segment.readable_len()),
            false => segment.readable_len(),
        };
        let bytes = segment.map.slice(0, end as usize);
        let mut position = Segment::records_start();
        loop {
            let mut scan = RecordScan::new(bytes.clone(), position);
            findings.records += scan.by_ref().count() as u64;
            let Some(ScanEnd::Damaged(error)) = scan.end() else { break };
            let what = format!("bad record: {error} (before the checkpoint: reads of it fail)");
            findings.problems.push(Problem {
                log: relative(store, &segment.path),
                position: Some(scan.position()),
                what,
            });
            match next_header(&bytes, scan.position() as usize + 1) {
                Some((next, _)) => position = next as u64,
                None => break,
            }
        }
    }
}

fn verify_files(store: &Store, findings: &mut Findings) -> std::io::Result<()> {
    for (path, suffix) in store.stream_files()? {
        let file = store.stream_file(&path, suffix)?;
        findings.logs += 1;
        findings.records += file.analysis.records;
        let name = relative(store, &path);
        for (position, what) in &file.analysis.damage {
            findings.problems.push(Problem {
                log: name.clone(),
                position: Some(*position),
                what: what.clone(),
            });
        }
        if let Some(damage) = file.analysis.snapshot.as_ref().and_then(|s| s.damage.as_ref()) {
            let what = format!("stream damaged at offset {}: {}", damage.at, damage.reason);
            findings.problems.push(Problem { log: name.clone(), position: None, what });
        }
        let Some(why) = &file.analysis.failure else { continue };
        let position = file.analysis.valid_end;
        findings.problems.push(Problem { log: name.clone(), position: Some(position), what: why.clone() });
        findings.would_drop.push(match &file.analysis.snapshot {
            Some(_) => format!("{name}: the {} bytes after {position}", file.bytes.len() as u64 - position),
            None => format!("{name}: the whole file (moved to dropped/)"),
        });
    }
    for (path, stream) in store.lost_stream_files() {
        let what = format!("stream {stream:?}: its file, there at the last clean stop, is lost");
        findings.problems.push(Problem { log: relative(store, &path), position: None, what });
    }
    Ok(())
}

/// Checks that every fork's source is there (the incarnation its reference names) and holds
/// the bytes the fork inherits.
fn verify_fork_references(store: &Store, findings: &mut Findings) -> std::io::Result<()> {
    let mut streams: HashMap<Box<str>, StreamSnapshot> = HashMap::new();
    for_each_stream(store, |stream| {
        streams.insert(stream.name.as_ref().into(), stream.clone());
        Ok(())
    })?;
    for fork in streams.values() {
        let Some(reference) = &fork.fork else { continue };
        let source = streams.get(&reference.origin.source).filter(|s| s.id == reference.source_id);
        let what = match source {
            None => format!("fork {}: its source {} is not here", fork.name, reference.origin.source),
            Some(source)
                if reference.start() > source.tail || reference.start().bytes > source.tail.bytes =>
            {
                format!(
                    "fork {}: it inherits up to {}, past its source's tail {}",
                    fork.name,
                    reference.start(),
                    source.tail
                )
            }
            Some(_) => continue,
        };
        findings.problems.push(Problem { log: "forks".into(), position: None, what });
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
        match problem.position {
            Some(position) => writeln!(out, "{} at {position}: {}", problem.log, problem.what)?,
            None => writeln!(out, "{}: {}", problem.log, problem.what)?,
        }
    }
    for drop in &findings.would_drop {
        writeln!(out, "recovery would drop: {drop}")?;
    }
    let verdict = if clean { "clean" } else { "DAMAGED" };
    writeln!(
        out,
        "{verdict}: {} checked in {}, {}",
        counted(findings.records, "record"),
        counted(findings.logs, "log"),
        counted(findings.problems.len() as u64, "problem")
    )
}

/// `count` and `noun`, plural when it is not one (`1 problem`, `2 problems`).
fn counted(count: u64, noun: &str) -> String {
    match count {
        1 => format!("1 {noun}"),
        _ => format!("{count} {noun}s"),
    }
}
