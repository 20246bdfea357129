//! An incremental parser of server-sent events (as far as Durable Streams uses them).
//!
//! Bytes arrive in arbitrary pieces; [`SseParser::push`] returns every event completed by
//! the new bytes. Lines end at LF, CR or CRLF; `data:` lines of one event join with `\n`;
//! one optional space after the colon is dropped, as the SSE specification says.

/// One event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Event {
    pub event: String,
    pub data: String,
    pub id: Option<String>,
}

/// Most bytes of an unfinished line kept before the stream is considered broken.
pub const LINE_BYTES_MAX: usize = 16 << 20;

#[derive(Default)]
pub struct SseParser {
    line: Vec<u8>,
    current: Event,
    has_data: bool,
    after_cr: bool,
}

impl SseParser {
    /// Feeds bytes; returns the events they complete. Errors when a line grows past
    /// [`LINE_BYTES_MAX`].
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<Event>, String> {
        let mut events = Vec::new();
        for &byte in bytes {
            if self.after_cr {
                self.after_cr = false;
                if byte == b'\n' {
                    continue;
                }
            }
            match byte {
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(event) = self.end_line(&line) {
                        events.push(event);
                    }
                }
                _ => {
                    if self.line.len() >= LINE_BYTES_MAX {
                        return Err("an SSE line is longer than 16 MiB".into());
                    }
                    self.line.push(byte);
                }
            }
        }
        Ok(events)
    }

    fn end_line(&mut self, line: &[u8]) -> Option<Event> {
        if line.is_empty() {
            let finished = std::mem::take(&mut self.current);
            let had_data = std::mem::replace(&mut self.has_data, false);
            return had_data.then_some(finished);
        }
        let text = String::from_utf8_lossy(line);
        let (field, value) = match text.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (text.as_ref(), ""),
        };
        match field {
            "event" => self.current.event = value.to_string(),
            "data" => {
                if self.has_data {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(value);
                self.has_data = true;
            }
            "id" => self.current.id = Some(value.to_string()),
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_events_split_anywhere() {
        let stream =
            b"event: data\ndata:line1\ndata: line2\nid:7\n\nevent: control\r\ndata:{\"a\":1}\r\n\r\n";
        for split in 0..stream.len() {
            let mut parser = SseParser::default();
            let mut events = parser.push(&stream[..split]).unwrap();
            events.extend(parser.push(&stream[split..]).unwrap());
            assert_eq!(events.len(), 2, "split at {split}");
            assert_eq!(
                events[0],
                Event { event: "data".into(), data: "line1\nline2".into(), id: Some("7".into()) }
            );
            assert_eq!(events[1].data, "{\"a\":1}");
        }
    }

    #[test]
    fn comments_and_empty_events_are_skipped() {
        let mut parser = SseParser::default();
        let events = parser.push(b": keep-alive\n\nevent: x\n\ndata:\n\n").unwrap();
        assert_eq!(events, vec![Event { event: String::new(), data: String::new(), id: None }]);
    }

    #[test]
    fn cr_only_line_endings_work() {
        let mut parser = SseParser::default();
        let events = parser.push(b"event: data\rdata:a\r\r").unwrap();
        assert_eq!(events[0].data, "a");
    }
}
