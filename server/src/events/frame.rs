//! What an SSE reader at a position sends next: one frame of events, formatted once.
//!
//! [`FrameSource::next_frame`] turns the messages after a position into data and control events (at
//! most [`FRAME_STORED_BYTES_MAX`] stored bytes), or into the control event that reports
//! catching up or the closing. Message frames are offered to the stream's [`FrameCache`]
//! (shared by its readers in the server, `crate::per_stream`), so readers at the same
//! position with the same format and cursor share one formatting: with a thousand SSE
//! subscribers on one stream, one formats and the rest copy a pointer.
//! Leaves only: the callers decide what to do with a frame.

use crate::http::cursor::Cursor;
use std::sync::Mutex;

use bytes::{Bytes, BytesMut};
use ds_engine::{Offset, StreamHandle};

use super::event::{write_control, write_message, ControlState, EventFormat, SseEncoding};

/// Most stored message bytes formatted into one frame.
pub(crate) const FRAME_STORED_BYTES_MAX: usize = 64 * 1024;

/// Events for a reader, covering the messages up to `to`.
#[derive(Clone, Debug)]
pub(crate) struct Frame {
    pub bytes: Bytes,
    /// Where the reader stands after the frame (its start, for a control-only frame).
    pub to: Offset,
    /// The frame ends with the closing control event: nothing follows it.
    pub closes: bool,
}

/// What a reader at some position has to send.
#[derive(Clone, Debug)]
pub(crate) enum Next {
    Frame(Frame),
    /// Nothing new (the reader was already told it is up to date).
    Nothing,
    /// The stream is gone.
    Gone,
    /// The stored data at the reader's position is damaged.
    Damaged,
}

/// The last message frame one of a stream's readers formatted, for the others.
#[derive(Default)]
pub(crate) struct FrameCache {
    last: Mutex<Option<CachedFrame>>,
}

/// A formatted frame covering messages `from..to`, for readers at `from` using `key`.
#[derive(Clone, Debug)]
struct CachedFrame {
    key: u64,
    from: Offset,
    to: Offset,
    bytes: Bytes,
    /// The frame ends with the stream's closing: nothing follows it.
    last: bool,
}

impl FrameCache {
    /// The frame another reader formatted for position `from` under `key`, if there is one.
    fn get(&self, key: u64, from: Offset) -> Option<CachedFrame> {
        let last = self.last.lock().expect("frame cache lock");
        last.as_ref().filter(|frame| frame.key == key && frame.from == from).cloned()
    }

    fn offer(&self, frame: CachedFrame) {
        *self.last.lock().expect("frame cache lock") = Some(frame);
    }
}

/// Who is asking: the stream, what its readers share, and the reader's view of it.
pub(crate) struct FrameSource<'a> {
    pub handle: &'a StreamHandle,
    pub frames: &'a FrameCache,
    pub format: EventFormat,
    pub cursor: Cursor,
}

impl FrameSource<'_> {
    /// The frame for a reader at `from`; `told_up_to_date`: it already had a control event
    /// saying so (no bare one is repeated).
    pub(crate) fn next_frame(&self, from: Offset, told_up_to_date: bool) -> Next {
        let key = frame_key(self.format, &self.cursor);
        if let Some(shared) = key.and_then(|key| self.frames.get(key, from)) {
            return Next::Frame(Frame { bytes: shared.bytes, to: shared.to, closes: shared.last });
        }
        let read = match self.handle.read_messages(from, FRAME_STORED_BYTES_MAX) {
            Ok(Some(read)) => read,
            // The stream is gone.
            Ok(None) => return Next::Gone,
            // Damage (or an I/O error, or the impossible: the offset stopped being a boundary).
            Err(_) => return Next::Damaged,
        };
        let mut out = BytesMut::new();
        let Some(last) = read.messages.last().map(|m| m.next) else {
            if !read.closed && told_up_to_date {
                return Next::Nothing;
            }
            let state = ControlState { cursor: &self.cursor, up_to_date: true, closed: read.closed };
            write_control(&mut out, from, state);
            return Next::Frame(Frame { bytes: out.freeze(), to: from, closes: read.closed });
        };
        for message in &read.messages {
            let at_tail = read.up_to_date_at(message.next);
            let state =
                ControlState { cursor: &self.cursor, up_to_date: at_tail, closed: at_tail && read.closed };
            write_message(&mut out, self.format, &message.payload(self.format.json), message.next, state);
        }
        let bytes = out.freeze();
        let closes = read.closed && read.up_to_date_at(last);
        if let Some(key) = key {
            self.frames.offer(CachedFrame { key, from, to: last, bytes: bytes.clone(), last: closes });
        }
        Next::Frame(Frame { bytes, to: last, closes })
    }
}

/// Frames are shared between readers with the same format and cursor (`None`: a cursor
/// past the intervals, shared with nobody).
fn frame_key(format: EventFormat, cursor: &Cursor) -> Option<u64> {
    let interval = cursor.interval().filter(|interval| interval >> 62 == 0)?;
    Some(interval << 2 | u64::from(format.encoding == SseEncoding::Base64) << 1 | u64::from(format.json))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_shared_by_key_and_position() {
        let cache = FrameCache::default();
        let to = Offset { messages: 1, bytes: 2 };
        cache.offer(CachedFrame {
            key: 9,
            from: Offset::ZERO,
            to,
            bytes: Bytes::from_static(b"ev"),
            last: false,
        });
        assert_eq!(cache.get(9, Offset::ZERO).unwrap().to, to);
        assert!(cache.get(8, Offset::ZERO).is_none(), "another format");
        assert!(cache.get(9, to).is_none(), "another position");
    }

    #[test]
    fn keys_tell_formats_and_cursors_apart() {
        let text = EventFormat { encoding: SseEncoding::Text, json: false };
        let json = EventFormat { encoding: SseEncoding::Text, json: true };
        let binary = EventFormat { encoding: SseEncoding::Base64, json: false };
        let key = |format, interval| frame_key(format, &Cursor::Interval(interval)).unwrap();
        let keys = [key(text, 5), key(json, 5), key(binary, 5), key(text, 6)];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(frame_key(text, &Cursor::Beyond("18446744073709551616".into())), None);
        assert_eq!(frame_key(text, &Cursor::Interval(1 << 62)), None, "its key would lose bits");
    }
}
