//! A small blocking HTTP/1.1 client for black-box tests.
//!
//! Each request uses its own connection (`Connection: close`), so a test can send exactly
//! the bytes it wants, including malformed ones ([`Client::raw`]). Bodies are read by
//! `Content-Length`, chunked encoding or until the server closes. [`StreamingResponse`]
//! reads a chunked body piece by piece, for SSE.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// How long any single read may block.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug)]
pub struct Client {
    addr: SocketAddr,
}

/// A complete response.
#[derive(Clone, Debug)]
pub struct Response {
    pub status: u16,
    /// Header names in lowercase, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.text()))
    }

    /// `Stream-Next-Offset`, which every successful stream response carries.
    pub fn next_offset(&self) -> String {
        self.header("stream-next-offset").expect("Stream-Next-Offset").to_string()
    }
}

impl Client {
    pub fn new(addr: SocketAddr) -> Client {
        Client { addr }
    }

    pub fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
        self.try_send(method, path, headers, body).unwrap_or_else(|e| panic!("{method} {path} failed: {e}"))
    }

    /// Like [`Client::send`], but a connection that fails or ends early is an error (for
    /// tests that kill the server under load).
    pub fn try_send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<Response> {
        let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n", self.addr);
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        if !body.is_empty() || matches!(method, "POST" | "PUT") {
            request.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        request.push_str("\r\n");
        let mut bytes = request.into_bytes();
        bytes.extend_from_slice(body);
        self.try_raw(&bytes, method == "HEAD")
    }

    /// Sends `bytes` as they are and reads one response.
    pub fn raw(&self, bytes: &[u8], head_request: bool) -> Response {
        self.try_raw(bytes, head_request).unwrap_or_else(|e| panic!("request failed: {e}"))
    }

    /// [`Client::try_send`] with owned header pairs.
    pub fn try_send_owned(
        &self,
        method: &str,
        path: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> io::Result<Response> {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        self.try_send(method, path, &headers, body)
    }

    fn try_raw(&self, bytes: &[u8], head_request: bool) -> io::Result<Response> {
        let mut stream = TcpStream::connect(self.addr)?;
        stream.set_read_timeout(Some(READ_TIMEOUT))?;
        stream.write_all(bytes)?;
        read_response(&mut BufReader::new(stream), head_request)
    }

    pub fn get(&self, path: &str) -> Response {
        self.send("GET", path, &[], b"")
    }

    pub fn head(&self, path: &str) -> Response {
        self.send("HEAD", path, &[], b"")
    }

    pub fn delete(&self, path: &str) -> Response {
        self.send("DELETE", path, &[], b"")
    }

    pub fn put(&self, path: &str, content_type: &str, body: &[u8]) -> Response {
        self.send("PUT", path, &[("Content-Type", content_type)], body)
    }

    pub fn post(&self, path: &str, content_type: &str, body: &[u8]) -> Response {
        self.send("POST", path, &[("Content-Type", content_type)], body)
    }

    /// Starts a GET whose body is read later, piece by piece (SSE).
    pub fn open_stream(&self, path: &str, headers: &[(&str, &str)]) -> StreamingResponse {
        let mut stream = self.connect();
        let mut request = format!("GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n", self.addr);
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        stream.write_all(request.as_bytes()).expect("send request");
        let mut reader = BufReader::new(stream);
        let (status, headers) = read_head(&mut reader).expect("response head");
        let chunked =
            header_of(&headers, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
        StreamingResponse {
            status,
            headers,
            reader,
            chunked,
            received: Vec::new(),
            ended: false,
            ended_cleanly: false,
        }
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(self.addr).expect("connect to ds-server");
        stream.set_read_timeout(Some(READ_TIMEOUT)).expect("set read timeout");
        stream
    }
}

/// A response whose body is still arriving.
pub struct StreamingResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    reader: BufReader<TcpStream>,
    chunked: bool,
    received: Vec<u8>,
    ended: bool,
    /// The body ended with its terminating chunk (not by the connection closing).
    ended_cleanly: bool,
}

impl StreamingResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        header_of(&self.headers, name)
    }

    /// Reads until the received text contains `needle` or `timeout` passes; returns all text
    /// received so far.
    pub fn read_until(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        while !self.text().contains(needle) && !self.ended && Instant::now() < deadline {
            let remaining = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
            self.reader.get_ref().set_read_timeout(Some(remaining)).expect("set read timeout");
            self.read_some();
        }
        self.text()
    }

    /// Reads until the server ends the body (or `timeout` passes); true if it ended.
    pub fn read_to_end(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.ended && Instant::now() < deadline {
            let remaining = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
            self.reader.get_ref().set_read_timeout(Some(remaining)).expect("set read timeout");
            self.read_some();
        }
        self.ended
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.received).into_owned()
    }

    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Whether a chunked body ended with its terminating chunk.
    pub fn ended_cleanly(&self) -> bool {
        self.ended_cleanly
    }

    fn read_some(&mut self) {
        if self.chunked {
            let mut size_line = String::new();
            match self.reader.read_line(&mut size_line) {
                Ok(0) => self.ended = true,
                Ok(_) => {
                    let size = usize::from_str_radix(size_line.trim(), 16).expect("chunk size");
                    if size == 0 {
                        self.ended = true;
                        let mut last_line = String::new();
                        self.ended_cleanly =
                            self.reader.read_line(&mut last_line).is_ok() && last_line == "\r\n";
                        return;
                    }
                    let mut chunk = vec![0; size + 2];
                    if self.reader.read_exact(&mut chunk).is_err() {
                        // Cut mid-chunk (the server closed): what arrived of it is dropped.
                        self.ended = true;
                        return;
                    }
                    assert_eq!(&chunk[size..], b"\r\n", "chunk data must end with CRLF");
                    self.received.extend_from_slice(&chunk[..size]);
                }
                Err(e) if is_timeout(&e) => {}
                Err(_) => self.ended = true,
            }
        } else {
            let mut buffer = [0u8; 8192];
            match self.reader.read(&mut buffer) {
                Ok(0) => self.ended = true,
                Ok(read) => self.received.extend_from_slice(&buffer[..read]),
                Err(e) if is_timeout(&e) => {}
                Err(_) => self.ended = true,
            }
        }
    }
}

fn is_timeout(error: &std::io::Error) -> bool {
    matches!(error.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
}

fn header_of<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
}

/// Reads one response from any byte stream (plain TCP here, TLS in the TLS tests).
pub fn read_response(reader: &mut impl BufRead, head_request: bool) -> io::Result<Response> {
    let (status, headers) = read_head(reader)?;
    let no_body = head_request || status == 204 || status == 304 || (100..200).contains(&status);
    let body = if no_body { Vec::new() } else { read_body(reader, &headers)? };
    Ok(Response { status, headers, body })
}

fn malformed(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

fn read_head(reader: &mut impl BufRead) -> io::Result<(u16, Vec<(String, String)>)> {
    let mut status_line = String::new();
    reader.read_line(&mut status_line)?;
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| malformed(format!("malformed status line {status_line:?}")))?;
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Err(malformed("the head ended early".into()));
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').ok_or_else(|| malformed(format!("header line {line:?}")))?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    Ok((status, headers))
}

fn read_body(reader: &mut impl BufRead, headers: &[(String, String)]) -> io::Result<Vec<u8>> {
    if let Some(length) = header_of(headers, "content-length") {
        let length = length.parse().map_err(|_| malformed(format!("content length {length:?}")))?;
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        return Ok(body);
    }
    let mut body = Vec::new();
    if header_of(headers, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size_line = String::new();
            reader.read_line(&mut size_line)?;
            let size = usize::from_str_radix(size_line.trim(), 16)
                .map_err(|_| malformed(format!("chunk size {size_line:?}")))?;
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk)?;
            if size == 0 {
                return Ok(body);
            }
            body.extend_from_slice(&chunk[..size]);
        }
    }
    reader.read_to_end(&mut body)?;
    Ok(body)
}
