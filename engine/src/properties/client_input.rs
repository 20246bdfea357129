//! Parsers of client input: offsets, headers, JSON bodies.

use bytes::Bytes;
use proptest::prelude::*;

use super::strategies::text;
use crate::content_type::ContentType;
use crate::offset::{Offset, StartAt};
use crate::payload::Payload;

/// Pieces JSON bodies are made of, valid and not.
const JSON_PIECES: &[&str] = &[
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    " ",
    "\n",
    "\"a\"",
    "\"\\ud800\"",
    "\"\\u00e9\"",
    "\"\\\"\"",
    "\"",
    "\\",
    "1",
    "-0.5e3",
    "1e999",
    "01",
    "true",
    "null",
    "nul",
    "[]",
    "{}",
    "\"k\":",
    "\u{0}",
    "\u{ff}",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn offsets_are_accepted_only_in_their_canonical_form(
        text in prop_oneof![
            text(40),
            // Near misses of the form: the right characters, about the right length.
            prop::collection::vec(prop::sample::select(b"0123456789abcdefABF_-".to_vec()), 31..36)
                .prop_map(|chars| String::from_utf8(chars).unwrap()),
        ],
        offset in (0u64..10_000_000_000_000_000, any::<u64>()),
    ) {
        if let Ok(parsed) = Offset::parse(&text) {
            let canonical = parsed.text();
            prop_assert_eq!(canonical.as_str(), text.as_str());
        }
        let _ = StartAt::parse(&text);
        let offset = Offset { messages: offset.0, bytes: offset.1 };
        let spelled = offset.text();
        prop_assert_eq!(Offset::parse(spelled.as_str()), Ok(offset));
    }

    #[test]
    fn header_parsers_never_panic(text in text(80)) {
        let _ = ContentType::parse(&text);
        let _ = crate::time::parse_rfc3339_ms(&text);
        let _ = crate::name::StreamName::from_path(&text);
    }

    #[test]
    fn every_message_of_an_accepted_json_body_is_json(
        pieces in prop::collection::vec(prop::sample::select(JSON_PIECES.to_vec()), 0..24),
        allow_empty in any::<bool>(),
    ) {
        let body = pieces.concat();
        if let Ok(payload) = Payload::json(Bytes::from(body.clone()), allow_empty) {
            let mut messages = 0;
            payload.for_each_message(|message, _| {
                messages += 1;
                assert!(is_json(message), "{body:?} stored {:?}", String::from_utf8_lossy(message));
            });
            prop_assert_eq!(messages, payload.message_count());
            prop_assert!(is_json(body.as_bytes()), "{body:?} was accepted");
        }
    }
}

/// Whether `bytes` are one JSON text. A number too large for a double (`1e999`) is JSON
/// all the same (the grammar has no range; serde_json refuses it, JavaScript reads it as
/// Infinity): it is stored as sent.
fn is_json(bytes: &[u8]) -> bool {
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(_) => true,
        Err(error) => error.to_string().starts_with("number out of range"),
    }
}
