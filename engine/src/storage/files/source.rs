//! Reading a stream's records from its file, and the readers' way to a stream's file.
//!
//! Headers (with the chain part of the meta) and records are read with positional reads and
//! checked on every read — header crc when a reader steps onto the record, then the payload
//! against the crc that header carried (one read of the data, no second read of the header)
//! — before any byte is served; a
//! record that fails is never handed out ([`ReadError::Damaged`]; an I/O error is
//! [`ReadError::Storage`]). A stream file holds its records in order, so a record's
//! successor is the record right after it.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::handles::Handles;
use super::{location, split_location, stream_path};
use crate::ids::{Location, StreamId};
use crate::offset::Offset;
use crate::storage::chain::read::RecordSource;
use crate::storage::chain::{Node, NodeSource};
use crate::storage::chunk::{Chunk, Message, ReadError};
use crate::storage::record::codec::{
    chain_bytes, decode_chain, payload_crc, Header, HEADER_BYTES, JUMPS_MAX, META_BYTES_MAX,
};
use crate::storage::vfs::{read_exact_at, Vfs, VfsFile};
use crate::storage::{LogStore, LogView};

/// One stream file as a source of records.
pub(crate) struct FileSource {
    pub file: Arc<dyn VfsFile>,
    /// The stream the file must belong to (a file found by name may already hold a newer
    /// stream of that name).
    pub stream: StreamId,
}

impl NodeSource for FileSource {
    type Error = ReadError;

    /// Reads and checks the header and chain of the record at `location`.
    fn node(&self, location: Location) -> Result<Node, ReadError> {
        let (_, position) = split_location(location);
        let mut raw = [0u8; HEADER_BYTES + 9 + 8 * JUMPS_MAX];
        let read = self.file.read_at(position, &mut raw).map_err(|_| ReadError::Storage)?;
        if read < HEADER_BYTES + 9 {
            return Err(ReadError::Damaged);
        }
        let header_raw: &[u8; HEADER_BYTES] = raw[..HEADER_BYTES].try_into().expect("64 bytes");
        let header = Header::decode(header_raw).map_err(|_| ReadError::Damaged)?;
        if header.stream != self.stream {
            return Err(ReadError::Damaged);
        }
        let meta_len = usize::from(header.meta_len);
        let jumps = usize::from(raw[HEADER_BYTES + 8]);
        let chain_len = chain_bytes(jumps);
        if jumps > JUMPS_MAX || chain_len > meta_len || HEADER_BYTES + chain_len > read {
            return Err(ReadError::Damaged);
        }
        let chain =
            decode_chain(&raw[HEADER_BYTES..HEADER_BYTES + chain_len]).map_err(|_| ReadError::Damaged)?;
        Ok(header.chain_node(location, chain))
    }
}

impl RecordSource for FileSource {
    /// The data of the record `node` describes, checked against the crc its header gave
    /// (the header itself was checked when `node` was read).
    fn data(&self, node: &Node) -> Result<Bytes, ReadError> {
        let (_, position) = split_location(node.location);
        let stored = node.stored;
        let meta_len = usize::from(stored.meta_len);
        if meta_len > META_BYTES_MAX || meta_len > stored.payload_len as usize {
            return Err(ReadError::Damaged);
        }
        let mut payload = BytesMut::zeroed(stored.payload_len as usize);
        read_exact_at(self.file.as_ref(), position + HEADER_BYTES as u64, &mut payload).map_err(|error| {
            match error.kind() {
                std::io::ErrorKind::UnexpectedEof => ReadError::Damaged,
                _ => ReadError::Storage,
            }
        })?;
        let (meta, data) = payload.split_at(meta_len);
        if payload_crc(meta, &[data]) != stored.payload_crc {
            tracing::error!(position, "stored data fails its checksum; the read is refused");
            return Err(ReadError::Damaged);
        }
        Ok(payload.freeze().slice(meta_len..))
    }

    /// The record right after `node` in the file, if the file goes on.
    fn successor(
        &self,
        node: &Node,
        limit: Location,
        scan_bytes: &mut u64,
    ) -> Result<Option<Node>, ReadError> {
        let at = node.location.plus(node.len);
        if at > limit || *scan_bytes < node.len {
            return Ok(None);
        }
        *scan_bytes -= node.len;
        let next = self.node(at)?;
        let follows =
            next.n == node.n.next() && next.jumps.first() == Some(&node.location) && next.start == node.end;
        if !follows {
            return Err(ReadError::Damaged);
        }
        Ok(Some(next))
    }

    fn first_record(
        &self,
        _stream: StreamId,
        tail_location: Location,
        _scan: &mut u64,
    ) -> Result<Option<Node>, ReadError> {
        self.node(location(split_location(tail_location).0, 0)).map(Some)
    }
}

/// How readers of a shard reach its streams' files.
pub(crate) struct FileStore {
    pub vfs: Arc<dyn Vfs>,
    pub root: PathBuf,
    pub handles: Arc<Handles>,
}

impl FileStore {
    fn source(&self, view: &LogView) -> Result<FileSource, ReadError> {
        let (suffix, _) = split_location(view.tail_location);
        let file = self
            .handles
            .get_or_open(view.stream, || self.vfs.open(&stream_path(&self.root, &view.name, suffix)))
            .map_err(|_| ReadError::Storage)?;
        Ok(FileSource { file, stream: view.stream })
    }
}

impl LogStore for FileStore {
    fn chunk(&self, view: LogView, from: Offset, bytes_max: usize) -> Result<Chunk, ReadError> {
        let source = self.source(&view)?;
        view.read(&source).chunk(from, bytes_max)
    }

    fn messages(&self, view: LogView, from: Offset, bytes_max: usize) -> Result<Vec<Message>, ReadError> {
        let source = self.source(&view)?;
        view.read(&source).messages(from, bytes_max)
    }
}
