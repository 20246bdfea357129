//! The query parameters of a read: `offset`, `live` and `cursor`.
//!
//! Values are percent-decoded; unknown parameters are ignored; a repeated or empty `offset`
//! is refused, as is a repeated `live` or a `live` mode we do not serve.

use super::problem::Problem;

/// How a GET wants to be answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Live {
    /// Catch-up: answer with what is there.
    No,
    LongPoll,
    Sse,
}

/// The parameters of a read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReadQuery {
    /// The `offset` parameter exactly as given (after percent-decoding).
    pub offset: Option<String>,
    pub live: Live,
    pub cursor: Option<String>,
}

/// Longest query value we look at, in bytes.
const VALUE_BYTES_MAX: usize = 256;

impl ReadQuery {
    pub(crate) fn parse(query: Option<&str>) -> Result<ReadQuery, Problem> {
        let mut read = ReadQuery { offset: None, live: Live::No, cursor: None };
        let mut live_given = false;
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = || {
                decode(raw_value).filter(|v| v.len() <= VALUE_BYTES_MAX).ok_or_else(|| {
                    Problem::bad_request("invalid-query", format!("query parameter {key} is malformed"))
                })
            };
            match key {
                "offset" if read.offset.is_some() => {
                    return Err(Problem::bad_request("invalid-offset", "offset is given more than once"));
                }
                "offset" => read.offset = Some(value()?),
                "live" if live_given => {
                    return Err(Problem::bad_request("invalid-live", "live is given more than once"));
                }
                "live" => {
                    live_given = true;
                    read.live = match value()?.as_str() {
                        "long-poll" => Live::LongPoll,
                        "sse" => Live::Sse,
                        _ => {
                            return Err(Problem::bad_request("invalid-live", "live must be long-poll or sse"))
                        }
                    }
                }
                "cursor" => read.cursor = Some(value()?),
                _ => {}
            }
        }
        Ok(read)
    }
}

/// Percent-decodes a query value; `None` when an escape is malformed or the text not UTF-8.
fn decode(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = std::str::from_utf8(bytes.get(index + 1..index + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else {
            out.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_read_parameters() {
        let query = ReadQuery::parse(Some("offset=-1&live=long-poll&cursor=42&foo=bar")).unwrap();
        assert_eq!(
            query,
            ReadQuery { offset: Some("-1".into()), live: Live::LongPoll, cursor: Some("42".into()) }
        );
        assert_eq!(ReadQuery::parse(None).unwrap().offset, None);
        assert_eq!(ReadQuery::parse(Some("offset=0%201")).unwrap().offset.as_deref(), Some("0 1"));
        assert_eq!(ReadQuery::parse(Some("offset=")).unwrap().offset.as_deref(), Some(""));
    }

    #[test]
    fn refuses_ambiguous_or_unknown_modes() {
        assert!(ReadQuery::parse(Some("offset=a&offset=b")).is_err());
        assert!(ReadQuery::parse(Some("live=websocket")).is_err());
        assert!(ReadQuery::parse(Some("offset=%zz")).is_err());
        assert!(ReadQuery::parse(Some("offset=%ff")).is_err());
    }

    #[test]
    fn a_repeated_live_is_refused() {
        assert!(ReadQuery::parse(Some("offset=-1&live=long-poll&live=sse")).is_err());
        assert!(ReadQuery::parse(Some("live=sse&live=sse")).is_err());
        assert_eq!(ReadQuery::parse(Some("offset=-1&live=sse")).unwrap().live, Live::Sse);
    }
}
