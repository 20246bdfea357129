//! The subcommands, and what several of them share: visiting every stream of a store.

pub mod info;
pub mod read;
pub mod records;
pub mod stats;
pub mod streams;
pub mod verify;

use std::io;

use ds_engine::inspect::Store;
use ds_engine::inspect::StreamSnapshot;

/// Calls `visit` with every stream of `store`: acid shard by shard (each shard's streams by
/// name), the file modes file by file. Only one shard's streams are held at a time.
pub fn for_each_stream(
    store: &Store,
    mut visit: impl FnMut(&StreamSnapshot) -> io::Result<()>,
) -> io::Result<()> {
    if store.mode() == ds_engine::StorageMode::Acid {
        for shard in 0..store.shard_count() {
            let log = store.shard(shard)?;
            let mut streams: Vec<&StreamSnapshot> = log.analysis.streams().collect();
            streams.sort_by(|a, b| a.name.cmp(&b.name));
            for stream in streams {
                visit(stream)?;
            }
        }
        return Ok(());
    }
    for (path, suffix) in store.stream_files()? {
        if let Some(snapshot) = store.stream_file(&path, suffix)?.analysis.snapshot {
            visit(&snapshot)?;
        }
    }
    Ok(())
}
