//! `Stream-Cursor`: the interval number a live response belongs to.
//!
//! Time is cut into 20-second intervals counted from 2024-10-09T00:00:00Z; a live response
//! carries the current interval number, so caches keyed by cursor expire. When the client
//! echoes a cursor that is not behind the current interval, the answer jumps ahead by a
//! random 1 to 3600 seconds' worth of intervals: cursors never repeat or go back — also
//! past what a `u64` holds, where the echoed decimal is added to as text.

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

/// 2024-10-09T00:00:00Z, in seconds since the Unix epoch.
pub(crate) const CURSOR_EPOCH_SECS: u64 = 1_728_432_000;
/// Length of one cursor interval.
pub(crate) const CURSOR_INTERVAL_SECS: u64 = 20;
/// Largest random jump, in seconds.
const JITTER_SECS_MAX: u64 = 3600;

/// A cursor a live response carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Cursor {
    /// An interval number (every cursor ds makes from the clock).
    Interval(u64),
    /// The decimal digits of one past `u64::MAX`: an echoed cursor that large, moved on.
    Beyond(Arc<str>),
}

impl Cursor {
    /// The interval number, when it fits a `u64`.
    pub(crate) fn interval(&self) -> Option<u64> {
        match self {
            Cursor::Interval(interval) => Some(*interval),
            Cursor::Beyond(_) => None,
        }
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cursor::Interval(interval) => write!(f, "{interval}"),
            Cursor::Beyond(digits) => f.write_str(digits),
        }
    }
}

/// The cursor of a live response at `now_ms`, given the client's echoed cursor: the current
/// interval, or, for an echo not behind it, the echo plus a random jump.
pub(crate) fn response_cursor(client_cursor: Option<&str>, now_ms: u64) -> Cursor {
    let current = (now_ms / 1000).saturating_sub(CURSOR_EPOCH_SECS) / CURSOR_INTERVAL_SECS;
    let Some(digits) = client_cursor.and_then(decimal_digits) else {
        return Cursor::Interval(current);
    };
    let jump = jitter_intervals();
    match digits.parse::<u64>() {
        Ok(echoed) if echoed < current => Cursor::Interval(current),
        Ok(echoed) => match echoed.checked_add(jump) {
            Some(next) => Cursor::Interval(next),
            None => Cursor::Beyond(add_decimal(digits, jump).into()),
        },
        // More digits than a u64 holds: ahead of any interval.
        Err(_) => Cursor::Beyond(add_decimal(digits, jump).into()),
    }
}

/// The significant digits of a decimal cursor (`None`: not one, so it is ignored).
fn decimal_digits(text: &str) -> Option<&str> {
    if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let significant = text.trim_start_matches('0');
    Some(if significant.is_empty() { "0" } else { significant })
}

/// `digits` (a decimal number without leading zeros) plus `add`, as decimal text.
fn add_decimal(digits: &str, add: u64) -> String {
    let mut sum: Vec<u8> = Vec::with_capacity(digits.len() + 1);
    let mut carry = u128::from(add);
    for digit in digits.bytes().rev() {
        let total = carry + u128::from(digit - b'0');
        sum.push(b'0' + (total % 10) as u8);
        carry = total / 10;
    }
    while carry > 0 {
        sum.push(b'0' + (carry % 10) as u8);
        carry /= 10;
    }
    sum.reverse();
    String::from_utf8(sum).expect("ASCII digits")
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
        let at = |client, ms| response_cursor(client, ms);
        assert_eq!(at(None, epoch_ms), Cursor::Interval(0));
        assert_eq!(at(None, epoch_ms + 45_000), Cursor::Interval(2));
        assert_eq!(at(Some("garbage"), epoch_ms + 45_000), Cursor::Interval(2));
        assert_eq!(at(Some("-5"), epoch_ms + 45_000), Cursor::Interval(2), "not a decimal");
        assert_eq!(
            at(Some("1"), epoch_ms + 45_000),
            Cursor::Interval(2),
            "an old cursor gets the current one"
        );
        assert_eq!(at(Some("0001"), epoch_ms + 45_000), Cursor::Interval(2), "leading zeros");
    }

    #[test]
    fn echoed_current_or_future_cursors_move_strictly_ahead() {
        let now_ms = (CURSOR_EPOCH_SECS + 2000) * 1000;
        let current = response_cursor(None, now_ms).interval().unwrap();
        for echoed in [current, current + 7] {
            for _ in 0..50 {
                let next = response_cursor(Some(&echoed.to_string()), now_ms).interval().unwrap();
                assert!(next > echoed && next <= echoed + JITTER_SECS_MAX / CURSOR_INTERVAL_SECS, "{next}");
            }
        }
    }

    /// PROTOCOL.md §8.1: a cursor strictly greater than the client's, whatever its size.
    #[test]
    fn cursors_past_u64_still_move_strictly_ahead() {
        let now_ms = (CURSOR_EPOCH_SECS + 2000) * 1000;
        let max = u64::MAX.to_string();
        for echoed in [
            max.as_str(),
            "18446744073709551616",
            "99999999999999999999999999999999999999999",
            "000018446744073709551615",
        ] {
            for _ in 0..20 {
                let next = response_cursor(Some(echoed), now_ms);
                let Cursor::Beyond(text) = &next else { panic!("{echoed}: {next:?}") };
                let echoed = decimal_digits(echoed).unwrap();
                let longer = text.len() > echoed.len();
                assert!(longer || (text.len() == echoed.len() && **text > *echoed), "{text} after {echoed}");
                assert!(text.len() <= echoed.len() + 1 && text.bytes().all(|b| b.is_ascii_digit()), "{text}");
            }
        }
        assert_eq!(add_decimal("18446744073709551615", 1), "18446744073709551616");
        assert_eq!(add_decimal("999", 1), "1000");
        assert_eq!(add_decimal("0", 180), "180");
    }
}
