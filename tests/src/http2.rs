//! A small HTTP/2 client for black-box tests (the `h2` crate on tokio): one connection, many
//! requests on it at once, bodies read whole or frame by frame (SSE).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use h2::RecvStream;
use tokio::io::{AsyncRead, AsyncWrite};

/// HTTP/2's initial flow-control window of an answer (RFC 9113 §6.9.2).
const DEFAULT_WINDOW_BYTES: u32 = 65_535;
/// How long any single wait for the server may take.
const WAIT: Duration = Duration::from_secs(30);

/// One HTTP/2 connection.
pub struct Http2 {
    send: SendRequest<Bytes>,
    /// `scheme://host:port` of the requests' URIs.
    origin: String,
    /// The server's `SETTINGS_MAX_CONCURRENT_STREAMS`, once its settings arrived.
    streams_max: Arc<AtomicUsize>,
    /// Whether the connection has ended (closed by either side).
    ended: Arc<AtomicBool>,
}

/// A complete answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// An answer whose body is read as it comes.
pub struct Streaming {
    pub status: u16,
    pub headers: http::HeaderMap,
    body: RecvStream,
    pub text: String,
}

impl Streaming {
    /// Reads until the body holds `needle` (or ends, or `WAIT` passes); the text so far.
    pub async fn read_until(&mut self, needle: &str) -> &str {
        while !self.text.contains(needle) {
            let Ok(Some(Ok(data))) = tokio::time::timeout(WAIT, self.body.data()).await else { break };
            let _ = self.body.flow_control().release_capacity(data.len());
            self.text.push_str(&String::from_utf8_lossy(&data));
        }
        &self.text
    }
}

impl Http2 {
    /// The HTTP/2 handshake over `io` (prior knowledge, or after ALPN `h2`); `origin` names
    /// the server in request URIs.
    pub async fn connect<T>(io: T, origin: &str) -> Result<Http2, h2::Error>
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        Http2::connect_with_window(io, origin, DEFAULT_WINDOW_BYTES).await
    }

    /// As [`Http2::connect`], granting each answer `window` bytes before the client takes
    /// any (`SETTINGS_INITIAL_WINDOW_SIZE`).
    pub async fn connect_with_window<T>(io: T, origin: &str, window: u32) -> Result<Http2, h2::Error>
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (send, mut connection) =
            h2::client::Builder::new().initial_window_size(window).handshake(io).await?;
        let streams_max = Arc::new(AtomicUsize::new(0));
        let ended = Arc::new(AtomicBool::new(false));
        let (seen, over) = (Arc::clone(&streams_max), Arc::clone(&ended));
        tokio::spawn(std::future::poll_fn(move |cx| {
            let polled = Pin::new(&mut connection).poll(cx);
            seen.store(connection.max_concurrent_send_streams(), Ordering::Relaxed);
            polled.map(|_| over.store(true, Ordering::Relaxed))
        }));
        Ok(Http2 { send, origin: origin.to_string(), streams_max, ended })
    }

    /// Whether the connection has ended.
    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::Relaxed)
    }

    /// The server's limit on requests open at once, as its settings said (0 before they came).
    pub fn streams_max(&self) -> usize {
        self.streams_max.load(Ordering::Relaxed)
    }

    /// Sends a request and reads its whole answer.
    pub async fn send(&mut self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
        self.open(method, path, headers, body).await.whole().await
    }

    /// Sends a request and returns once its answer's head arrived.
    pub async fn start(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Streaming {
        self.open(method, path, headers, body).await.head().await
    }

    /// Sends a request (its body in one DATA frame, no `content-length`) without waiting
    /// for its answer.
    pub async fn open(&mut self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Pending {
        let mut request = http::Request::builder().method(method).uri(format!("{}{path}", self.origin));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(()).expect("a valid request");
        let send = &mut self.send;
        tokio::time::timeout(WAIT, std::future::poll_fn(|cx| send.poll_ready(cx)))
            .await
            .expect("room for a request in time")
            .expect("the connection takes requests");
        let (answer, mut body_out) = self.send.send_request(request, body.is_empty()).expect("request sent");
        if !body.is_empty() {
            body_out.send_data(Bytes::copy_from_slice(body), true).expect("body sent");
        }
        Pending(answer)
    }
}

/// A request sent, its answer not yet read.
pub struct Pending(h2::client::ResponseFuture);

impl Pending {
    /// Waits for the answer's head.
    pub async fn head(self) -> Streaming {
        let answer = tokio::time::timeout(WAIT, self.0).await.expect("an answer in time").expect("an answer");
        let (parts, body) = answer.into_parts();
        Streaming { status: parts.status.as_u16(), headers: parts.headers, body, text: String::new() }
    }

    /// Waits for the whole answer.
    pub async fn whole(self) -> Answer {
        let mut streaming = self.head().await;
        let mut whole = Vec::new();
        while let Some(data) =
            tokio::time::timeout(WAIT, streaming.body.data()).await.expect("a body in time")
        {
            let data = data.expect("body data");
            let _ = streaming.body.flow_control().release_capacity(data.len());
            whole.extend_from_slice(&data);
        }
        Answer { status: streaming.status, headers: streaming.headers, body: whole }
    }
}
