//! The SSE wire format of data and control events.
//!
//! A data event carries one message: `event: data`, then the payload as `data:` lines (text
//! split at every CR, LF or CRLF so a payload can never end an event or inject one; JSON
//! messages wrapped in `[...]`; binary payloads as one line of base64), then `id:` with the
//! offset after the message, so a reconnecting `EventSource` resumes by itself. Every data
//! event is followed by a control event with the same offset.
//!
//! What a standard parser (EventSource, the public TS client) rebuilds is the payload: each
//! `data:` line loses one leading space, so a line that starts with a space gets one more
//! (`data:  x` for ` x`), and the lines are joined with LF, so empty lines survive. The one
//! thing text events cannot carry is a line break other than LF: the SSE format reads CR
//! and CRLF as LF. Streams whose bytes must come back exactly with CRs in them use a
//! binary content type (base64 events) or catch-up reads.

use crate::http::cursor::Cursor;
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bytes::BytesMut;
use ds_engine::{ContentType, Offset};

/// How SSE data events carry a stream's payloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SseEncoding {
    /// UTF-8 text, one `data:` line per payload line (`text/*` and JSON streams).
    Text,
    /// Base64 of the payload bytes (every other content type).
    Base64,
}

/// How a stream's messages become data events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EventFormat {
    pub encoding: SseEncoding,
    /// JSON mode: each message is wrapped in a JSON array.
    pub json: bool,
}

impl EventFormat {
    /// The format of a stream of `content_type`.
    pub(crate) fn of(content_type: &ContentType) -> EventFormat {
        let text = content_type.is_json() || content_type.media_type().starts_with("text/");
        let encoding = if text { SseEncoding::Text } else { SseEncoding::Base64 };
        EventFormat { encoding, json: content_type.is_json() }
    }
}

/// What a control event says besides the offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ControlState<'a> {
    /// The interval cursor (omitted once the stream is closed).
    pub cursor: &'a Cursor,
    pub up_to_date: bool,
    /// The stream is closed and everything was sent: the last event.
    pub closed: bool,
}

/// Appends the data event of one message and the control event that follows it.
pub(crate) fn write_message(
    out: &mut BytesMut,
    format: EventFormat,
    payload: &[u8],
    next: Offset,
    state: ControlState,
) {
    let id = next.text();
    write_data_with_id(out, format, payload, id.as_str());
    write_control_with_id(out, id.as_str(), state);
}

fn write_data_with_id(out: &mut BytesMut, format: EventFormat, payload: &[u8], id: &str) {
    out.extend_from_slice(b"event: data\n");
    match format.encoding {
        SseEncoding::Base64 => {
            out.extend_from_slice(b"data:");
            let start = out.len();
            let length = base64::encoded_len(payload.len(), true).expect("payload sizes are bounded");
            out.resize(start + length, 0);
            STANDARD.encode_slice(payload, &mut out[start..]).expect("buffer sized by encoded_len");
        }
        SseEncoding::Text if format.json => {
            out.extend_from_slice(b"data:[");
            write_lines(out, payload);
            out.extend_from_slice(b"]");
        }
        SseEncoding::Text => {
            data_prefix(out, payload);
            write_lines(out, payload);
        }
    }
    out.extend_from_slice(b"\nid:");
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(b"\n\n");
}

/// Appends a control event for the position `next`.
pub(crate) fn write_control(out: &mut BytesMut, next: Offset, state: ControlState) {
    write_control_with_id(out, next.text().as_str(), state);
}

fn write_control_with_id(out: &mut BytesMut, id: &str, state: ControlState) {
    out.extend_from_slice(b"event: control\ndata:{\"streamNextOffset\":\"");
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(b"\"");
    if !state.closed {
        out.extend_from_slice(b",\"streamCursor\":\"");
        match state.cursor {
            Cursor::Interval(interval) => out.extend_from_slice(itoa_u64(*interval).as_bytes()),
            Cursor::Beyond(digits) => out.extend_from_slice(digits.as_bytes()),
        }
        out.extend_from_slice(b"\"");
    }
    if state.up_to_date || state.closed {
        out.extend_from_slice(b",\"upToDate\":true");
    }
    if state.closed {
        out.extend_from_slice(b",\"streamClosed\":true");
    }
    out.extend_from_slice(b"}\nid:");
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(b"\n\n");
}

/// A number in decimal, without allocating.
fn itoa_u64(mut value: u64) -> DecimalText {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    DecimalText { digits, start }
}

struct DecimalText {
    digits: [u8; 20],
    start: usize,
}

impl DecimalText {
    fn as_bytes(&self) -> &[u8] {
        &self.digits[self.start..]
    }
}

/// Copies text after an open `data:` line, turning every line break (CRLF, CR or LF) into a
/// new `data:` line.
fn write_lines(out: &mut BytesMut, text: &[u8]) {
    let mut rest = text;
    while let Some(index) = rest.iter().position(|b| *b == b'\n' || *b == b'\r') {
        out.extend_from_slice(&rest[..index]);
        out.extend_from_slice(b"\n");
        let skip = if rest[index] == b'\r' && rest.get(index + 1) == Some(&b'\n') { 2 } else { 1 };
        rest = &rest[index + skip..];
        data_prefix(out, rest);
    }
    out.extend_from_slice(rest);
}

/// Opens a `data:` line for a line starting with `line`: a parser strips one leading space,
/// so a line that starts with one gets another.
fn data_prefix(out: &mut BytesMut, line: &[u8]) {
    match line.first() {
        Some(b' ') => out.extend_from_slice(b"data: "),
        _ => out.extend_from_slice(b"data:"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_json_streams_are_text_the_rest_base64() {
        let format = |spelled| EventFormat::of(&ContentType::parse(spelled).unwrap());
        assert_eq!(format("text/csv").encoding, SseEncoding::Text);
        assert_eq!(format("APPLICATION/JSON"), EventFormat { encoding: SseEncoding::Text, json: true });
        assert_eq!(format("application/octet-stream").encoding, SseEncoding::Base64);
        assert_eq!(format("image/png").encoding, SseEncoding::Base64);
    }

    const NEXT: Offset = Offset { messages: 1, bytes: 5 };
    const TEXT: EventFormat = EventFormat { encoding: SseEncoding::Text, json: false };

    fn data(format: EventFormat, payload: &[u8]) -> String {
        let mut out = BytesMut::new();
        write_data_with_id(&mut out, format, payload, NEXT.text().as_str());
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn text_lines_become_data_lines_and_cannot_inject_events() {
        assert_eq!(data(TEXT, b"hello"), "event: data\ndata:hello\nid:0000000000000001_0000000000000005\n\n");
        let attack = b"safe\r\n\r\nevent: control\rdata: {\"injected\":true}\n\nend";
        let event = data(TEXT, attack);
        assert_eq!(event.matches("\n\n").count(), 1, "only the real end of event: {event:?}");
        assert!(event.starts_with(
            "event: data\ndata:safe\ndata:\ndata:event: control\ndata:data: {\"injected\":true}\ndata:\ndata:end\n"
        ));
    }

    /// What an EventSource makes of one event's lines (the WHATWG parsing rules).
    fn event_source_data(event: &str) -> String {
        let lines: Vec<&str> = event.split('\n').filter_map(|line| line.strip_prefix("data:")).collect();
        lines.iter().map(|line| line.strip_prefix(' ').unwrap_or(line)).collect::<Vec<_>>().join("\n")
    }

    #[test]
    fn standard_parsers_get_every_line_back_exactly() {
        for payload in [" two", "  two", "a\n b\n\n  c ", "\n", "\n\n", " ", "", "x\n ", "tab\tend"] {
            assert_eq!(event_source_data(&data(TEXT, payload.as_bytes())), payload, "{payload:?}");
        }
        let json = EventFormat { encoding: SseEncoding::Text, json: true };
        let text = "{\n  \"a\": \" x\"\n}";
        assert_eq!(event_source_data(&data(json, text.as_bytes())), format!("[{text}]"));
        // CR and CRLF are line breaks to every SSE parser: they come back as LF.
        assert_eq!(event_source_data(&data(TEXT, b"a\r\nb\rc")), "a\nb\nc");
    }

    #[test]
    fn json_is_wrapped_and_binary_is_base64() {
        let json = EventFormat { encoding: SseEncoding::Text, json: true };
        assert!(data(json, b"{\"id\":1}").contains("data:[{\"id\":1}]\n"));
        assert!(data(json, b"{\n \"a\": 1\n}").contains("data:[{\ndata:  \"a\": 1\ndata:}]\n"));
        let binary = EventFormat { encoding: SseEncoding::Base64, json: false };
        assert!(data(binary, b"Hello").contains("data:SGVsbG8=\n"));
        assert!(data(binary, &[0, b'\n', b'\r', 0xff]).contains("data:AAoN/w==\n"));
    }

    #[test]
    fn control_events_carry_offset_cursor_and_flags() {
        let mut out = BytesMut::new();
        write_control(
            &mut out,
            NEXT,
            ControlState { cursor: &Cursor::Interval(42), up_to_date: true, closed: false },
        );
        let text = String::from_utf8(out.to_vec()).unwrap();
        assert_eq!(
            text,
            "event: control\ndata:{\"streamNextOffset\":\"0000000000000001_0000000000000005\",\"streamCursor\":\"42\",\"upToDate\":true}\nid:0000000000000001_0000000000000005\n\n"
        );
        let mut out = BytesMut::new();
        write_control(
            &mut out,
            NEXT,
            ControlState { cursor: &Cursor::Interval(42), up_to_date: false, closed: true },
        );
        let text = String::from_utf8(out.to_vec()).unwrap();
        let data_line = text.lines().find(|l| l.starts_with("data:")).unwrap();
        let value: serde_json::Value = serde_json::from_str(&data_line[5..]).unwrap();
        assert_eq!(value["streamClosed"], true);
        assert!(value.get("streamCursor").is_none());
    }
}
