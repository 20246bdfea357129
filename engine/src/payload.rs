//! The bytes one append (or create) stores, and where its messages begin and end.
//!
//! A plain stream stores each request body as one message. A JSON stream stores each message
//! as its exact JSON text followed by `,` (never re-serialized: key order, number spelling and
//! big integers survive); a top-level array in the body is flattened one level. The stored
//! form makes a read of any message range `[` + bytes without the last comma + `]`.
//!
//! Validation and framing run on the HTTP front's threads before the op reaches a shard;
//! [`Payload`] keeps the request body as received and records message spans into it, so the
//! shard copies each payload byte exactly once, into the stream's storage.

use bytes::Bytes;
use serde_json::value::RawValue;

/// Most messages one JSON append may carry.
pub(crate) const MESSAGES_PER_APPEND_MAX: usize = 100_000;

/// Deepest a JSON message may nest arrays and objects. A read wraps its messages in one more
/// array, so every read stays within the 127 levels that strict parsers take at their
/// defaults (serde_json refuses the 128th; Python's recursive parser fails near 1,000): one
/// writer's message cannot make a stream unreadable to them. The reference server refuses
/// a body nested 128 deep, as ds does (a body that is an array holds messages one level
/// less deep than itself).
pub(crate) const MESSAGE_DEPTH_MAX: usize = 126;

/// The body of one append with its message framing.
#[derive(Clone, Debug)]
pub struct Payload {
    body: Bytes,
    framing: Framing,
}

#[derive(Clone, Debug)]
enum Framing {
    /// The whole body is one message stored as is.
    Whole,
    /// JSON messages: spans of exact JSON text in the body; each is stored followed by `,`.
    Json(Vec<Span>),
}

/// A message's text inside the request body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    start: u32,
    len: u32,
}

/// Why a JSON body cannot be appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JsonError {
    Invalid,
    EmptyArray,
    TooManyMessages,
    TooLarge,
    TooDeep,
}

impl std::fmt::Display for JsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            JsonError::Invalid => "body is not valid JSON",
            JsonError::EmptyArray => "an empty JSON array appends nothing",
            JsonError::TooManyMessages => "more than 100000 messages in one append",
            JsonError::TooLarge => "JSON body is larger than 4 GiB",
            JsonError::TooDeep => "a JSON message nests arrays and objects more than 126 deep",
        })
    }
}

impl std::error::Error for JsonError {}

impl Payload {
    /// A plain body: one message, stored as received.
    pub fn raw(body: Bytes) -> Payload {
        Payload { body, framing: Framing::Whole }
    }

    /// A JSON body: validated, a top-level array flattened one level.
    ///
    /// `allow_empty_array` is true for the initial body of a create, where `[]` means
    /// "no initial messages"; an append of `[]` is an error.
    pub fn json(body: Bytes, allow_empty_array: bool) -> Result<Payload, JsonError> {
        if body.len() > u32::MAX as usize {
            return Err(JsonError::TooLarge);
        }
        let spans = json_spans(&body)?;
        if spans.is_empty() && !allow_empty_array {
            return Err(JsonError::EmptyArray);
        }
        Ok(Payload { body, framing: Framing::Json(spans) })
    }

    /// Messages this payload stores.
    pub fn message_count(&self) -> u64 {
        match &self.framing {
            Framing::Whole => u64::from(!self.body.is_empty()),
            Framing::Json(spans) => spans.len() as u64,
        }
    }

    /// Bytes this payload adds to the stream.
    pub fn stored_len(&self) -> u64 {
        match &self.framing {
            Framing::Whole => self.body.len() as u64,
            Framing::Json(spans) => spans.iter().map(|s| u64::from(s.len) + 1).sum(),
        }
    }

    /// The body, when it is stored as received (one plain message).
    pub fn as_whole(&self) -> Option<&Bytes> {
        match self.framing {
            Framing::Whole => Some(&self.body),
            Framing::Json(_) => None,
        }
    }

    /// Whether the payload holds JSON messages.
    pub fn is_json(&self) -> bool {
        matches!(self.framing, Framing::Json(_))
    }

    /// Whether nothing would be stored.
    pub fn is_empty(&self) -> bool {
        self.message_count() == 0
    }

    /// Calls `message` with the stored bytes of each message, in order. The pieces of one
    /// message are passed as (text, separator): JSON messages get `b","`, plain ones `b""`.
    pub fn for_each_message(&self, mut message: impl FnMut(&[u8], &'static [u8])) {
        match &self.framing {
            Framing::Whole => {
                if !self.body.is_empty() {
                    message(&self.body, b"");
                }
            }
            Framing::Json(spans) => {
                for span in spans {
                    let start = span.start as usize;
                    message(&self.body[start..start + span.len as usize], b",");
                }
            }
        }
    }

    /// The stored form as one contiguous buffer (tests and tools; the write path streams).
    pub fn stored_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.stored_len() as usize);
        self.for_each_message(|text, separator| {
            out.extend_from_slice(text);
            out.extend_from_slice(separator);
        });
        out
    }
}

/// Where each message of stored JSON data ends (just after its `,`).
///
/// Stored JSON is `m1,m2,…,mk,` with every `mi` valid JSON, so the messages end at the
/// commas outside strings and at nesting depth zero.
pub(crate) fn stored_json_message_ends(stored: &[u8]) -> Vec<usize> {
    let mut ends = Vec::new();
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (index, byte) in stored.iter().enumerate() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => depth += 1,
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' if depth == 0 => ends.push(index + 1),
            _ => {}
        }
    }
    ends
}

fn json_spans(body: &[u8]) -> Result<Vec<Span>, JsonError> {
    let value: &RawValue = serde_json::from_slice(body).map_err(|_| JsonError::Invalid)?;
    let text = value.get();
    let is_array = text.starts_with('[');
    let scan = scan_text(text.as_bytes());
    if scan.lone_surrogate {
        return Err(JsonError::Invalid);
    }
    if scan.depth_max - usize::from(is_array) > MESSAGE_DEPTH_MAX {
        return Err(JsonError::TooDeep);
    }
    if !is_array {
        return Ok(vec![span_of(body, text)]);
    }
    let elements: Vec<&RawValue> = serde_json::from_str(text).map_err(|_| JsonError::Invalid)?;
    if elements.len() > MESSAGES_PER_APPEND_MAX {
        return Err(JsonError::TooManyMessages);
    }
    Ok(elements.iter().map(|element| span_of(body, element.get())).collect())
}

/// What one pass over well-formed JSON text finds that a JSON parser lets through.
#[derive(Debug, Default, PartialEq, Eq)]
struct TextScan {
    /// Deepest nesting of arrays and objects (a scalar is 0, `[1]` is 1).
    depth_max: usize,
    /// A `\u` escape names half of a surrogate pair without the other half: text no strict
    /// parser accepts, and no UTF-8.
    lone_surrogate: bool,
}

/// Scans the (well-formed) JSON `text` for its nesting depth and for lone surrogates.
fn scan_text(text: &[u8]) -> TextScan {
    let unit = |at: usize| {
        let hex = text.get(at..at + 4)?;
        u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
    };
    let mut scan = TextScan::default();
    let (mut index, mut in_string, mut depth) = (0, false, 0usize);
    while index < text.len() {
        match (text[index], in_string) {
            (b'"', _) => in_string = !in_string,
            (b'[' | b'{', false) => {
                depth += 1;
                scan.depth_max = scan.depth_max.max(depth);
            }
            (b']' | b'}', false) => depth = depth.saturating_sub(1),
            (b'\\', true) if text.get(index + 1) == Some(&b'u') => {
                let Some(first) = unit(index + 2) else {
                    scan.lone_surrogate = true;
                    return scan;
                };
                index += 5;
                let lone = match first {
                    0xDC00..=0xDFFF => true,
                    0xD800..=0xDBFF => {
                        let pair = text.get(index + 1..index + 3) == Some(b"\\u");
                        index += 6;
                        !pair || !unit(index - 3).is_some_and(|second| (0xDC00..=0xDFFF).contains(&second))
                    }
                    _ => false,
                };
                if lone {
                    scan.lone_surrogate = true;
                    return scan;
                }
            }
            (b'\\', true) => index += 1,
            _ => {}
        }
        index += 1;
    }
    debug_assert!(depth == 0, "well-formed JSON closes what it opens");
    scan
}

/// The position of `part` (a sub-slice of `whole`) inside `whole`.
fn span_of(whole: &[u8], part: &str) -> Span {
    let start = part.as_ptr() as usize - whole.as_ptr() as usize;
    debug_assert!(start + part.len() <= whole.len(), "span lies inside the body");
    Span { start: start as u32, len: part.len() as u32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(body: &str, allow_empty: bool) -> Result<(String, u64), JsonError> {
        let payload = Payload::json(Bytes::copy_from_slice(body.as_bytes()), allow_empty)?;
        let text = String::from_utf8(payload.stored_bytes()).unwrap();
        assert_eq!(text.len() as u64, payload.stored_len());
        Ok((text, payload.message_count()))
    }

    #[test]
    fn single_values_keep_their_exact_text() {
        assert_eq!(stored(r#" {"b":1, "a" : 2} "#, false), Ok((r#"{"b":1, "a" : 2},"#.into(), 1)));
        assert_eq!(stored("12345678901234567890123", false), Ok(("12345678901234567890123,".into(), 1)));
        assert_eq!(stored("1.50e3", false), Ok(("1.50e3,".into(), 1)));
        assert_eq!(stored(r#""a,\"b""#, false), Ok((r#""a,\"b","#.into(), 1)));
        assert_eq!(stored("null", false), Ok(("null,".into(), 1)));
    }

    #[test]
    fn arrays_flatten_one_level() {
        assert_eq!(stored(r#"[{"a":1}, {"b":2}]"#, false), Ok((r#"{"a":1},{"b":2},"#.into(), 2)));
        assert_eq!(stored("[[1,2], [3,4]]", false), Ok(("[1,2],[3,4],".into(), 2)));
        assert_eq!(stored("[[[1,2,3]]]", false), Ok(("[[1,2,3]],".into(), 1)));
        assert_eq!(stored("[ \"x\" ,\n 2 ]", false), Ok(("\"x\",2,".into(), 2)));
    }

    #[test]
    fn empty_arrays_only_on_create() {
        assert_eq!(stored("[]", false), Err(JsonError::EmptyArray));
        assert_eq!(stored(" [ ] ", true), Ok((String::new(), 0)));
    }

    #[test]
    fn invalid_json_is_rejected() {
        for bad in ["", "{ invalid json }", "[1,]", "1 2", "{\"a\":}", "[", "tru", "\u{feff}1"] {
            assert_eq!(stored(bad, false), Err(JsonError::Invalid), "{bad:?}");
        }
    }

    #[test]
    fn message_count_is_bounded() {
        let many = format!("[{}0]", "0,".repeat(MESSAGES_PER_APPEND_MAX));
        assert_eq!(stored(&many, false), Err(JsonError::TooManyMessages));
    }

    #[test]
    fn stored_json_splits_at_top_level_commas_only() {
        let payload =
            Payload::json(Bytes::from_static(br#"[{"a":[1,2]},"x,\"y\"",[[3,4],5],null]"#), false).unwrap();
        let stored = payload.stored_bytes();
        let ends = stored_json_message_ends(&stored);
        let messages: Vec<&str> = ends
            .iter()
            .scan(0, |start, end| {
                let message = std::str::from_utf8(&stored[*start..*end]).unwrap();
                *start = *end;
                Some(message)
            })
            .collect();
        assert_eq!(messages, [r#"{"a":[1,2]},"#, r#""x,\"y\"","#, "[[3,4],5],", "null,"]);
        assert_eq!(stored_json_message_ends(b""), Vec::<usize>::new());
    }

    #[test]
    fn raw_payloads_are_one_message() {
        let payload = Payload::raw(Bytes::from_static(b"a,b\n"));
        assert_eq!(payload.message_count(), 1);
        assert_eq!(payload.stored_len(), 4);
        assert_eq!(payload.stored_bytes(), b"a,b\n");
        assert!(Payload::raw(Bytes::new()).is_empty());
    }

    #[test]
    fn messages_nest_at_most_the_depth_limit() {
        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let deepest = nested(MESSAGE_DEPTH_MAX);
        assert_eq!(stored(&deepest, false).map(|(_, count)| count), Ok(1), "one message at the limit");
        assert_eq!(stored(&format!("[{deepest},1]"), false).map(|(_, count)| count), Ok(2));
        assert_eq!(stored(&nested(MESSAGE_DEPTH_MAX + 1), false).map(|(_, count)| count), Ok(1), "flattened");
        assert_eq!(stored(&format!("[1,{{\"a\":{deepest}}}]"), false).err(), Some(JsonError::TooDeep));
        assert_eq!(stored(&format!("{{\"a\":{deepest}}}"), false).err(), Some(JsonError::TooDeep));
        assert_eq!(stored(&nested(MESSAGE_DEPTH_MAX + 2), false).err(), Some(JsonError::TooDeep));
        assert_eq!(stored(&nested(100_000), false).err(), Some(JsonError::TooDeep));
        let brackets_in_a_string = format!("[\"{}\\\"{}\"]", "[".repeat(500), "{".repeat(500));
        assert!(stored(&brackets_in_a_string, false).is_ok(), "brackets inside strings do not nest");
        assert_eq!(
            scan_text(br#"{"a":[1,{"b":[]}],"c":"]]]"}"#),
            TextScan { depth_max: 4, lone_surrogate: false }
        );
        assert_eq!(scan_text(b"12"), TextScan::default());
    }

    #[test]
    fn lone_surrogates_are_refused_and_pairs_kept() {
        for bad in [r#""\ud800""#, r#"["\udc00"]"#, r#"{"a":"x\ud83dy"}"#, r#""\ud83d\u0041""#, r#""\uDFFF""#]
        {
            assert_eq!(stored(bad, false).err(), Some(JsonError::Invalid), "{bad}");
        }
        for good in [r#""\ud83d\ude00""#, r#""\u00e9 \\ud800""#, r#"{"\ud83d\ude00":1}"#, r#""\\\"\u0041""#] {
            assert!(stored(good, false).is_ok(), "{good}");
        }
    }
}
