//! Stream content types: validation, comparison and the behaviours they select.
//!
//! A stream keeps the content type it was created with, spelled as the client spelled it.
//! Two content types are the same when their media types match case-insensitively and their
//! parameters match once `charset` is ignored (parameter names are case-insensitive, values
//! are compared as written, unquoted). `application/json` selects JSON mode; `text/*` and
//! JSON travel over SSE as text, everything else as base64.

use std::cell::RefCell;
use std::sync::Arc;

/// Content types remembered per thread, so the same header value is parsed (and allocated)
/// once rather than on every request.
const RECENT_PER_THREAD_MAX: usize = 8;

thread_local! {
    static RECENT: RefCell<Vec<ContentType>> = const { RefCell::new(Vec::new()) };
}

/// The default content type of a stream created without one.
pub(crate) const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";
/// Longest accepted content type header, in bytes.
pub(crate) const CONTENT_TYPE_BYTES_MAX: usize = 256;

/// A validated content type: one pointer, to spellings that every stream and request using
/// them shares (a stream carries one in its configuration).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContentType {
    spellings: Arc<Spellings>,
}

#[derive(Debug, PartialEq, Eq)]
struct Spellings {
    /// As the client wrote it (trimmed).
    spelled: Box<str>,
    /// Comparison key: lowercase media type, then sorted non-charset parameters (`None`:
    /// the spelling itself).
    key: Option<Box<str>>,
}

/// Why a header value is not a content type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContentTypeError {
    Empty,
    TooLong,
    Malformed,
}

impl std::fmt::Display for ContentTypeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ContentTypeError::Empty => "Content-Type is empty",
            ContentTypeError::TooLong => "Content-Type is longer than 256 bytes",
            ContentTypeError::Malformed => "Content-Type is not a media type (type/subtype)",
        })
    }
}

impl std::error::Error for ContentTypeError {}

impl ContentType {
    /// Validates a header value.
    pub fn parse(value: &str) -> Result<ContentType, ContentTypeError> {
        let spelled = value.trim();
        let recent =
            RECENT.with_borrow(|recent| recent.iter().find(|known| known.as_str() == spelled).cloned());
        if let Some(known) = recent {
            return Ok(known);
        }
        let parsed = ContentType::parse_new(spelled)?;
        RECENT.with_borrow_mut(|recent| {
            if recent.len() == RECENT_PER_THREAD_MAX {
                recent.remove(0);
            }
            recent.push(parsed.clone());
        });
        Ok(parsed)
    }

    fn parse_new(spelled: &str) -> Result<ContentType, ContentTypeError> {
        if spelled.is_empty() {
            return Err(ContentTypeError::Empty);
        }
        if spelled.len() > CONTENT_TYPE_BYTES_MAX {
            return Err(ContentTypeError::TooLong);
        }
        let key = comparison_key(spelled).ok_or(ContentTypeError::Malformed)?;
        let key = (key != spelled).then(|| key.into_boxed_str());
        Ok(ContentType { spellings: Arc::new(Spellings { spelled: spelled.into(), key }) })
    }

    /// `application/octet-stream`.
    pub fn default_type() -> ContentType {
        ContentType::parse(DEFAULT_CONTENT_TYPE).expect("default content type is valid")
    }

    /// The content type as the client spelled it.
    pub fn as_str(&self) -> &str {
        &self.spellings.spelled
    }

    /// The comparison key (lowercase media type and sorted non-charset parameters).
    pub fn key(&self) -> &str {
        self.spellings.key.as_deref().unwrap_or(&self.spellings.spelled)
    }

    /// Whether two content types name the same stream type.
    pub fn matches(&self, other: &ContentType) -> bool {
        self.key() == other.key()
    }

    /// The lowercase `type/subtype`.
    pub fn media_type(&self) -> &str {
        self.key().split(';').next().unwrap_or_default()
    }

    /// Whether the stream is in JSON mode.
    pub fn is_json(&self) -> bool {
        self.media_type() == "application/json"
    }

    /// Shares the strings of an equal content type (so many streams hold one allocation).
    pub fn share_with(&mut self, other: &ContentType) {
        if self == other {
            self.spellings = Arc::clone(&other.spellings);
        }
    }
}

fn comparison_key(spelled: &str) -> Option<String> {
    let mut parts = spelled.split(';');
    let essence = parts.next()?.trim();
    let (kind, subtype) = essence.split_once('/')?;
    if !is_token(kind) || !is_token(subtype) {
        return None;
    }
    let mut parameters = Vec::new();
    for part in parts {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let (name, value) = part.split_once('=')?;
        let name = name.trim().to_ascii_lowercase();
        if !is_token(&name) {
            return None;
        }
        if name == "charset" {
            continue;
        }
        let value = value.trim();
        let value = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(value);
        parameters.push(format!("{name}={value}"));
    }
    parameters.sort();
    let mut key = essence.to_ascii_lowercase();
    for parameter in parameters {
        key.push(';');
        key.push_str(&parameter);
    }
    Some(key)
}

/// RFC 9110 token characters.
fn is_token(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> ContentType {
        ContentType::parse(text).unwrap()
    }

    #[test]
    fn compares_case_insensitively_ignoring_charset() {
        assert!(parse("text/plain").matches(&parse("TEXT/PLAIN")));
        assert!(parse("application/json").matches(&parse("application/json; charset=utf-8")));
        assert!(parse("text/plain; charset=utf-8; a=1").matches(&parse("Text/Plain;A=1")));
        assert!(parse("text/plain; a=1; b=2").matches(&parse("text/plain; b=2; a=1")));
        assert!(!parse("text/plain").matches(&parse("application/json")));
        assert!(!parse("text/plain; a=1").matches(&parse("text/plain")));
        assert!(!parse("text/plain; a=x").matches(&parse("text/plain; a=X")));
        assert_eq!(parse("  TEXT/Plain ").as_str(), "TEXT/Plain");
    }

    #[test]
    fn selects_modes() {
        assert!(parse("application/json; charset=utf-8").is_json());
        assert!(!parse("application/ndjson").is_json());
    }

    #[test]
    fn repeated_values_share_one_parse() {
        let first = parse("application/x-repeated");
        let second = parse(" application/x-repeated ");
        assert!(Arc::ptr_eq(&first.spellings, &second.spellings));
        assert!(first.spellings.key.is_none(), "an already normal spelling is its own key");
        assert_eq!(parse("Text/Plain").key(), "text/plain");
        for index in 0..RECENT_PER_THREAD_MAX * 2 {
            parse(&format!("application/x-{index}"));
        }
        assert!(parse("application/x-repeated").matches(&first), "evicted values parse again");
    }

    #[test]
    fn rejects_invalid_values() {
        assert_eq!(ContentType::parse(""), Err(ContentTypeError::Empty));
        assert_eq!(ContentType::parse("   "), Err(ContentTypeError::Empty));
        for bad in ["text", "text/", "/plain", "te xt/plain", "text/plain; =x", "text/plain; a"] {
            assert_eq!(ContentType::parse(bad), Err(ContentTypeError::Malformed), "{bad}");
        }
        let long = format!("text/{}", "x".repeat(CONTENT_TYPE_BYTES_MAX));
        assert_eq!(ContentType::parse(&long), Err(ContentTypeError::TooLong));
    }
}
