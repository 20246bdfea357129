//! Wall-clock time: the engine's clock and RFC 3339 timestamps.
//!
//! Expiry is decided in wall-clock milliseconds since the Unix epoch (`Stream-Expires-At` is
//! absolute). The clock is injectable so expiry and producer pruning are tested without
//! sleeping. Timestamps are parsed and printed here, once, for the server and the tools.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// The engine's source of "now".
#[derive(Clone, Debug, Default)]
pub enum Clock {
    /// The system's wall clock.
    #[default]
    System,
    /// A clock that moves only when told to (tests).
    Manual(Arc<AtomicU64>),
}

impl Clock {
    /// A manual clock starting at `start_ms`.
    pub fn manual(start_ms: u64) -> Clock {
        Clock::Manual(Arc::new(AtomicU64::new(start_ms)))
    }

    /// Milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> u64 {
        match self {
            Clock::System => SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
            Clock::Manual(now) => now.load(Ordering::Acquire),
        }
    }

    /// Moves a manual clock forward; a system clock ignores this.
    pub fn advance_ms(&self, delta_ms: u64) {
        if let Clock::Manual(now) = self {
            now.fetch_add(delta_ms, Ordering::AcqRel);
        }
    }
}

/// Parses an RFC 3339 timestamp into milliseconds since the Unix epoch.
///
/// Accepts `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` (`T`/`Z` in either case); fractions
/// beyond milliseconds are truncated. Returns `None` for anything else.
pub fn parse_rfc3339_ms(text: &str) -> Option<i64> {
    let raw = text.as_bytes();
    if raw.len() < 20 || raw.len() > 64 {
        return None;
    }
    let year = digits(raw, 0, 4)?;
    let month = digits(raw, 5, 2)?;
    let day = digits(raw, 8, 2)?;
    let hour = digits(raw, 11, 2)?;
    let minute = digits(raw, 14, 2)?;
    let second = digits(raw, 17, 2)?;
    let separators_ok = raw[4] == b'-'
        && raw[7] == b'-'
        && matches!(raw[10], b'T' | b't')
        && raw[13] == b':'
        && raw[16] == b':';
    if !separators_ok || !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let (millis, rest) = fraction_ms(&raw[19..])?;
    let zone_minutes = zone_offset_minutes(rest)?;
    let days = days_from_civil(year as i64, month, day);
    let seconds = days * 86_400 + i64::from(hour * 3600 + minute * 60 + second.min(59));
    Some((seconds - i64::from(zone_minutes) * 60) * 1000 + i64::from(millis))
}

/// Prints milliseconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn format_rfc3339_ms(ms: i64) -> String {
    let seconds = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = seconds.div_euclid(86_400);
    let second_of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    )
}

fn digits(raw: &[u8], at: usize, count: usize) -> Option<u32> {
    let mut value = 0u32;
    for &digit in raw.get(at..at + count)? {
        if !digit.is_ascii_digit() {
            return None;
        }
        value = value * 10 + u32::from(digit - b'0');
    }
    Some(value)
}

/// Parses an optional `.digits` fraction; returns milliseconds and the rest of the text.
fn fraction_ms(raw: &[u8]) -> Option<(u32, &[u8])> {
    let Some(after_dot) = raw.strip_prefix(b".") else {
        return Some((0, raw));
    };
    let count = after_dot.iter().take_while(|b| b.is_ascii_digit()).count();
    if count == 0 {
        return None;
    }
    let mut millis = 0u32;
    for index in 0..3 {
        let digit = after_dot.get(index).filter(|_| index < count).map_or(0, |d| d - b'0');
        millis = millis * 10 + u32::from(digit);
    }
    Some((millis, &after_dot[count..]))
}

fn zone_offset_minutes(raw: &[u8]) -> Option<i32> {
    match raw {
        b"Z" | b"z" => Some(0),
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let hours = digits(raw, 1, 2)? as i32;
            let minutes = digits(raw, 4, 2)? as i32;
            if hours > 23 || minutes > 59 {
                return None;
            }
            let total = hours * 60 + minutes;
            Some(if *sign == b'-' { -total } else { total })
        }
        _ => None,
    }
}

fn is_leap(year: u32) -> bool {
    year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400))
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (i64::from(month) + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date of a day count since 1970-01-01 (inverse of [`days_from_civil`]).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 { month_from_march + 3 } else { month_from_march - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_utc_and_offsets() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:01.5Z"), Some(1500));
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00.123456Z"), Some(123));
        assert_eq!(parse_rfc3339_ms("2024-01-01T00:00:00.000Z"), Some(1_704_067_200_000));
        assert_eq!(parse_rfc3339_ms("2024-01-01T01:00:00+01:00"), Some(1_704_067_200_000));
        assert_eq!(parse_rfc3339_ms("2023-12-31T23:30:00-00:30"), Some(1_704_067_200_000));
        assert_eq!(parse_rfc3339_ms("2024-02-29t12:00:00z"), Some(1_709_208_000_000));
        assert_eq!(parse_rfc3339_ms("1969-12-31T23:59:59Z"), Some(-1000));
    }

    #[test]
    fn rejects_malformed_timestamps() {
        for bad in [
            "not-a-timestamp",
            "2024-01-01",
            "2024-01-01T00:00:00",
            "2024-13-01T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-01-32T00:00:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01T00:60:00Z",
            "2024-01-01T00:00:00.Z",
            "2024-01-01T00:00:00+0100",
            "2024-01-01T00:00:00+24:00",
            "20240101T000000Z",
            "2024-01-01 00:00:00Z",
            "2024-01-01T00:00:00Zjunk",
        ] {
            assert_eq!(parse_rfc3339_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn formats_and_round_trips() {
        assert_eq!(format_rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_rfc3339_ms(1_709_208_000_123), "2024-02-29T12:00:00.123Z");
        assert_eq!(format_rfc3339_ms(-1), "1969-12-31T23:59:59.999Z");
        for ms in [0, 951_782_400_000, 4_102_444_799_999, 1_234_567_890_123] {
            assert_eq!(parse_rfc3339_ms(&format_rfc3339_ms(ms)), Some(ms));
        }
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = Clock::manual(1000);
        assert_eq!(clock.now_ms(), 1000);
        clock.advance_ms(500);
        assert_eq!(clock.now_ms(), 1500);
        assert!(Clock::System.now_ms() > 1_700_000_000_000);
    }
}
