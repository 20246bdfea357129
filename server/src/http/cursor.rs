//! `Stream-Cursor`: the interval number a live response belongs to.
//!
//! Time is cut into 20-second intervals counted from 2024-10-09T00:00:00Z; a live response
//! carries the current interval number, so caches keyed by cursor expire. When the client
//! echoes a cursor that is not behind the current interval, the answer jumps ahead by a
//! random 1 to 3600 seconds' worth of intervals: cursors never repeat or go back.

use std::hash::{BuildHasher, Hasher};

/// 2024-10-09T00:00:00Z, in seconds since the Unix epoch.
pub const CURSOR_EPOCH_SECS: u64 = 1_728_432_000;
/// Length of one cursor interval.
pub const CURSOR_INTERVAL_SECS: u64 = 20;
/// Largest random jump, in seconds.
const JITTER_SECS_MAX: u64 = 3600;

/// The cursor of a live response at `now_ms`, given the client's echoed cursor.
pub fn response_cursor(client_cursor: Option<&str>, now_ms: u64) -> u64 {
    let current = (now_ms / 1000).saturating_sub(CURSOR_EPOCH_SECS) / CURSOR_INTERVAL_SECS;
    match client_cursor.and_then(|text| text.parse::<u64>().ok()) {
        Some(echoed) if echoed >= current => echoed.saturating_add(jitter_intervals()),
        _ => current,
    }
}

/// A random jump of 1 to 3600 seconds, in whole intervals (at least one).
fn jitter_intervals() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0x5eed);
    let jitter_secs = 1 + hasher.finish() % JITTER_SECS_MAX;
    jitter_secs.div_ceil(CURSOR_INTERVAL_SECS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ds_engine::parse_rfc3339_ms;

    #[test]
    fn counts_intervals_from_the_cursor_epoch() {
        let epoch_ms = parse_rfc3339_ms("2024-10-09T00:00:00Z").unwrap() as u64;
        assert_eq!(epoch_ms, CURSOR_EPOCH_SECS * 1000);
        assert_eq!(response_cursor(None, epoch_ms), 0);
        assert_eq!(response_cursor(None, epoch_ms + 45_000), 2);
        assert_eq!(response_cursor(Some("garbage"), epoch_ms + 45_000), 2);
        assert_eq!(response_cursor(Some("1"), epoch_ms + 45_000), 2, "an old cursor gets the current one");
    }

    #[test]
    fn echoed_current_or_future_cursors_move_strictly_ahead() {
        let now_ms = (CURSOR_EPOCH_SECS + 2000) * 1000;
        let current = response_cursor(None, now_ms);
        for echoed in [current, current + 7] {
            for _ in 0..50 {
                let next = response_cursor(Some(&echoed.to_string()), now_ms);
                assert!(next > echoed && next <= echoed + JITTER_SECS_MAX / CURSOR_INTERVAL_SECS, "{next}");
            }
        }
    }
}
