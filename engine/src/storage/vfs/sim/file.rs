//! One simulated file's data: what reads see, what is durable, the writes since the last
//! sync and which of them sit in the device's cache (written back, not yet flushed), and
//! what a crash leaves of it.

use std::sync::{Arc, Mutex};

use super::{FileRef, SimRng, SECTOR_BYTES};

#[derive(Clone, Default)]
pub(super) struct FileData {
    /// What reads see now.
    pub(super) current: Vec<u8>,
    /// What survives a crash for certain.
    pub(super) durable: Vec<u8>,
    /// Writes since the last sync, in order: (position, bytes).
    pub(super) unsynced: Vec<(usize, Vec<u8>)>,
    /// How many of the first `unsynced` writes were written back to the device's cache.
    pub(super) written_back: usize,
    /// The prefix of the file whose blocks were written and made durable: overwrites there
    /// need no metadata, so a device flush alone makes them durable.
    pub(super) allocated: usize,
    /// Length set since the last sync (truncation or extension).
    pub(super) unsynced_len: Option<usize>,
}

impl FileData {
    /// Makes every write and the length durable (`fdatasync`), extending the allocated
    /// prefix over the writes that continue it.
    pub(super) fn make_durable(&mut self) {
        let mut written: Vec<(usize, usize)> =
            self.unsynced.iter().map(|(position, bytes)| (*position, position + bytes.len())).collect();
        written.sort_unstable();
        for (start, end) in written {
            if start <= self.allocated {
                self.allocated = self.allocated.max(end);
            }
        }
        self.durable = self.current.clone();
        self.allocated = self.allocated.min(self.durable.len());
        self.unsynced.clear();
        self.written_back = 0;
        self.unsynced_len = None;
    }

    /// Marks the unsynced writes from the first not yet written back, as long as they lie
    /// inside `start..end` (rounded out to pages), as written back.
    pub(super) fn write_back(&mut self, start: usize, end: usize) {
        const PAGE_BYTES: usize = 4096;
        let (start, end) = (start / PAGE_BYTES * PAGE_BYTES, end.div_ceil(PAGE_BYTES) * PAGE_BYTES);
        while let Some((position, bytes)) = self.unsynced.get(self.written_back) {
            if *position < start || position + bytes.len() > end {
                break;
            }
            self.written_back += 1;
        }
    }

    /// The device flush, for this file: the written-back writes inside the allocated prefix,
    /// in order, become durable.
    pub(super) fn flush_written_back(&mut self) {
        let covered = self.unsynced[..self.written_back]
            .iter()
            .take_while(|(position, bytes)| position + bytes.len() <= self.allocated)
            .count();
        for (position, bytes) in self.unsynced.drain(..covered) {
            write_into(&mut self.durable, position, &bytes);
        }
        self.written_back -= covered;
    }
}

/// A file's contents after a crash.
pub(super) fn survive(file: &FileRef, rng: &mut SimRng) -> FileRef {
    let data = file.lock().expect("sim file lock");
    let mut content = data.durable.clone();
    if let Some(len) = data.unsynced_len {
        if rng.chance(50) {
            content.resize(len, 0);
        }
    }
    for (position, bytes) in &data.unsynced {
        match rng.below(3) {
            0 => {}
            1 => write_into(&mut content, *position, bytes),
            _ => {
                // Sectors of the file (not of the write) are what a disk keeps whole or not.
                let end = position + bytes.len();
                let mut sector = position / SECTOR_BYTES * SECTOR_BYTES;
                while sector < end {
                    let (from, to) = (sector.max(*position), (sector + SECTOR_BYTES).min(end));
                    if rng.chance(50) {
                        write_into(&mut content, from, &bytes[from - position..to - position]);
                    }
                    sector += SECTOR_BYTES;
                }
            }
        }
    }
    let allocated = data.allocated.min(content.len());
    Arc::new(Mutex::new(FileData {
        current: content.clone(),
        durable: content,
        allocated,
        ..FileData::default()
    }))
}

pub(super) fn write_into(content: &mut Vec<u8>, position: usize, bytes: &[u8]) {
    if content.len() < position + bytes.len() {
        content.resize(position + bytes.len(), 0);
    }
    content[position..position + bytes.len()].copy_from_slice(bytes);
}
