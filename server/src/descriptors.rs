//! File descriptors: the process's limit raised as far as it may go, and checked at start
//! against what the configuration needs, so no connection or write can run out of them.
//!
//! Every connection is a descriptor; so are the engine's files (acid: each shard's active
//! segment and the one prepared next, checkpoints and renewals being written; the file
//! modes: the cache of open stream files, and the writers' files, as many again) and the
//! process's own (the listener, the
//! runtime's event queue, logs, the data directory's lock). [`prepare`] raises the soft
//! limit to the hard one, sizes the file modes' cache of open files to what is left (up to
//! its default, at least [`FILE_CACHE_PER_SHARD_MIN`] a shard), and refuses to start when
//! `DS_SERVER__MAX_CONNECTIONS` cannot fit beside the rest: a server at its connection limit
//! then still has every descriptor the engine needs. (Past the limit, connections get a
//! canned 503; if `accept` itself runs out, the loop backs off and goes on.)

use ds_engine::{EngineConfig, StorageMode};

use crate::config::Config;

/// Descriptors the process needs besides connections and the engine's files (and room to
/// accept a few connections past the limit, to refuse them with a 503; beyond that, `accept`
/// fails and the loop backs off).
const PROCESS_DESCRIPTORS: u64 = 96;
/// Descriptors an acid shard may hold at once: its active segment, one being prepared, a
/// checkpoint and a renewals file being written.
const ACID_SHARD_DESCRIPTORS: u64 = 4;

/// The fewest open stream files the file modes' cache may be given per shard (the engine's
/// own floor).
pub(crate) const FILE_CACHE_PER_SHARD_MIN: u64 = 16;

/// Raises the soft limit on open files to the hard one and sizes the engine's cache of open
/// files to what is left; the descriptors the configuration needs, or why they cannot be had.
pub(crate) fn prepare(config: &mut Config) -> Result<u64, String> {
    let limit = raise_limit();
    let fixed =
        config.connections_max as u64 + fixed_engine_descriptors(&config.engine) + PROCESS_DESCRIPTORS;
    let file_modes = matches!(config.engine.mode, StorageMode::FileFast | StorageMode::FileDurable);
    let cache_min = FILE_CACHE_PER_SHARD_MIN * u64::from(config.engine.shard_count);
    // The shards' writers keep at most as many files open as the cache does.
    let cache = if file_modes { 2 * cache_min } else { 0 };
    if fixed + cache > limit {
        let room = limit.saturating_sub(fixed + cache - config.connections_max as u64);
        return Err(format!(
            "DS_SERVER__MAX_CONNECTIONS={} needs about {} file descriptors with this storage, but this \
             process may open {limit} (ulimit -n); raise the limit or set DS_SERVER__MAX_CONNECTIONS to at most {room}",
            config.connections_max,
            fixed + cache
        ));
    }
    if file_modes {
        let room = ((limit - fixed) / 2)
            .clamp(cache_min, config.engine.file_handles_max.max(cache_min as usize) as u64);
        config.engine.file_handles_max = room as usize;
    }
    Ok(fixed + 2 * config.engine.file_handles_max as u64 * u64::from(file_modes))
}

/// Descriptors the engine needs besides the file modes' cache of open files.
fn fixed_engine_descriptors(engine: &EngineConfig) -> u64 {
    let shards = u64::from(engine.shard_count);
    match engine.mode {
        StorageMode::Memory => 0,
        StorageMode::Acid => shards * ACID_SHARD_DESCRIPTORS,
        StorageMode::FileFast | StorageMode::FileDurable => shards * 2,
    }
}

/// Sets the soft limit on open files to the hard one (where it is lower); the soft limit.
fn raise_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct it is given, a valid rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return u64::MAX;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
        // SAFETY: setrlimit reads the struct it is given, a valid rlimit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit.rlim_cur = limit.rlim_max;
        }
    }
    if limit.rlim_cur == libc::RLIM_INFINITY {
        return u64::MAX;
    }
    limit.rlim_cur
}
