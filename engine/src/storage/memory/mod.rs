//! Memory mode's storage: streams' bytes in shared append-only blocks.
//!
//! - `block`: one append-only buffer, written once by its shard, read zero-copy by readers.
//! - `log`: one stream's blocks and message boundaries; appends and boundary-checked reads.

mod block;
mod log;

pub(crate) use log::MemLog;
