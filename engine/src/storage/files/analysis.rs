//! Reading one stream file back: its stream, what is damaged in it, and where it ends.
//!
//! A file must open with its stream's create record; every later record must continue the
//! stream (`storage::replay`). A record that fails its checks is a torn write when it could
//! be one (a sector of it reads as zeros, or it runs past the end of the file) — in
//! file-durable only when the records after it are all of one batch, as a crash leaves
//! them (each batch is synced before the next is written, and its records carry one time;
//! `later_batches_follow`): the file ends there, and recovery cuts it. Zeros where a record
//! should start end the file by the same rule. Anything else that fails is damage to data
//! that was written whole: it is stepped over (by the record's own length when its header
//! holds, else to the next record that passes its checks and continues the chain), the
//! stream is marked damaged where its intact data ends, and the records after it are kept.
//! file-fast syncs nothing, so after a crash any of its unsynced pages may be missing with
//! later ones there: it cuts at the first record that could be torn.
//! After a clean stop the file's saved length (`clean_ends`) says more: nothing before it
//! can be torn, and a file that ends short of it lost its end to damage.

use bytes::Bytes;

use super::clean_ends::{create_check, CleanEnd};
use super::{location, record_number};
use crate::ids::ChainIndex;
use crate::meta::StreamSnapshot;
use crate::storage::record::codec::{flags, Header, Kind, HEADER_BYTES};
use crate::storage::record::scan::{
    could_be_torn, failed_record_len, later_batches_follow, next_header, RecordScan, ScanEnd, Scanned,
};
use crate::storage::replay;

/// What a stream file holds, read without changing it.
pub struct FileAnalysis {
    /// The stream, if the file opens with a readable create record (marked damaged if
    /// damage was stepped over).
    pub snapshot: Option<StreamSnapshot>,
    pub records: u64,
    /// Where the last record read (good, or damaged and stepped over) ends.
    pub valid_end: u64,
    /// Damage stepped over: where, and why.
    pub damage: Vec<(u64, String)>,
    /// Why reading stopped before the end of the file (a torn write, or nothing readable
    /// to the end), if it did: what follows `valid_end` is cut.
    pub failure: Option<String>,
    /// The file's saved end at a clean stop found it short, or its delete record gone: the
    /// stream is damaged or deleted by what was saved, not by what the file holds.
    pub held_by_clean_end: bool,
    /// No create record, and what is there could be one a crash cut short.
    pub unfinished_create: bool,
}

/// Reads and checks the records of a stream file's `bytes` (its collision suffix `suffix`);
/// `durable`: the file was written by file-durable (each batch synced before the next);
/// `clean`: where it ended at a clean stop, if that was saved (and only if the file still
/// holds the incarnation of the stream saved then).
pub(crate) fn analyze_file(
    bytes: &Bytes,
    suffix: u8,
    durable: bool,
    clean: Option<&CleanEnd>,
) -> FileAnalysis {
    // A save no start has read yet names the incarnation the file still holds; after a
    // start, a create since (then cut short by a crash) may have taken the name's file.
    let saved_by_the_last_stop = clean.is_some_and(|clean| clean.fresh);
    let clean = clean.filter(|clean| create_check(bytes) == Some(clean.create_check));
    let mut scan = RecordScan::new(bytes.clone(), 0);
    let created =
        scan.next().filter(|first| first.header.lsn == record_number(ChainIndex::CREATE)).and_then(|first| {
            let snapshot = replay::created(&first.header, &first.meta, location(suffix, 0)).ok()?;
            Some((snapshot, first.header.record_len() as u64))
        });
    let Some((snapshot, valid_end)) = created else {
        // Nothing, or a create record a sector of which was never written: the create a
        // crash cut short, which was never acknowledged (a file the last clean stop saw
        // whole is damaged, whatever it holds now).
        let unfinished = !saved_by_the_last_stop
            && (bytes.is_empty() || could_be_torn(bytes, 0, failed_record_len(bytes, 0)));
        let failure = match unfinished {
            true => "an unfinished create record (a create a crash cut short, never acknowledged)",
            false => "no readable create record",
        };
        return FileAnalysis {
            snapshot: None,
            records: 0,
            valid_end: 0,
            damage: Vec::new(),
            failure: Some(failure.into()),
            held_by_clean_end: false,
            unfinished_create: unfinished,
        };
    };
    let mut reading =
        Reading { bytes, suffix, durable, clean, snapshot, records: 1, valid_end, damage: Vec::new() };
    let failure = reading.run();
    let held_by_clean_end = reading.hold_to_clean_end();
    FileAnalysis {
        snapshot: Some(reading.snapshot),
        records: reading.records,
        valid_end: reading.valid_end,
        damage: reading.damage,
        failure,
        held_by_clean_end,
        unfinished_create: false,
    }
}

/// A file being read after its create record.
struct Reading<'a> {
    bytes: &'a Bytes,
    suffix: u8,
    durable: bool,
    /// Where the file ended at the last clean stop: nothing before it can be torn.
    clean: Option<&'a CleanEnd>,
    snapshot: StreamSnapshot,
    records: u64,
    valid_end: u64,
    damage: Vec<(u64, String)>,
}

impl Reading<'_> {
    /// Reads to the end of the file; why it stopped short, if it did.
    fn run(&mut self) -> Option<String> {
        loop {
            let mut scan = RecordScan::new(self.bytes.clone(), self.valid_end);
            for record in scan.by_ref() {
                self.apply(&record);
            }
            let failed = scan.position() as usize;
            let error = match scan.end() {
                Some(ScanEnd::Damaged(error)) => {
                    if could_be_torn(self.bytes, failed, failed_record_len(self.bytes, failed))
                        && !self.written_after(failed)
                    {
                        return Some(error.to_string());
                    }
                    error.to_string()
                }
                Some(ScanEnd::Sealed) => return Some("a seal record in a stream file".into()),
                Some(ScanEnd::Unwritten) if self.valid_end < self.bytes.len() as u64 => {
                    if !self.written_after(failed) {
                        return Some("unwritten (zeroed) bytes".into());
                    }
                    "zeros where a record was written (records follow)".to_string()
                }
                _ => return None,
            };
            if !self.step_over(failed, format!("record {}: {error}", self.snapshot.chain_n.next())) {
                return Some(format!("{error}, and nothing readable after it"));
            }
        }
    }

    /// Whether the file was written whole past `failed`, so that what fails there is damage,
    /// not a torn end: it ended beyond it at the last clean stop, or (file-durable) records
    /// of two batches follow it (so it was synced).
    fn written_after(&self, failed: usize) -> bool {
        if self.clean.is_some_and(|clean| (failed as u64) < clean.len) {
            return true;
        }
        let next = record_number(self.snapshot.chain_n.next()).raw();
        self.durable && later_batches_follow(self.bytes, failed.saturating_add(1), next, u64::MAX)
    }

    /// After a clean stop: a file read to an end short of its saved length lost the rest to
    /// damage (the stream is marked damaged where its intact data ends), and a stream that
    /// was soft-deleted stays deleted though its delete record is gone. True when either
    /// applied (never without a saved end).
    fn hold_to_clean_end(&mut self) -> bool {
        let Some(clean) = self.clean else { return false };
        let short = self.valid_end < clean.len;
        let undeleted = clean.deleted && !self.snapshot.deleted;
        if short {
            let reason = format!(
                "the file ends at byte {}, short of byte {} where it ended at the last clean stop",
                self.valid_end, clean.len
            );
            if self.snapshot.damage.is_none() {
                self.damage.push((self.valid_end, reason.clone()));
            }
            let tail = self.snapshot.tail;
            replay::mark_damaged(&mut self.snapshot, tail, reason);
        }
        if undeleted {
            self.damage.push((self.valid_end, "its delete record is gone: the stream stays deleted".into()));
            self.snapshot.deleted = true;
        }
        short || undeleted
    }

    /// Applies a record that passed its checks.
    fn apply(&mut self, record: &Scanned) {
        let at = location(self.suffix, record.position);
        let snapshot = &mut self.snapshot;
        if record.header.kind == Kind::Delete {
            // A soft delete, numbered as the next record but outside the chain, ends a file.
            let soft = record.header.has(flags::SOFT) && record.header.stream == snapshot.id;
            match soft && record.header.lsn == record_number(snapshot.chain_n.next()) && !snapshot.deleted {
                true => snapshot.deleted = true,
                false => self.damage.push((record.position, "a delete record out of place".into())),
            }
            self.valid_end = record.position + record.header.record_len() as u64;
            self.records += 1;
            return;
        }
        if snapshot.deleted {
            self.damage.push((record.position, "a record after its stream's soft delete".into()));
        }
        if snapshot.damage.is_none() {
            let expected = record_number(snapshot.chain_n.next());
            let applied = match record.header.lsn == expected {
                true => replay::append(snapshot, &record.header, &record.meta, at),
                false => Err(format!("out of sequence: record {expected} was expected")),
            };
            if let Err(reason) = applied {
                let reason = format!("record {}: {reason}", record.header.lsn);
                replay::mark_damaged(snapshot, snapshot.tail, reason);
            }
        }
        if snapshot.chain_tail != at {
            if let Err(reason) = replay::append_after_damage(snapshot, &record.header, &record.meta, at) {
                self.damage.push((record.position, format!("record {}: {reason}", record.header.lsn)));
            }
        }
        self.valid_end = record.position + record.header.record_len() as u64;
        self.records += 1;
    }

    /// Steps over damage at `failed`; false when nothing readable follows.
    fn step_over(&mut self, failed: usize, reason: String) -> bool {
        self.damage.push((failed as u64, reason.clone()));
        let snapshot = &mut self.snapshot;
        replay::mark_damaged(snapshot, snapshot.tail, reason);
        let raw = self.bytes.get(failed..failed + HEADER_BYTES);
        let header = raw.and_then(|raw| Header::decode(raw.try_into().ok()?).ok());
        // A record cut off by the end of the file has nothing after it to step to.
        if let Some(header) = header.filter(|header| failed + header.record_len() <= self.bytes.len()) {
            if header.kind == Kind::Append && header.stream == snapshot.id {
                replay::skip_damaged(snapshot, &header, location(self.suffix, failed as u64));
            }
            self.valid_end = (failed + header.record_len()) as u64;
            return true;
        }
        let mut from = failed + 1;
        while let Some((next, header)) = next_header(self.bytes, from) {
            if header.stream == snapshot.id && header.lsn > record_number(snapshot.chain_n) {
                self.valid_end = next as u64;
                return true;
            }
            from = next + 1;
        }
        false
    }
}
