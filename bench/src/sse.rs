//! An incremental parser of server-sent events (as far as Durable Streams uses them).
//!
//! Bytes arrive in arbitrary pieces; [`SseParser::push_each`] hands every event completed
//! by the new bytes to a callback (the parser's own buffers are reused, so a steady stream
//! of events allocates nothing), and [`SseParser::push`] collects them. Lines end at LF, CR
//! or CRLF; `data:` lines of one event join with `\n`; one optional space after the colon is
//! dropped, as the SSE specification says.

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
    /// The start of a line whose end has not arrived yet.
    line: Vec<u8>,
    current: Event,
    has_data: bool,
    /// The last byte seen was a CR: an LF right after it ends no further line.
    after_cr: bool,
}

impl SseParser {
    /// Feeds bytes; returns the events they complete. Errors when a line grows past
    /// [`LINE_BYTES_MAX`].
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<Event>, String> {
        let mut events = Vec::new();
        self.push_each(bytes, |event| events.push(event.clone()))?;
        Ok(events)
    }

    /// Feeds bytes; calls `on_event` with each event they complete.
    pub fn push_each(&mut self, bytes: &[u8], mut on_event: impl FnMut(&Event)) -> Result<(), String> {
        let mut rest = bytes;
        if std::mem::take(&mut self.after_cr) && rest.first() == Some(&b'\n') {
            rest = &rest[1..];
        }
        while let Some(index) = rest.iter().position(|b| *b == b'\n' || *b == b'\r') {
            let crlf = rest[index] == b'\r' && rest.get(index + 1) == Some(&b'\n');
            self.after_cr = rest[index] == b'\r' && index + 1 == rest.len();
            if self.line.is_empty() {
                self.end_line(&rest[..index], &mut on_event);
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(&rest[..index]);
                self.end_line(&line, &mut on_event);
                line.clear();
                self.line = line;
            }
            rest = &rest[index + if crlf { 2 } else { 1 }..];
        }
        if self.line.len() + rest.len() > LINE_BYTES_MAX {
            return Err("an SSE line is longer than 16 MiB".into());
        }
        self.line.extend_from_slice(rest);
        Ok(())
    }

    fn end_line(&mut self, line: &[u8], on_event: &mut impl FnMut(&Event)) {
        if line.is_empty() {
            if std::mem::replace(&mut self.has_data, false) {
                on_event(&self.current);
            }
            self.current.event.clear();
            self.current.data.clear();
            self.current.id = None;
            return;
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        let value = String::from_utf8_lossy(value);
        match field {
            b"event" => {
                self.current.event.clear();
                self.current.event.push_str(&value);
            }
            b"data" => {
                if self.has_data {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(&value);
                self.has_data = true;
            }
            b"id" => self.current.id = Some(value.into_owned()),
            _ => {}
        }
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
    fn a_crlf_split_between_pushes_ends_one_line() {
        let mut parser = SseParser::default();
        let mut events = parser.push(b"data:a\r").unwrap();
        events.extend(parser.push(b"\ndata:b\r").unwrap());
        events.extend(parser.push(b"\n\r\n").unwrap());
        assert_eq!(events, vec![Event { event: String::new(), data: "a\nb".into(), id: None }]);
    }

    #[test]
    fn events_after_the_first_start_fresh() {
        let mut parser = SseParser::default();
        let events = parser.push(b"event: data\ndata:1\nid:x\n\ndata:2\n\n").unwrap();
        assert_eq!(events[1], Event { event: String::new(), data: "2".into(), id: None });
    }

    #[test]
    fn cr_only_line_endings_work() {
        let mut parser = SseParser::default();
        let events = parser.push(b"event: data\rdata:a\r\r").unwrap();
        assert_eq!(events[0].data, "a");
    }
}
