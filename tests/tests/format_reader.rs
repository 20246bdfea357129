//! `docs/FORMAT.md` is enough to read a data directory: a reader written from that page alone
//! finds every stream of every golden directory in `tests/fixtures/`.
//!
//! The reader below is small and independent of the project on purpose.
//! It uses no code of ds (neither the engine nor `ds_tests`), only std, `serde_json`, `base64`
//! and `crc32fast`.
//! Every rule it applies is one the page states; section numbers in comments are the page's.
//! It reads whole directories only (section 6.1), so any damage or torn write fails it.
//! It finds streams by reading every shard and every stream file, without the xxh3 hashes that
//! place them, since no xxh3 crate is a dependency.
//! For each fixture it rebuilds every stream's bytes, next offset, closed flag and content type,
//! and checks them, and the names that must be absent, against `expected.json`.
//! When it fails while the engine still reads the fixtures, the page has a rule missing or wrong.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use base64::Engine as _;
use serde_json::Value;

const FIXTURES: [&str; 4] = ["acid", "acid-crashed", "acid-moved-twice", "file-durable"];

// Record kinds and flags (section 4.4).
const CREATE: u8 = 1;
const APPEND: u8 = 2;
const DELETE: u8 = 3;
const SEAL: u8 = 4;
const CLOSE: u8 = 0x01;
const PRODUCER: u8 = 0x02;
const STREAM_SEQ: u8 = 0x04;
const MOVED: u8 = 0x20;
const MOVE_END: u8 = 0x40;
/// FORK on a create, SOFT on a delete.
const FORK_OR_SOFT: u8 = 0x80;

/// Messages, then stored bytes (section 4.1).
type Offset = (u64, u64);
type Result<T> = std::result::Result<T, String>;

#[test]
fn every_fixture_reads_back_with_the_format_page_alone() {
    for fixture in FIXTURES {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(fixture);
        let found = read_directory(&root.join("data")).unwrap_or_else(|e| panic!("{fixture}: {e}"));
        let expected: Value = serde_json::from_slice(&read(&root.join("expected.json")).unwrap()).unwrap();
        check_expected(fixture, &found, &expected);
    }
}

/// Every stream of a directory, by name: what replay knows of it and its own bytes.
fn read_directory(data: &Path) -> Result<BTreeMap<String, Found>> {
    let manifest = ["MANIFEST", "MANIFEST-COPY"]
        .iter()
        .find_map(|name| decode_manifest(&fs::read(data.join(name)).ok()?).ok())
        .ok_or("neither MANIFEST nor MANIFEST-COPY is intact")?;
    let streams = match manifest.mode.as_str() {
        "acid" => {
            let shards = (0..manifest.shards).map(|s| replay_shard(&data.join(format!("shard-{s:03}")), s));
            shards.collect::<Result<Vec<_>>>()?.into_iter().flatten().collect()
        }
        _ => read_stream_files(&data.join("streams"))?,
    };
    let mut found = BTreeMap::new();
    for stream in streams {
        let name = stream.stream.name.clone();
        if found.insert(name.clone(), stream).is_some() {
            return Err(format!("two streams named {name:?}"));
        }
    }
    Ok(found)
}

fn check_expected(fixture: &str, found: &BTreeMap<String, Found>, expected: &Value) {
    let mut listed = Vec::new();
    for entry in expected["streams"].as_array().unwrap() {
        let name = percent_decoded(entry["path"].as_str().unwrap());
        let what = format!("{fixture}: stream {name:?}");
        let stream = &found.get(&name).filter(|f| !f.stream.deleted).expect(&what).stream;
        let bytes = stream_bytes(found, &name, 0).unwrap_or_else(|e| panic!("{what}: {e}"));
        let body = base64::engine::general_purpose::STANDARD.decode(entry["body"].as_str().unwrap());
        assert_eq!(bytes, body.unwrap(), "{what}: bytes");
        assert_eq!(bytes.len() as u64, stream.tail.1, "{what}: bytes against its tail");
        let next_offset = format!("{:016}_{:016x}", stream.tail.0, stream.tail.1);
        assert_eq!(next_offset, entry["next_offset"].as_str().unwrap(), "{what}: next offset");
        assert_eq!(Some(stream.closed), entry["closed"].as_bool(), "{what}: closed");
        assert_eq!(stream.content_type, entry["content_type"].as_str().unwrap(), "{what}: content type");
        listed.push(name);
    }
    for name in expected["absent"].as_array().unwrap() {
        let name = name.as_str().unwrap();
        assert!(found.get(name).is_none_or(|f| f.stream.deleted), "{fixture}: {name:?} must be absent");
    }
    let mut visible: Vec<String> =
        found.values().filter(|f| !f.stream.deleted).map(|f| f.stream.name.clone()).collect();
    visible.sort();
    listed.sort();
    assert_eq!(visible, listed, "{fixture}: the visible streams are the listed ones");
}

/// `expected.json` names a stream by its URL path: its name in UTF-8, percent-encoded.
fn percent_decoded(path: &str) -> String {
    let (mut bytes, mut rest) = (Vec::new(), path.as_bytes());
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let hex = std::str::from_utf8(&tail[..2]).unwrap();
            bytes.push(u8::from_str_radix(hex, 16).unwrap());
            rest = &tail[2..];
        } else {
            bytes.push(byte);
            rest = tail;
        }
    }
    String::from_utf8(bytes).unwrap()
}

fn read(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// Reads little-endian fields one after another (section 4.1).
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, at: 0 }
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(len).filter(|&end| end <= self.bytes.len());
        let end = end.ok_or_else(|| format!("{len} bytes wanted at {} of {}", self.at, self.bytes.len()))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.take(N)?.try_into().unwrap())
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16> {
        self.array().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> Result<u32> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64> {
        self.array().map(u64::from_le_bytes)
    }

    fn offset(&mut self) -> Result<Offset> {
        Ok((self.u64()?, self.u64()?))
    }

    fn text(&mut self, len: usize) -> Result<String> {
        String::from_utf8(self.take(len)?.to_vec()).map_err(|e| e.to_string())
    }

    fn text16(&mut self) -> Result<String> {
        let len = self.u16()?;
        self.text(len.into())
    }

    fn text32(&mut self) -> Result<String> {
        let len = self.u32()?;
        self.text(len as usize)
    }

    /// The tag of an optional field: 0 none, 1 some, anything else an error.
    fn tag(&mut self) -> Result<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            tag => Err(format!("tag {tag} at {}", self.at - 1)),
        }
    }

    fn opt_u64(&mut self) -> Result<Option<u64>> {
        if self.tag()? {
            self.u64().map(Some)
        } else {
            Ok(None)
        }
    }

    fn opt_text32(&mut self) -> Result<Option<String>> {
        if self.tag()? {
            self.text32().map(Some)
        } else {
            Ok(None)
        }
    }

    fn end(&self) -> Result<()> {
        let left = self.bytes.len() - self.at;
        if left == 0 {
            Ok(())
        } else {
            Err(format!("{left} bytes left over"))
        }
    }
}

/// The four fields of a manifest (section 4.2); `format` and `hash` have one valid value each.
struct Manifest {
    mode: String,
    shards: u32,
}

fn decode_manifest(bytes: &[u8]) -> Result<Manifest> {
    let text = std::str::from_utf8(&bytes[..bytes.len().min(4097)]).map_err(|e| e.to_string())?;
    let mut lines = text.lines();
    let mut value =
        |key: &str| lines.next().and_then(|line| line.strip_prefix(key)).ok_or(format!("no {key}"));
    let format: u32 = value("format=")?.parse().map_err(|_| "format")?;
    let mode = value("mode=")?.to_string();
    let shards: u32 = value("shards=")?.parse().map_err(|_| "shards")?;
    let hash = value("hash=")?;
    let fields = format!("format={format}\nmode={mode}\nshards={shards}\nhash={hash}\n");
    let checked = format!("{fields}check={:08x}\n", crc32(fields.as_bytes()));
    if text != fields && text != checked {
        return Err("not exactly the manifest its fields make".into());
    }
    if format != 1 || hash != "xxh3-64" || !["acid", "file-durable", "file-fast"].contains(&mode.as_str()) {
        return Err(format!("a manifest this format does not open: {fields:?}"));
    }
    Ok(Manifest { mode, shards })
}

/// One record that decoded whole (section 4.4); the fields this reader uses.
struct Record {
    kind: u8,
    flags: u8,
    lsn: u64,
    stream: u64,
    offset: Offset,
    messages: u32,
    /// `align8(64 + payload_len)`: the record takes this many bytes.
    len: usize,
    chain_n: u64,
    jumps: Vec<u64>,
    create: Option<Create>,
    data: Vec<u8>,
}

/// The create part of a create record's meta.
struct Create {
    name: String,
    content_type: String,
    fork: Option<ForkRef>,
}

/// A fork reference (section 4.4), in a create record or a checkpoint.
#[derive(Clone)]
struct ForkRef {
    source: String,
    source_id: u64,
    until: Offset,
    partial_bytes: u64,
}

impl ForkRef {
    /// The fork's start: `until`, with a cut message counted as one whole message.
    fn start(&self) -> Offset {
        match self.partial_bytes {
            0 => self.until,
            partial => (self.until.0 + 1, self.until.1 + partial),
        }
    }
}

impl Record {
    fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// The stream's offset after this record.
    fn end(&self) -> Offset {
        (self.offset.0 + u64::from(self.messages), self.offset.1 + self.data.len() as u64)
    }
}

/// The record at `at`, or `None` for unwritten space (section 4.4).
fn decode_record(bytes: &[u8], at: usize) -> Result<Option<Record>> {
    let rest = bytes.get(at..).unwrap_or_default();
    let head = &rest[..rest.len().min(64)];
    if head.iter().all(|&b| b == 0) {
        return Ok(None);
    }
    let mut c = Cursor::new(head);
    if head.len() < 64 || c.take(4)? != b"DSR1" {
        return Err(format!("truncated record or bad magic at {at}"));
    }
    let (kind, flags, meta_len, payload_len, payload_crc) = (c.u8()?, c.u8()?, c.u16()?, c.u32()?, c.u32()?);
    let (lsn, stream, offset) = (c.u64()?, c.u64()?, c.offset()?);
    c.u64()?; // time
    let messages = c.u32()?;
    if c.u32()? != crc32(&head[..60]) || !(CREATE..=SEAL).contains(&kind) {
        return Err(format!("bad header crc or kind at {at}"));
    }
    let (meta_len, payload_len) = (usize::from(meta_len), payload_len as usize);
    check_header_fields(kind, flags, meta_len, payload_len, messages).map_err(|e| format!("{e} at {at}"))?;
    let payload = rest.get(64..64 + payload_len).ok_or_else(|| format!("truncated payload at {at}"))?;
    if crc32(payload) != payload_crc {
        return Err(format!("bad payload crc at {at}"));
    }
    let (meta, data) = payload.split_at(meta_len);
    let len = (64 + payload_len).next_multiple_of(8);
    let mut record = Record {
        kind,
        flags,
        lsn,
        stream,
        offset,
        messages,
        len,
        chain_n: 0,
        jumps: vec![],
        create: None,
        data: data.to_vec(),
    };
    decode_meta(&mut record, meta).map_err(|e| format!("meta at {at}: {e}"))?;
    Ok(Some(record))
}

/// The rules by which a header's fields must agree (section 4.4).
fn check_header_fields(
    kind: u8,
    flags: u8,
    meta_len: usize,
    payload_len: usize,
    messages: u32,
) -> Result<()> {
    let data_len = payload_len.checked_sub(meta_len).ok_or("meta_len above payload_len")?;
    let agree = (messages == 0) == (data_len == 0)
        && (flags & MOVE_END == 0 || flags & MOVED != 0)
        && match kind {
            APPEND => flags & FORK_OR_SOFT == 0,
            DELETE => payload_len == 0 && flags & MOVED == 0,
            SEAL => payload_len == 0 && flags == 0,
            _ => true,
        };
    if agree {
        Ok(())
    } else {
        Err(format!("fields disagree (kind {kind}, flags {flags:#04x})"))
    }
}

/// The meta: the chain part, then the create or append part; it must fill `meta_len` exactly.
fn decode_meta(record: &mut Record, meta: &[u8]) -> Result<()> {
    let mut c = Cursor::new(meta);
    if matches!(record.kind, CREATE | APPEND) {
        record.chain_n = c.u64()?;
        let jumps = c.u8()?;
        let want = if record.chain_n == 0 { 0 } else { record.chain_n.trailing_zeros() + 1 };
        if u32::from(jumps) != want || jumps > 63 {
            return Err(format!("{jumps} jumps for chain index {}", record.chain_n));
        }
        record.jumps = (0..jumps).map(|_| c.u64()).collect::<Result<_>>()?;
    }
    if record.kind == CREATE {
        let (name, content_type) = (c.text16()?, c.text16()?);
        let _skipped = (c.u64()?, c.u64()?); // ttl_secs, expires_at_ms
        let fork = if record.has(FORK_OR_SOFT) { Some(decode_fork_ref(c.text16()?, &mut c)?) } else { None };
        record.create = Some(Create { name, content_type, fork });
    }
    if record.kind == APPEND && record.has(PRODUCER) {
        let _skipped = (c.text16()?, c.u64()?, c.u64()?); // producer id, epoch, seq
    }
    if record.kind == APPEND && record.has(STREAM_SEQ) {
        c.text16()?;
    }
    c.end()
}

/// A fork reference after its source name (a text16 in a record, a text32 in a checkpoint).
fn decode_fork_ref(source: String, c: &mut Cursor<'_>) -> Result<ForkRef> {
    let (source_id, origin) = (c.u64()?, c.offset()?);
    c.u64()?; // sub_offset
    let (until, partial_bytes) = (c.offset()?, c.u64()?);
    if origin.0 > until.0 || origin.1 > until.1 || until.0 >= 9_999_999_999_999_999 {
        return Err("a fork reference whose offsets disagree".into());
    }
    until.1.checked_add(partial_bytes).ok_or("a fork reference past u64")?;
    Ok(ForkRef { source, source_id, until, partial_bytes })
}

/// What a reader knows of one stream after replay or after reading its file (section 6).
#[derive(Clone)]
struct Stream {
    id: u64,
    name: String,
    content_type: String,
    tail: Offset,
    chain_n: u64,
    chain_tail: u64,
    closed: bool,
    deleted: bool,
    fork: Option<ForkRef>,
}

impl Stream {
    /// The stream a create record starts (section 5.3), at `location`.
    fn created(r: &Record, location: u64) -> Result<Stream> {
        let create = r.create.as_ref().ok_or("a create record without its create part")?;
        if r.chain_n != 0 || r.offset != create.fork.as_ref().map_or((0, 0), ForkRef::start) {
            return Err(format!("create of {:?}: chain index or offset is not its start", create.name));
        }
        Ok(Stream {
            id: r.stream,
            name: create.name.clone(),
            content_type: create.content_type.clone(),
            tail: r.end(),
            chain_n: 0,
            chain_tail: location,
            closed: r.has(CLOSE),
            deleted: false,
            fork: create.fork.clone(),
        })
    }

    /// An append, which must continue the stream exactly (section 4.5).
    fn append(&mut self, r: &Record, location: u64) -> Result<()> {
        let continues =
            r.offset == self.tail && r.chain_n == self.chain_n + 1 && r.jumps[0] == self.chain_tail;
        if !continues || self.closed {
            return Err(format!("record {} does not continue stream {:?}", r.lsn, self.name));
        }
        (self.tail, self.chain_n, self.chain_tail) = (r.end(), r.chain_n, location);
        self.closed = r.has(CLOSE);
        Ok(())
    }
}

/// A stream as read, with its own bytes (its chain records' data, without what a fork inherits).
struct Found {
    stream: Stream,
    own: Vec<u8>,
}

/// Follows the chain from its tail back through first jumps to index 0 (section 6).
fn own_bytes(stream: &Stream, read_at: &dyn Fn(u64) -> Result<Record>) -> Result<Found> {
    let (mut location, mut end, mut parts) = (stream.chain_tail, stream.tail, Vec::new());
    for n in (0..=stream.chain_n).rev() {
        let r = read_at(location)?;
        if r.stream != stream.id || r.chain_n != n || r.end() != end || !matches!(r.kind, CREATE | APPEND) {
            return Err(format!(
                "chain of {:?}: no record {n} ending at {end:?} at {location:#x}",
                stream.name
            ));
        }
        if n > 0 && r.jumps[0] >= location {
            return Err(format!("chain of {:?}: a jump forward at {location:#x}", stream.name));
        }
        (location, end) = (r.jumps.first().copied().unwrap_or_default(), r.offset);
        parts.push(r.data);
    }
    if end != stream.fork.as_ref().map_or((0, 0), ForkRef::start) {
        return Err(format!("chain of {:?}: its create is not at its start", stream.name));
    }
    parts.reverse();
    Ok(Found { stream: stream.clone(), own: parts.concat() })
}

/// A stream's whole bytes: what a fork inherits from its source, then its own (section 6).
fn stream_bytes(found: &BTreeMap<String, Found>, name: &str, depth: usize) -> Result<Vec<u8>> {
    let this = &found[name];
    let Some(fork) = &this.stream.fork else { return Ok(this.own.clone()) };
    let source = found.get(&fork.source).filter(|s| s.stream.id == fork.source_id);
    if source.is_none() || depth == 16 {
        return Err(format!("fork {name:?}: no source {:?} with id {}", fork.source, fork.source_id));
    }
    let mut bytes = stream_bytes(found, &fork.source, depth + 1)?;
    let inherited = usize::try_from(fork.start().1).unwrap();
    if bytes.len() < inherited {
        return Err(format!("fork {name:?}: its source holds fewer bytes than it inherits"));
    }
    bytes.truncate(inherited);
    bytes.extend_from_slice(&this.own);
    Ok(bytes)
}

/// One acid segment (section 4.6): its header's fields, and the bytes records are read from.
struct Segment {
    ordinal: u32,
    first_lsn: u64,
    bytes: Vec<u8>,
}

/// The shard's segments by ordinal: the files named 16 hex digits + `.wal` (section 5.2).
fn read_segments(dir: &Path, shard: u32) -> Result<BTreeMap<u32, Segment>> {
    let mut segments = BTreeMap::new();
    for entry in fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let Some(stem) = name.strip_suffix(".wal").filter(|s| s.len() == 16) else { continue };
        let Ok(named_lsn) = u64::from_str_radix(stem, 16) else { continue };
        let mut bytes = read(&path)?;
        let mut c = Cursor::new(&bytes);
        let (magic, version, shard_field) = (c.take(4)?, c.u32()?, c.u32()?);
        let (ordinal, first_lsn, size) = (c.u32()?, c.u64()?, c.u64()?);
        let _skipped = (c.u64()?, c.take(20)?); // created, reserved
        let intact = magic == b"DSG1" && version == 1 && c.u32()? == crc32(&bytes[..60]);
        if !intact || shard_field != shard || first_lsn != named_lsn {
            return Err(format!("{}: not a segment of shard {shard}", path.display()));
        }
        bytes.truncate(usize::try_from(size).unwrap());
        if segments.insert(ordinal, Segment { ordinal, first_lsn, bytes }).is_some() {
            return Err(format!("{}: a second segment {ordinal}", path.display()));
        }
    }
    Ok(segments)
}

/// The part of a checkpoint replay starts from (section 4.7).
struct Checkpoint {
    resume: (u32, u64),
    next_lsn: u64,
    streams: Vec<Stream>,
}

fn decode_checkpoint(bytes: &[u8], shard: u32) -> Result<Checkpoint> {
    let (body, crc) = bytes.split_at(bytes.len().checked_sub(4).ok_or("shorter than its crc")?);
    if crc32(body).to_le_bytes() != crc {
        return Err("bad crc".into());
    }
    let mut c = Cursor::new(body);
    let (magic, version, shard_field) = (c.take(4)?, c.u32()?, c.u32()?);
    if magic != b"DSK1" || !(1..=4).contains(&version) || shard_field != shard {
        return Err(format!("magic, version {version} or shard {shard_field} is wrong"));
    }
    let _skipped = (c.u8()?, c.u64()?); // clean, lsn
    let resume = (c.u32()?, c.u64()?);
    let next_lsn = c.u64()?;
    let _skipped = (c.u64()?, c.u64()?); // stream_id_next, written_ms
    for _ in 0..c.u32()? {
        let _skipped = (c.u32()?, c.u64()?); // a segment's live bytes
    }
    for _ in 0..c.u64()? {
        c.u64()?; // a pending chain tail
    }
    let count = c.u64()?;
    let streams = (0..count).map(|_| checkpoint_stream(&mut c, version)).collect::<Result<_>>()?;
    c.end()?;
    Ok(Checkpoint { resume, next_lsn, streams })
}

/// One stream entry of a checkpoint; fields of later versions are read only in those.
fn checkpoint_stream(c: &mut Cursor<'_>, version: u32) -> Result<Stream> {
    let (id, name, content_type) = (c.u64()?, c.text32()?, c.text32()?);
    let _skipped = (c.opt_u64()?, c.opt_u64()?, c.u64()?); // ttl_secs, expires_at_ms, last_access_ms
    let (tail, closed) = (c.offset()?, c.u8()? == 1);
    c.opt_text32()?; // Stream-Seq
    let (chain_tail, chain_n) = (c.u64()?, c.u64()?);
    for _ in 0..c.u32()? {
        let _skipped = (c.text32()?, c.u64()?, c.u64()?, c.u64()?); // a producer
    }
    if version >= 2 && c.tag()? {
        let (at, reason) = (c.offset()?, c.text32()?);
        panic!("stream {name:?} is damaged at {at:?} ({reason}): this reader reads whole directories");
    }
    if version >= 3 {
        c.u64()?; // tag_bytes
    }
    let deleted = version >= 4 && c.tag()?;
    let fork = if version >= 4 && c.u8()? != 0 { Some(decode_fork_ref(c.text32()?, c)?) } else { None };
    Ok(Stream { id, name, content_type, tail, chain_n, chain_tail, closed, deleted, fork })
}

/// `checkpoint` if it decodes and names this shard, else `checkpoint.previous`, else none.
fn read_checkpoint(dir: &Path, shard: u32) -> Option<Checkpoint> {
    ["checkpoint", "checkpoint.previous"].iter().find_map(|name| {
        let decoded = decode_checkpoint(&fs::read(dir.join(name)).ok()?, shard);
        decoded.map_err(|e| eprintln!("{}/{name}: {e}", dir.display())).ok()
    })
}

/// A shard's streams as replay goes, and the move under way (sections 5.3 and 5.4).
struct Log {
    streams: BTreeMap<u64, Stream>,
    next_lsn: u64,
    /// No checkpoint and the first segments removed: records of unknown streams are skipped.
    skip_unknown: bool,
    /// The shadow stream compaction's copies build.
    moving: Option<Stream>,
}

/// Replays one shard from its checkpoint (or its first segment) to the end of its log (6.1).
fn replay_shard(dir: &Path, shard: u32) -> Result<Vec<Found>> {
    let segments = read_segments(dir, shard)?;
    let first = segments.values().next().ok_or(format!("{}: no segment", dir.display()))?;
    let (mut log, resume) = match read_checkpoint(dir, shard) {
        Some(cp) => {
            let streams = cp.streams.into_iter().map(|s| (s.id, s)).collect();
            (Log { streams, next_lsn: cp.next_lsn, skip_unknown: false, moving: None }, cp.resume)
        }
        None => {
            let log = Log {
                streams: BTreeMap::new(),
                next_lsn: first.first_lsn,
                skip_unknown: first.ordinal > 0,
                moving: None,
            };
            (log, (first.ordinal, 64))
        }
    };
    let last = *segments.keys().next_back().unwrap();
    if !segments.contains_key(&resume.0) {
        return Err(format!("shard {shard}: no segment {} to resume in", resume.0));
    }
    for (expected, segment) in (resume.0..).zip(segments.range(resume.0..).map(|(_, s)| s)) {
        if segment.ordinal != expected {
            return Err(format!("shard {shard}: segment {expected} is missing"));
        }
        let mut position = usize::try_from(resume.1).unwrap();
        if segment.ordinal != resume.0 {
            if segment.first_lsn != log.next_lsn {
                return Err(format!(
                    "shard {shard}: segment {expected} does not start at LSN {}",
                    log.next_lsn
                ));
            }
            position = 64;
        }
        let at = |position: usize| format!("shard {shard}, segment {expected}, position {position:#x}");
        let mut sealed = false;
        while let Some(r) =
            decode_record(&segment.bytes, position).map_err(|e| format!("{}: {e}", at(position)))?
        {
            if r.lsn != log.next_lsn {
                return Err(format!("{}: LSN {} where {} was next", at(position), r.lsn, log.next_lsn));
            }
            log.next_lsn += 1;
            sealed = r.kind == SEAL;
            if sealed {
                break;
            }
            let location = u64::from(segment.ordinal) << 32 | position as u64;
            log.apply(&r, location).map_err(|e| format!("{}: {e}", at(position)))?;
            position += r.len;
        }
        if !sealed && segment.ordinal != last {
            return Err(format!("{}: unwritten space before a later segment", at(position)));
        }
    }
    let read_at = |location: u64| {
        let segment =
            segments.get(&((location >> 32) as u32)).ok_or(format!("no segment for {location:#x}"))?;
        decode_record(&segment.bytes, (location & 0xffff_ffff) as usize)?
            .ok_or(format!("nothing at {location:#x}"))
    };
    log.streams.values().map(|stream| own_bytes(stream, &read_at)).collect()
}

impl Log {
    /// Applies a record that is not a seal (section 6.1, with the checks of 5.3).
    fn apply(&mut self, r: &Record, location: u64) -> Result<()> {
        let continues_move = self.moving.as_ref().is_some_and(|m| m.id == r.stream);
        if !(r.has(MOVED) && r.kind == APPEND && continues_move) {
            self.moving = None;
        }
        if r.kind == CREATE && !r.has(MOVED) {
            let stream = Stream::created(r, location)?;
            if self.streams.values().any(|s| s.id == stream.id || s.name == stream.name) {
                return Err(format!("a second stream {} {:?}", stream.id, stream.name));
            }
            self.streams.insert(stream.id, stream);
            return Ok(());
        }
        let Some(stream) = self.streams.get_mut(&r.stream) else {
            return if self.skip_unknown {
                Ok(())
            } else {
                Err(format!("stream {} does not exist", r.stream))
            };
        };
        match r.kind {
            _ if r.has(MOVED) => self.copy(r, location),
            APPEND => stream.append(r, location),
            _ if r.has(FORK_OR_SOFT) => {
                stream.deleted = true;
                Ok(())
            }
            _ => {
                self.streams.remove(&r.stream);
                Ok(())
            }
        }
    }

    /// A compaction copy (section 5.4): the copies build a shadow, applied at the one that ends
    /// the move, which older logs mark with MOVE_END on earlier copies too.
    fn copy(&mut self, r: &Record, location: u64) -> Result<()> {
        match (&mut self.moving, r.kind) {
            (_, CREATE) => self.moving = Some(Stream::created(r, location)?),
            (Some(shadow), _) => shadow.append(r, location)?,
            (None, _) => return Err("a copied append with no move under way".into()),
        }
        let (stream, shadow) = (self.streams.get_mut(&r.stream).unwrap(), self.moving.as_ref().unwrap());
        if r.has(MOVE_END) && shadow.chain_n >= stream.chain_n {
            if (shadow.tail, shadow.chain_n) != (stream.tail, stream.chain_n) {
                return Err(format!("a move of {:?} that does not end where the stream does", stream.name));
            }
            stream.chain_tail = shadow.chain_tail;
            self.moving = None;
        }
        Ok(())
    }
}

/// Every stream file under `streams/ab/cd/` (sections 3.3 and 4.8).
fn read_stream_files(streams: &Path) -> Result<Vec<Found>> {
    let mut found = Vec::new();
    for ab in hex_dirs(streams)? {
        for cd in hex_dirs(&streams.join(&ab))? {
            let dir = streams.join(&ab).join(&cd);
            for entry in fs::read_dir(&dir).map_err(|e| e.to_string())? {
                let name = entry.map_err(|e| e.to_string())?.file_name().into_string().unwrap_or_default();
                if let Some(suffix) = stream_file_suffix(&name, &format!("{ab}{cd}")) {
                    let bytes = read(&dir.join(&name))?;
                    found.push(
                        read_stream_file(&bytes, suffix).map_err(|e| format!("{ab}/{cd}/{name}: {e}"))?,
                    );
                }
            }
        }
    }
    Ok(found)
}

/// The names of the directories in `dir` named two lowercase hex digits.
fn hex_dirs(dir: &Path) -> Result<Vec<String>> {
    let entries = fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let names = entries.filter_map(|e| e.ok()?.file_name().into_string().ok());
    Ok(names.filter(|n| n.len() == 2 && is_lower_hex(n)).collect())
}

fn is_lower_hex(text: &str) -> bool {
    text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The collision suffix `k` of a file named `H.log` (0) or `H-k.log`, `H` starting with `prefix`.
fn stream_file_suffix(name: &str, prefix: &str) -> Option<u64> {
    let stem = name.strip_suffix(".log")?;
    let (hash, suffix) = match stem.split_once('-') {
        Some((hash, k)) => (hash, k.parse().ok().filter(|k| (1..=255).contains(k))?),
        None => (stem, 0),
    };
    (hash.len() == 32 && is_lower_hex(hash) && hash.starts_with(prefix)).then_some(suffix)
}

/// One stream file: its create, its appends, perhaps a soft delete (sections 4.8 and 5.6).
fn read_stream_file(bytes: &[u8], suffix: u64) -> Result<Found> {
    let location = |position: usize| suffix << 56 | position as u64;
    let create = decode_record(bytes, 0)?.ok_or("no create record")?;
    if create.kind != CREATE || create.lsn != 0 {
        return Err("the first record is not a create numbered 0".into());
    }
    let mut stream = Stream::created(&create, location(0))?;
    let mut position = create.len;
    while position < bytes.len() {
        let r = decode_record(bytes, position)?.ok_or(format!("unwritten space at {position}"))?;
        if stream.deleted || r.stream != stream.id || r.lsn != stream.chain_n + 1 || r.has(MOVED) {
            return Err(format!("record at {position} does not follow the one before"));
        }
        match r.kind {
            APPEND => stream.append(&r, location(position))?,
            DELETE if r.has(FORK_OR_SOFT) => stream.deleted = true,
            _ => return Err(format!("a record of kind {} at {position}", r.kind)),
        }
        position += r.len;
    }
    let read_at = |location: u64| {
        let position = usize::try_from(location & ((1 << 56) - 1)).unwrap();
        let record = decode_record(bytes, position)?.filter(|_| location >> 56 == suffix);
        record.ok_or(format!("no record of this file at {location:#x}"))
    };
    own_bytes(&stream, &read_at)
}
