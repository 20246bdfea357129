//! Stream offsets and the read start positions a client may ask for.
//!
//! An offset names a message boundary of one stream: the number of messages before it and the
//! number of stored bytes before it. Its text form is fixed width —
//! `CCCCCCCCCCCCCCCC_BBBBBBBBBBBBBBBB`, the message count in 16 decimal digits and the byte count
//! in 16 lowercase hexadecimal digits — so offsets of one stream sort as strings. This module
//! owns parsing and formatting only; whether an offset is a boundary of a given stream is the
//! stream's business (`stream::read`).

use std::fmt;

/// Largest message count that fits the 16 decimal digits of the text form.
pub(crate) const MESSAGES_MAX: u64 = 9_999_999_999_999_999;

/// A position between messages of one stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Offset {
    /// Messages stored before this position.
    pub messages: u64,
    /// Stored bytes before this position.
    pub bytes: u64,
}

/// Why a text is not an offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffsetError {
    /// Not 16 digits, `_`, 16 lowercase hex digits.
    Malformed,
}

impl fmt::Display for OffsetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("offset must be 16 decimal digits, '_', 16 lowercase hex digits, or -1 or now")
    }
}

impl std::error::Error for OffsetError {}

/// Length of the text form of every offset.
pub(crate) const OFFSET_TEXT_LEN: usize = 33;

impl Offset {
    /// The position of an empty stream.
    pub const ZERO: Offset = Offset { messages: 0, bytes: 0 };

    /// Parses the strict text form; anything else (sentinels included) is an error.
    pub fn parse(text: &str) -> Result<Offset, OffsetError> {
        let raw = text.as_bytes();
        if raw.len() != OFFSET_TEXT_LEN || raw[16] != b'_' {
            return Err(OffsetError::Malformed);
        }
        let mut messages: u64 = 0;
        for &digit in &raw[..16] {
            if !digit.is_ascii_digit() {
                return Err(OffsetError::Malformed);
            }
            messages = messages * 10 + u64::from(digit - b'0');
        }
        let mut bytes: u64 = 0;
        for &digit in &raw[17..] {
            let value = match digit {
                b'0'..=b'9' => digit - b'0',
                b'a'..=b'f' => digit - b'a' + 10,
                _ => return Err(OffsetError::Malformed),
            };
            bytes = (bytes << 4) | u64::from(value);
        }
        Ok(Offset { messages, bytes })
    }

    /// The offset after `messages` more messages holding `bytes` more stored bytes.
    pub fn advance(self, messages: u64, bytes: u64) -> Offset {
        let next = Offset { messages: self.messages + messages, bytes: self.bytes + bytes };
        debug_assert!(next.messages <= MESSAGES_MAX, "message count overflows the offset text");
        next
    }

    /// The fixed-width text form, without allocating.
    pub fn text(&self) -> OffsetText {
        let mut out = [0u8; OFFSET_TEXT_LEN];
        let mut messages = self.messages;
        for slot in out[..16].iter_mut().rev() {
            *slot = b'0' + (messages % 10) as u8;
            messages /= 10;
        }
        out[16] = b'_';
        let mut bytes = self.bytes;
        for slot in out[17..].iter_mut().rev() {
            *slot = b"0123456789abcdef"[(bytes & 0xf) as usize];
            bytes >>= 4;
        }
        OffsetText(out)
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text().as_str())
    }
}

/// The text of one offset, kept on the stack.
#[derive(Clone, Copy)]
pub struct OffsetText([u8; OFFSET_TEXT_LEN]);

impl OffsetText {
    pub fn as_str(&self) -> &str {
        // Only ASCII digits, hex letters and '_' are ever written.
        std::str::from_utf8(&self.0).expect("offset text is ASCII")
    }
}

/// Where a read starts, as the `offset` query parameter names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartAt {
    /// `-1`: the first message.
    Beginning,
    /// `now`: the tail at the time of the read.
    Tail,
    /// A concrete offset; it must be a message boundary of the stream.
    At(Offset),
}

impl StartAt {
    /// Parses the value of an `offset` query parameter.
    pub fn parse(text: &str) -> Result<StartAt, OffsetError> {
        match text {
            "-1" => Ok(StartAt::Beginning),
            "now" => Ok(StartAt::Tail),
            _ => Offset::parse(text).map(StartAt::At),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips_and_sorts() {
        let offsets = [
            Offset::ZERO,
            Offset { messages: 1, bytes: 5 },
            Offset { messages: 12, bytes: 0xabc },
            Offset { messages: MESSAGES_MAX, bytes: u64::MAX },
        ];
        for pair in offsets.windows(2) {
            assert!(pair[0].text().as_str() < pair[1].text().as_str());
        }
        for offset in offsets {
            assert_eq!(Offset::parse(offset.text().as_str()), Ok(offset));
        }
        assert_eq!(Offset::ZERO.to_string(), "0000000000000000_0000000000000000");
        assert_eq!(Offset { messages: 3, bytes: 255 }.to_string(), "0000000000000003_00000000000000ff");
    }

    #[test]
    fn rejects_every_other_spelling() {
        let bad = [
            "",
            "0",
            "-1",
            "now",
            "0000000000000000-0000000000000000",
            "0000000000000000_000000000000000",
            "0000000000000000_00000000000000000",
            "000000000000000a_0000000000000000",
            "0000000000000000_000000000000000A",
            "0000000000000000_000000000000000g",
            " 000000000000000_0000000000000000",
            "0000000000000000_0000000000000000\n",
            "+000000000000000_0000000000000000",
            "0,1",
            "../0000000000000_0000000000000000",
        ];
        for text in bad {
            assert_eq!(Offset::parse(text), Err(OffsetError::Malformed), "{text:?}");
        }
    }

    #[test]
    fn start_positions() {
        assert_eq!(StartAt::parse("-1"), Ok(StartAt::Beginning));
        assert_eq!(StartAt::parse("now"), Ok(StartAt::Tail));
        assert_eq!(
            StartAt::parse("0000000000000002_0000000000000010"),
            Ok(StartAt::At(Offset { messages: 2, bytes: 16 }))
        );
        assert!(StartAt::parse("NOW").is_err());
        assert!(StartAt::parse("-2").is_err());
    }
}
