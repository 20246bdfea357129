//! One WAL segment: a fixed-size, preallocated file of records, mapped read-only.
//!
//! ```text
//! 0   magic "DSG1" u32       16  first LSN u64
//! 4   version u32 (1)        24  size in bytes u64
//! 8   shard u32              32  created (ms since the Unix epoch) u64
//! 12  ordinal u32            40  reserved (zeros) .. 60, then header crc32 of bytes 0..60
//! 64  records, each aligned to 8 bytes, until a seal record or unwritten (zeroed) space
//! ```
//!
//! A segment is prepared ahead of time under a temporary name: given its full size, and
//! zero-filled and synced over its first step, then activated: its header is written and
//! synced, and it is renamed to its first LSN (`{lsn:016x}.wal`) with the directory synced.
//! The writer zero-fills the rest a step at a time ahead of its records ([`zero_fill`],
//! which sends a smaller chunk at a time to the device, then syncs once), so a write never
//! lands in a block not yet written and each fdatasync stays cheap, while an idle shard
//! holds a few steps of zeros, not a segment. A segment is never re-created or truncated
//! afterwards. Records are located by `ordinal << 32 | position`.
//!
//! Only the active (last) segment keeps its file open, for writing; a sealed one is read
//! through its map alone ([`Segment::sealed`]), so a log of thousands of segments holds a
//! handful of file descriptors.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use crate::ids::Lsn;
use crate::storage::vfs::{read_exact_at, FileMap, Vfs, VfsFile};

/// Most bytes [`Segment::written_from`] copies out of a segment (more are read through its
/// map).
const WRITTEN_READ_BYTES_MAX: u64 = 16 << 20;

pub(crate) const SEGMENT_HEADER_BYTES: u64 = 64;
const _: () = assert!(
    SEGMENT_HEADER_BYTES.is_multiple_of(crate::storage::record::codec::RECORD_ALIGN as u64),
    "records after a segment header start aligned"
);
const MAGIC: u32 = u32::from_le_bytes(*b"DSG1");
const VERSION: u32 = 1;
/// Extension of active and sealed segments.
pub(crate) const SEGMENT_EXTENSION: &str = "wal";
/// Prefix of prepared, not yet active segment files.
const PREPARED_PREFIX: &str = "prepared-";
/// Most a writer zero-fills ahead of its records in one step.
const ZERO_STEP_BYTES_MAX: u64 = 1 << 20;
/// Zero-filling writes, then sends to the device and waits for, this much at a time: each
/// chunk's write-back sits in the device queue ahead of the shards' commits, so a smaller
/// chunk shortens the longest wait. 256 KiB shortens the shards' tail latency against 1 MiB
/// chunks without lowering the append rate. Smaller chunks shorten it no further and make
/// the rarest waits longer, because they take more trips to the device
/// (docs/performance/code-choices.md).
const ZERO_CHUNK_BYTES: u64 = 256 << 10;
const _: () = assert!(ZERO_STEP_BYTES_MAX.is_multiple_of(ZERO_CHUNK_BYTES), "a step is whole chunks");
/// Zero-filling writes one page at a time.
const PAGE_BYTES: u64 = 4096;

/// What a segment header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    pub shard: u32,
    pub ordinal: u32,
    pub first_lsn: Lsn,
    pub size: u64,
    pub created_ms: u64,
}

impl SegmentHeader {
    pub(crate) fn encode(&self) -> [u8; SEGMENT_HEADER_BYTES as usize] {
        let mut raw = [0u8; SEGMENT_HEADER_BYTES as usize];
        raw[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        raw[4..8].copy_from_slice(&VERSION.to_le_bytes());
        raw[8..12].copy_from_slice(&self.shard.to_le_bytes());
        raw[12..16].copy_from_slice(&self.ordinal.to_le_bytes());
        raw[16..24].copy_from_slice(&self.first_lsn.raw().to_le_bytes());
        raw[24..32].copy_from_slice(&self.size.to_le_bytes());
        raw[32..40].copy_from_slice(&self.created_ms.to_le_bytes());
        let crc = crc32fast::hash(&raw[..60]);
        raw[60..64].copy_from_slice(&crc.to_le_bytes());
        raw
    }

    pub(crate) fn decode(raw: &[u8; SEGMENT_HEADER_BYTES as usize]) -> io::Result<SegmentHeader> {
        let u32_at = |at: usize| u32::from_le_bytes(raw[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_le_bytes(raw[at..at + 8].try_into().expect("8 bytes"));
        if u32_at(0) != MAGIC || u32_at(4) != VERSION {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not a ds WAL segment (bad magic or version)",
            ));
        }
        if crc32fast::hash(&raw[..60]) != u32_at(60) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "segment header checksum mismatch"));
        }
        Ok(SegmentHeader {
            shard: u32_at(8),
            ordinal: u32_at(12),
            first_lsn: Lsn::from_raw(u64_at(16)),
            size: u64_at(24),
            created_ms: u64_at(32),
        })
    }
}

/// An active or sealed segment.
pub struct Segment {
    pub header: SegmentHeader,
    pub path: PathBuf,
    /// The open file: kept by the active (last) segment only.
    file: Option<Arc<dyn VfsFile>>,
    pub map: Arc<dyn FileMap>,
}

impl Segment {
    /// Opens an existing segment and checks its header. A file shorter than its header says
    /// (truncated) is mapped as far as it goes; recovery treats the rest as lost.
    pub fn open(vfs: &dyn Vfs, path: &Path) -> io::Result<Segment> {
        let file = vfs.open(path)?;
        let mut raw = [0u8; SEGMENT_HEADER_BYTES as usize];
        read_exact_at(file.as_ref(), 0, &mut raw)?;
        let header = SegmentHeader::decode(&raw)?;
        let map = file.map(file.size()?.min(header.size))?;
        Ok(Segment { header, path: path.to_path_buf(), file: Some(file), map })
    }

    /// Opens a segment whose header is damaged as the header `header_of` its size says it
    /// is (inferred by `salvage`): its records are read by their own checks. `None` when the
    /// file holds no more than a header.
    pub fn open_salvaged(
        vfs: &dyn Vfs,
        path: &Path,
        header_of: impl FnOnce(u64) -> SegmentHeader,
    ) -> io::Result<Option<Segment>> {
        let file = vfs.open(path)?;
        let size = file.size()?;
        if size <= Segment::records_start() {
            return Ok(None);
        }
        let header = header_of(size);
        let map = file.map(size.min(header.size))?;
        Ok(Some(Segment { header, path: path.to_path_buf(), file: Some(file), map }))
    }

    /// The same segment read through its map alone, its file closed (a sealed one).
    pub fn sealed(&self) -> Segment {
        Segment { header: self.header, path: self.path.clone(), file: None, map: Arc::clone(&self.map) }
    }

    /// The open file of the active segment.
    pub fn file(&self) -> &Arc<dyn VfsFile> {
        self.file.as_ref().expect("only the active segment is written, and it keeps its file")
    }

    /// The segment's bytes from `from` to the end of what was written there (its file's
    /// `written_end`: records lie before it), read through the file, so that recovery's look
    /// past the end of the log brings no page of the map into memory; from the map when the
    /// segment has no file, the read fails, or there is more than [`WRITTEN_READ_BYTES_MAX`]
    /// (a copy that large would cost more than the map's reclaimable pages).
    pub fn written_from(&self, from: u64) -> Bytes {
        let readable = self.readable_len();
        let from = from.min(readable);
        let Some(file) = &self.file else {
            return self.map.slice(from as usize, readable as usize);
        };
        let end = file.written_end(from).unwrap_or(readable).clamp(from, readable);
        if end - from > WRITTEN_READ_BYTES_MAX {
            return self.map.slice(from as usize, end as usize);
        }
        let mut buffer = vec![0; (end - from) as usize];
        match file.read_at(from, &mut buffer) {
            Ok(read) => {
                buffer.truncate(read);
                Bytes::from(buffer)
            }
            Err(_) => self.map.slice(from as usize, end as usize),
        }
    }

    /// Bytes of the segment that are there to read (less than its size if truncated).
    pub fn readable_len(&self) -> u64 {
        self.map.size() as u64
    }

    /// Whether the segment still reads as written: its header as it was made, and no page
    /// of its map replaced after a fault (the file cut short or overwritten under the
    /// process). A segment that is not takes no more records.
    pub fn intact(&self) -> bool {
        let mut raw = [0u8; SEGMENT_HEADER_BYTES as usize];
        if self.map.size() < raw.len() {
            return false;
        }
        self.map.read(0, &mut raw);
        raw == self.header.encode() && !self.map.faulted()
    }

    /// Whether the segment's file was deleted under the process (its open file has no name
    /// left): what is written to it now is gone at the next start. Only the active segment
    /// keeps its file open; an error asking counts as still there.
    pub fn deleted(&self) -> bool {
        self.file.as_ref().is_some_and(|file| matches!(file.linked(), Ok(false)))
    }

    /// Where records start.
    pub fn records_start() -> u64 {
        SEGMENT_HEADER_BYTES
    }

    pub fn ordinal(&self) -> u32 {
        self.header.ordinal
    }

    pub fn size(&self) -> u64 {
        self.header.size
    }
}

/// The file name of an active segment whose first record has `first_lsn`.
pub(crate) fn segment_name(first_lsn: Lsn) -> String {
    format!("{first_lsn:016x}.{SEGMENT_EXTENSION}")
}

/// The first LSN a segment file name stands for, if it is one.
pub(crate) fn parse_segment_name(name: &str) -> Option<Lsn> {
    let stem = name.strip_suffix(&format!(".{SEGMENT_EXTENSION}"))?;
    (stem.len() == 16).then(|| u64::from_str_radix(stem, 16).ok()).flatten().map(Lsn::from_raw)
}

/// Whether `name` is a prepared (never activated) segment, left over from a previous run.
pub(crate) fn is_prepared_name(name: &str) -> bool {
    name.starts_with(PREPARED_PREFIX)
}

/// How far ahead of its records a writer zero-fills a segment of `segment_bytes` at a time
/// (and how much of a shard's first segment is zero-filled before any record).
pub(crate) fn zero_step_bytes(segment_bytes: u64) -> u64 {
    (segment_bytes / 32).clamp(4096, ZERO_STEP_BYTES_MAX)
}

/// How much of a new segment of `segment_bytes` is zero-filled before it is used: its
/// header and the first step.
pub(crate) fn first_zeroed_bytes(segment_bytes: u64) -> u64 {
    zero_step_bytes(segment_bytes).min(segment_bytes)
}

/// Creates a segment file of `size` bytes, zero-filled and synced over its first step
/// ([`first_zeroed_bytes`]), ready to activate.
pub(crate) fn prepare(vfs: &dyn Vfs, dir: &Path, ordinal: u32, size: u64) -> io::Result<PathBuf> {
    let zeroed_bytes = first_zeroed_bytes(size);
    assert!(zeroed_bytes >= SEGMENT_HEADER_BYTES, "the header lands in written blocks");
    let path = dir.join(format!("{PREPARED_PREFIX}{ordinal:08x}.tmp"));
    if vfs.exists(&path) {
        vfs.remove_file(&path)?;
    }
    let file = vfs.create_new(&path)?;
    let filled = file.set_len(size).and_then(|()| zero_fill(file.as_ref(), 0, zeroed_bytes));
    if filled.is_err() {
        // A partial file (the disk filled up, say) gives its space back.
        drop(file);
        let _ = vfs.remove_file(&path);
    }
    filled.map(|()| path)
}

/// Writes zeros over `from..to` of `file`, sending a chunk at a time to the device and
/// waiting for it (a shard's commit never waits behind more than one chunk of zeros in the
/// device queue), then syncs once: once it returns, writes there need no new block
/// (`VfsFile::written_end`). One sync for the whole range, not one per chunk: each sync
/// also writes the file's block allocation (the blocks the chunks' writes allocated in the
/// sparse file) and flushes the device cache, and on a slow disk a housekeeper paying that
/// per chunk fell behind the shards, which then waited for their zeros.
pub(crate) fn zero_fill(file: &dyn VfsFile, from: u64, to: u64) -> io::Result<()> {
    if from >= to {
        return Ok(());
    }
    let zeros = [0u8; PAGE_BYTES as usize];
    let mut written = from;
    while written < to {
        let chunk_start = written;
        let chunk_end = to.min(written + ZERO_CHUNK_BYTES);
        while written < chunk_end {
            // A page at a time: the page cache then holds small folios, and each record's
            // small write and write-back later touches one page, not a large folio's worth
            // of block buffers.
            let page = (PAGE_BYTES - written % PAGE_BYTES).min(chunk_end - written) as usize;
            file.write_all_at(written, &[&zeros[..page]])?;
            written += page as u64;
        }
        if chunk_end < to {
            file.write_back(chunk_start, chunk_end - chunk_start)?;
        }
    }
    file.sync_data()
}

/// Turns a prepared file into the active segment `header`: writes and syncs its header,
/// renames it to its first LSN and syncs the directory.
pub(crate) fn activate(
    vfs: &dyn Vfs,
    prepared: &Path,
    dir: &Path,
    header: SegmentHeader,
) -> io::Result<Segment> {
    let file = vfs.open(prepared)?;
    if file.size()? != header.size {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "prepared segment has the wrong size"));
    }
    file.write_all_at(0, &[&header.encode()])?;
    file.sync_data()?;
    let path = dir.join(segment_name(header.first_lsn));
    vfs.rename(prepared, &path)?;
    vfs.sync_dir(dir)?;
    let map = file.map(header.size)?;
    Ok(Segment { header, path, file: Some(file), map })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::vfs::sim::SimVfs;

    #[test]
    fn prepare_activate_and_reopen() {
        let vfs = SimVfs::new();
        let dir = Path::new("/data/shard-000");
        vfs.create_dir_all(dir).unwrap();
        let prepared = prepare(&vfs, dir, 3, 4096).unwrap();
        assert!(is_prepared_name(&prepared.file_name().unwrap().to_string_lossy()));
        let header =
            SegmentHeader { shard: 0, ordinal: 3, first_lsn: Lsn::from_raw(0x42), size: 4096, created_ms: 7 };
        let segment = activate(&vfs, &prepared, dir, header).unwrap();
        assert_eq!(segment.path, dir.join("0000000000000042.wal"));
        assert!(!vfs.exists(&prepared));
        let reopened = Segment::open(&vfs, &segment.path).unwrap();
        assert_eq!(reopened.header, header);
        assert_eq!(reopened.map.size(), 4096);
        assert_eq!(parse_segment_name("0000000000000042.wal"), Some(Lsn::from_raw(0x42)));
        assert_eq!(parse_segment_name("42.wal"), None);
        assert_eq!(parse_segment_name("0000000000000042.tmp"), None);
    }

    /// What a zero-fill asked of its file, in order.
    #[derive(Debug, PartialEq)]
    enum Call {
        Write(u64, usize),
        WriteBack(u64, u64),
        Sync,
    }

    /// A file that only records the calls a zero-fill makes.
    #[derive(Default)]
    struct Recording(std::sync::Mutex<Vec<Call>>);

    impl VfsFile for Recording {
        fn size(&self) -> io::Result<u64> {
            Ok(u64::MAX)
        }
        fn set_len(&self, _len: u64) -> io::Result<()> {
            Ok(())
        }
        fn write_all_at(&self, position: u64, parts: &[&[u8]]) -> io::Result<()> {
            assert!(parts.iter().all(|part| part.iter().all(|&byte| byte == 0)), "zeros only");
            let len = parts.iter().map(|part| part.len()).sum();
            self.0.lock().unwrap().push(Call::Write(position, len));
            Ok(())
        }
        fn read_at(&self, _position: u64, _buffer: &mut [u8]) -> io::Result<usize> {
            unreachable!("a zero-fill never reads")
        }
        fn sync_data(&self) -> io::Result<()> {
            self.0.lock().unwrap().push(Call::Sync);
            Ok(())
        }
        fn write_back(&self, position: u64, len: u64) -> io::Result<()> {
            self.0.lock().unwrap().push(Call::WriteBack(position, len));
            Ok(())
        }
        fn map(&self, _len: u64) -> io::Result<Arc<dyn FileMap>> {
            unreachable!("a zero-fill never maps")
        }
    }

    #[test]
    fn a_zero_fill_writes_pages_sends_each_chunk_and_syncs_once() {
        // From mid-page, across two whole chunks, into a third.
        let (from, to) = (100, 100 + 2 * ZERO_CHUNK_BYTES + 5000);
        let file = Recording::default();
        zero_fill(&file, from, to).unwrap();
        let calls = file.0.into_inner().unwrap();
        let mut expected = Vec::new();
        let mut written = from;
        while written < to {
            let chunk = (written, to.min(written + ZERO_CHUNK_BYTES));
            while written < chunk.1 {
                let page = (PAGE_BYTES - written % PAGE_BYTES).min(chunk.1 - written);
                expected.push(Call::Write(written, page as usize));
                written += page;
            }
            if chunk.1 < to {
                expected.push(Call::WriteBack(chunk.0, chunk.1 - chunk.0));
            }
        }
        expected.push(Call::Sync);
        assert_eq!(calls, expected);
        assert_eq!(calls.iter().filter(|call| **call == Call::Sync).count(), 1, "one sync for the range");
    }

    #[test]
    fn a_zero_filled_range_survives_power_loss_as_written_blocks() {
        let vfs = SimVfs::new();
        let dir = Path::new("/d");
        vfs.create_dir_all(dir).unwrap();
        let size = 4 * ZERO_CHUNK_BYTES;
        let prepared = prepare(&vfs, dir, 0, size).unwrap();
        let file = vfs.open(&prepared).unwrap();
        let zeroed = first_zeroed_bytes(size);
        assert_eq!(file.written_end(0).unwrap(), zeroed, "a prepared segment is written over its first step");
        zero_fill(file.as_ref(), zeroed, size).unwrap();
        let after = vfs.crash(&mut crate::storage::vfs::sim::SimRng::new(7));
        let file = after.open(&prepared).unwrap();
        assert_eq!(file.written_end(0).unwrap(), size, "every block written and durable");
        let mut bytes = vec![0xff; size as usize];
        crate::storage::vfs::read_exact_at(file.as_ref(), 0, &mut bytes).unwrap();
        assert!(bytes.iter().all(|&byte| byte == 0));
    }

    #[test]
    fn damaged_headers_are_refused() {
        let vfs = SimVfs::new();
        let dir = Path::new("/d");
        vfs.create_dir_all(dir).unwrap();
        let prepared = prepare(&vfs, dir, 0, 1024).unwrap();
        let header = SegmentHeader { shard: 1, ordinal: 0, first_lsn: Lsn::FIRST, size: 1024, created_ms: 0 };
        let segment = activate(&vfs, &prepared, dir, header).unwrap();
        vfs.corrupt(&segment.path, 20, &[0xff]).unwrap();
        assert!(Segment::open(&vfs, &segment.path).is_err());
    }
}
