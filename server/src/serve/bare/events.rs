//! Writing an SSE answer on the bare front from a task: every frame that is ready, then the
//! answer is left to be parked (`super::park`), or ends with its last chunk.
//!
//! A task writes when the answer starts (its head goes out with the first frame), when a
//! parked reader's socket was full (the rest of that frame first), and when the answer ends
//! (the last chunk, then the connection may carry another request). Frames are chunked as
//! hyper would (`reply::send_frame`); a write blocked for the stall timeout ends the
//! connection. Between frames the task spends its scheduler budget, so a reader far behind
//! does not starve the others on its thread.

use std::io::{self, IoSlice};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::net::TcpStream;

use super::reply::{self, Framing};
use crate::http::response::SliceBuf;
use crate::live::sse_reader::{SseReader, SseStream, Step, StepClock};

/// The chunk that ends a chunked body.
pub(super) const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// An SSE answer in progress on a bare connection.
pub(crate) struct Events {
    pub stream: Arc<SseStream>,
    pub reader: SseReader,
    /// The response head, until it is written.
    pub head: Option<Vec<u8>>,
    /// The rest of a chunk a parked reader's socket did not take.
    pub leftover: Option<Bytes>,
    /// The connection ends with the answer.
    pub close: bool,
}

/// Where a write left the answer.
pub(super) enum Written {
    /// The last chunk went out; `again`: the connection may carry another request.
    Ended { again: bool },
    /// Every frame ready went out (head and leftover included): the reader waits.
    CaughtUp(Events),
}

/// Writes `events` until it is caught up or ends.
pub(super) async fn write(socket: &TcpStream, mut events: Events, stall: Duration) -> io::Result<Written> {
    if let Some(rest) = events.leftover.take() {
        reply::write_all(socket, &mut [IoSlice::new(&rest)], stall).await?;
    }
    loop {
        let step = events.reader.step(&events.stream, StepClock::now());
        let head = events.head.take().unwrap_or_default();
        match step {
            Step::Frame(frame) => {
                let frame = SliceBuf::from(frame);
                Box::pin(reply::send_frame(socket, &head, frame, Framing::Chunked, stall)).await?;
            }
            Step::Nothing => {
                if !head.is_empty() {
                    reply::write_all(socket, &mut [IoSlice::new(&head)], stall).await?;
                }
                return Ok(Written::CaughtUp(events));
            }
            Step::End => {
                let mut last = [IoSlice::new(&head), IoSlice::new(LAST_CHUNK)];
                reply::write_all(socket, &mut last, stall).await?;
                return Ok(Written::Ended { again: !events.close });
            }
        }
        tokio::task::consume_budget().await;
    }
}
