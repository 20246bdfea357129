//! Stream names: what a client may call a stream.
//!
//! A name is the percent-decoded URL path after `/v1/stream/`. It may hold `/`-separated
//! segments (at most [`SEGMENTS_MAX`]) and at most [`NAME_BYTES_MAX`] bytes once decoded; no
//! segment may be empty, `.` or `..`, no byte may be a control character, the text must be
//! UTF-8, and a first segment of `__ds` is reserved for the service. Names are never used as
//! file names anywhere in the engine, so these rules are about clarity, not about safety of
//! the file system.

use std::fmt;

/// Longest decoded name, in bytes.
pub(crate) const NAME_BYTES_MAX: usize = 1024;
/// Most `/`-separated segments in one name.
pub(crate) const SEGMENTS_MAX: usize = 8;
/// First segment reserved for the service's own endpoints.
pub(crate) const RESERVED_SEGMENT: &str = "__ds";

/// A validated stream name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamName(Box<str>);

/// Why a path is not a stream name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameError {
    Empty,
    TooLong,
    TooManySegments,
    EmptySegment,
    DotSegment,
    Reserved,
    BadPercentEncoding,
    NotUtf8,
    ControlCharacter,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            NameError::Empty => "stream name is empty",
            NameError::TooLong => "stream name is longer than 1024 bytes",
            NameError::TooManySegments => "stream name has more than 8 segments",
            NameError::EmptySegment => "stream name has an empty segment",
            NameError::DotSegment => "stream name has a '.' or '..' segment",
            NameError::Reserved => "stream names starting with '__ds' are reserved",
            NameError::BadPercentEncoding => "stream name has an invalid percent escape",
            NameError::NotUtf8 => "stream name is not valid UTF-8",
            NameError::ControlCharacter => "stream name contains a control character",
        };
        f.write_str(text)
    }
}

impl std::error::Error for NameError {}

impl StreamName {
    /// Validates a name given as a raw (still percent-encoded) URL path suffix.
    pub fn from_path(raw: &str) -> Result<StreamName, NameError> {
        if !raw.contains('%') {
            return StreamName::new(raw);
        }
        let decoded = percent_decode(raw.as_bytes())?;
        let text = String::from_utf8(decoded).map_err(|_| NameError::NotUtf8)?;
        StreamName::new(text)
    }

    /// Validates an already decoded name.
    pub fn new(text: impl Into<String>) -> Result<StreamName, NameError> {
        let text = text.into();
        if text.is_empty() {
            return Err(NameError::Empty);
        }
        if text.len() > NAME_BYTES_MAX {
            return Err(NameError::TooLong);
        }
        if text.chars().any(char::is_control) {
            return Err(NameError::ControlCharacter);
        }
        let mut segments = 0;
        for segment in text.split('/') {
            segments += 1;
            if segments > SEGMENTS_MAX {
                return Err(NameError::TooManySegments);
            }
            match segment {
                "" => return Err(NameError::EmptySegment),
                "." | ".." => return Err(NameError::DotSegment),
                RESERVED_SEGMENT if segments == 1 => return Err(NameError::Reserved),
                _ => {}
            }
        }
        Ok(StreamName(text.into_boxed_str()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_boxed_str(self) -> Box<str> {
        self.0
    }
}

impl fmt::Display for StreamName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn percent_decode(raw: &[u8]) -> Result<Vec<u8>, NameError> {
    if raw.len() > NAME_BYTES_MAX * 3 {
        return Err(NameError::TooLong);
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut index = 0;
    while index < raw.len() {
        let byte = raw[index];
        if byte != b'%' {
            out.push(byte);
            index += 1;
            continue;
        }
        let high = raw.get(index + 1).and_then(|b| hex_value(*b));
        let low = raw.get(index + 2).and_then(|b| hex_value(*b));
        match (high, low) {
            (Some(high), Some(low)) => out.push(high << 4 | low),
            _ => return Err(NameError::BadPercentEncoding),
        }
        index += 3;
    }
    Ok(out)
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_and_nested_names() {
        for raw in ["orders", "a/b/c", "caf%C3%A9", "with%20space", "a%2Fb", "x.y", "..."] {
            assert!(StreamName::from_path(raw).is_ok(), "{raw}");
        }
        assert_eq!(StreamName::from_path("a%2Fb").unwrap().as_str(), "a/b");
        assert_eq!(StreamName::from_path("caf%C3%A9").unwrap().as_str(), "café");
        let eight = "a/b/c/d/e/f/g/h";
        assert!(StreamName::from_path(eight).is_ok());
        assert!(StreamName::new("x".repeat(NAME_BYTES_MAX)).is_ok());
    }

    #[test]
    fn rejects_bad_names() {
        let cases = [
            ("", NameError::Empty),
            ("a//b", NameError::EmptySegment),
            ("a/", NameError::EmptySegment),
            ("/a", NameError::EmptySegment),
            ("a/./b", NameError::DotSegment),
            ("..", NameError::DotSegment),
            ("a/%2E%2E", NameError::DotSegment),
            ("__ds", NameError::Reserved),
            ("__ds/subscriptions/x", NameError::Reserved),
            ("a/b/c/d/e/f/g/h/i", NameError::TooManySegments),
            ("bad%zz", NameError::BadPercentEncoding),
            ("bad%2", NameError::BadPercentEncoding),
            ("%ff%fe", NameError::NotUtf8),
            ("nul%00", NameError::ControlCharacter),
            ("line%0Abreak", NameError::ControlCharacter),
        ];
        for (raw, error) in cases {
            assert_eq!(StreamName::from_path(raw), Err(error), "{raw:?}");
        }
        assert_eq!(StreamName::new("x".repeat(NAME_BYTES_MAX + 1)), Err(NameError::TooLong));
        assert!(StreamName::new("a/__ds").is_ok(), "only the first segment is reserved");
    }
}
