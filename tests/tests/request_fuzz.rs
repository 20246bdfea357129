//! Seeded random requests over raw TCP against the real server: half of them well-formed
//! (creates, forks, appends with and without producers, reads, deletes on a few streams, so
//! they meet each other's state), half hostile (odd methods, names, offsets, header values,
//! bodies, and framing: chunked, lengths shorter than the body, conflicting or garbled
//! lengths, other HTTP versions). Whatever arrives:
//!
//! - every request gets one well-formed answer; the connection is closed only after an
//!   answer that says so (or one to a request whose framing left bytes behind), never
//!   silently;
//! - no 5xx but the ones the spec names for load and space (503, 507);
//! - every error with a body is problem+json whose `status` is the answer's;
//! - every answer carries `X-Content-Type-Options: nosniff`; a stream read answered 200
//!   carries `Stream-Next-Offset` and an `ETag`, an accepted append `Stream-Next-Offset`;
//! - in acid and file-durable, the streams read the same after a clean stop and a restart
//!   (but for one whose TTL ran out meanwhile — the fuzz creates streams with a 1-second TTL —
//!   and a deleted source kept for its forks, 410, which goes once such a fork expired),
//!   and `ds-tool verify` finds the directory clean.
//!
//! `DS_FUZZ_SEED` replays one seed (a failure prints it); `DS_FUZZ_REQUESTS` sets the count.

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use ds_tests::client::read_response;
use ds_tests::rng::Rng;
use ds_tests::server::binary;
use ds_tests::{Response, Server};

/// Requests per mode unless `DS_FUZZ_REQUESTS` says otherwise.
const REQUESTS_DEFAULT: u64 = 1500;
/// Streams the well-formed requests share (`j…` are JSON, `f…` may be forks).
const NAMES: [&str; 7] = ["a", "b", "c", "j1", "j2", "f1", "f2"];

#[test]
fn random_requests_get_well_formed_answers_in_memory() {
    fuzz("memory", seed());
}

#[test]
fn random_requests_get_well_formed_answers_and_leave_a_clean_log_in_acid() {
    fuzz("acid", seed() ^ 0x9e37_79b9);
}

#[test]
fn random_requests_get_well_formed_answers_and_leave_a_clean_log_in_file_durable() {
    fuzz("file-durable", seed() ^ 0x7f4a_7c15);
}

fn seed() -> u64 {
    std::env::var("DS_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(20261126)
}

fn fuzz(mode: &str, seed: u64) {
    let requests =
        std::env::var("DS_FUZZ_REQUESTS").ok().and_then(|s| s.parse().ok()).unwrap_or(REQUESTS_DEFAULT);
    let mut server = Server::start_in(mode, &[]);
    let mut rng = Rng::new(seed);
    let mut connection: Option<Connection> = None;
    let mut previous = String::new();
    for index in 0..requests {
        let sent = if rng.below(2) == 0 { well_formed(&mut rng) } else { hostile(&mut rng) };
        if connection.is_none() {
            previous = "none: a new connection".into();
        }
        let open = connection.get_or_insert_with(|| Connection::open(server.addr));
        let answer = open.exchange(&sent);
        let context = || {
            format!(
                "{mode}, DS_FUZZ_SEED={seed}, request {index}: {:?} (before it: {previous:?})",
                sent.shown()
            )
        };
        let response =
            answer.unwrap_or_else(|error| panic!("{}: no answer ({error})\n{}", context(), server.log()));
        if let Err(broken) = check(&sent, &response) {
            panic!("{}: {broken}\n{}", context(), response.text());
        }
        let closes = response.header("connection").is_some_and(|value| value.eq_ignore_ascii_case("close"));
        if closes || sent.leaves_bytes || rng.below(5) == 0 {
            connection = None;
        }
        previous = sent.shown();
    }
    assert!(!server.log().contains("panicked"), "{mode}: a panic in the log:\n{}", server.log());
    if mode != "memory" {
        // Taken before the reads: the time since then is never less than since any HEAD.
        let seen_at = Instant::now();
        let before = snapshot(&server);
        server.terminate();
        let dir = server.data_dir().expect("a disk mode has a directory").display().to_string();
        let verify = Command::new(binary("ds-tool")).args(["verify", &dir]).output().expect("ds-tool runs");
        let report = String::from_utf8_lossy(&verify.stdout);
        assert!(verify.status.success(), "ds-tool verify after the fuzz (seed {seed}):\n{report}");
        server.restart();
        let after = snapshot(&server);
        let elapsed = seen_at.elapsed();
        let expired = |before: &Seen, after: &Seen| after.read.0 == 404 && before.may_have_expired(elapsed);
        // A deleted source kept for its forks (410) goes once its last fork expired.
        let some_expired = before.iter().zip(&after).any(|(before, after)| expired(before, after));
        let changed = before.iter().zip(&after).any(|(before, after)| {
            let released = some_expired && (before.read.0, after.read.0) == (410, 404);
            after.read != before.read && !expired(before, after) && !released
        });
        let shown: Vec<String> = NAMES
            .iter()
            .zip(before.iter().zip(&after))
            .map(|(name, (before, after))| format!("{name}: {} -> {}", before.shown(), after.shown()))
            .collect();
        assert!(
            !changed,
            "{mode}: the streams read the same after a restart (seed {seed}):\n{}",
            shown.join("\n")
        );
    }
}

/// A request as sent, and what its answer is checked against.
struct Sent {
    bytes: Vec<u8>,
    method: String,
    path: String,
    /// Its framing leaves bytes the server reads as the next request: reconnect after it.
    leaves_bytes: bool,
}

impl Sent {
    fn shown(&self) -> String {
        String::from_utf8_lossy(&self.bytes[..self.bytes.len().min(300)]).into_owned()
    }
}

/// One keep-alive connection.
struct Connection {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Connection {
    fn open(addr: SocketAddr) -> Connection {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        let reader = BufReader::new(stream.try_clone().expect("clone"));
        Connection { stream, reader }
    }

    fn exchange(&mut self, sent: &Sent) -> std::io::Result<Response> {
        self.stream.write_all(&sent.bytes)?;
        read_response(&mut self.reader, sent.method == "HEAD")
    }
}

/// The invariants every answer keeps, whatever was asked.
fn check(sent: &Sent, response: &Response) -> Result<(), String> {
    let status = response.status;
    if status >= 500 && status != 503 && status != 507 {
        return Err(format!("status {status}"));
    }
    if response.header("x-content-type-options") != Some("nosniff") {
        return Err(format!("{status} without x-content-type-options"));
    }
    if status >= 400 && !response.body.is_empty() {
        if response.header("content-type") != Some("application/problem+json") {
            return Err(format!("{status} with content-type {:?}", response.header("content-type")));
        }
        let problem: serde_json::Value =
            serde_json::from_slice(&response.body).map_err(|e| format!("{status}: problem body: {e}"))?;
        let complete = problem["type"].is_string() && problem["title"].is_string();
        if !complete || problem["status"] != u64::from(status) {
            return Err(format!("{status}: problem {problem}"));
        }
    }
    let on_stream = sent.path.starts_with("/v1/stream/");
    let required: &[&str] = match (sent.method.as_str(), status) {
        ("GET", 200) if on_stream => &["stream-next-offset", "etag"],
        ("POST", 200 | 204) => &["stream-next-offset"],
        _ => &[],
    };
    match required.iter().find(|name| response.header(name).is_none()) {
        Some(missing) => Err(format!("{} answered {status} without {missing}", sent.method)),
        None => Ok(()),
    }
}

/// One stream as a read from its start answers it, and the TTL it had left then.
struct Seen {
    read: (u16, Option<String>, Vec<u8>),
    /// Whole seconds, rounded up (HEAD's `Stream-TTL`), when the stream has a TTL.
    ttl_left_secs: Option<u64>,
}

impl Seen {
    fn shown(&self) -> String {
        let (status, next, body) = &self.read;
        let body = String::from_utf8_lossy(&body[..body.len().min(80)]).into_owned();
        format!("{status} {next:?} ttl {:?} {body:?}", self.ttl_left_secs)
    }

    /// Whether the stream's TTL may have run out `elapsed` after it was seen (the window a
    /// read renews may be shorter than `Stream-TTL` says by up to a second).
    fn may_have_expired(&self, elapsed: Duration) -> bool {
        self.ttl_left_secs.is_some_and(|secs| elapsed + Duration::from_secs(1) > Duration::from_secs(secs))
    }
}

/// Every stream's whole content as a read from the start answers it.
fn snapshot(server: &Server) -> Vec<Seen> {
    let client = server.client();
    let seen = |name: &str| {
        let response = client.get(&format!("/v1/stream/{name}?offset=-1"));
        let next = response.header("stream-next-offset").map(str::to_string);
        let head = client.head(&format!("/v1/stream/{name}"));
        let ttl_left_secs = head.header("stream-ttl").and_then(|secs| secs.parse().ok());
        Seen { read: (response.status, next, response.body), ttl_left_secs }
    };
    NAMES.iter().map(|name| seen(name)).collect()
}

/// A request a client of the protocol could send, on the shared streams.
fn well_formed(rng: &mut Rng) -> Sent {
    let name = *rng.pick(&NAMES);
    let json = name.starts_with('j');
    let content_type = if json { "application/json" } else { "text/plain" };
    let mut path = format!("/v1/stream/{name}");
    let mut headers: Vec<(&str, String)> = Vec::new();
    let mut body = Vec::new();
    let method = match rng.below(100) {
        0..15 => {
            headers.push(("Content-Type", content_type.into()));
            if name.starts_with('f') && rng.below(2) == 0 {
                headers.push(("Stream-Forked-From", format!("/v1/stream/{}", rng.pick(&["a", "b", "c"]))));
            }
            if rng.below(4) == 0 {
                headers.push(("Stream-TTL", rng.pick(&["1", "60", "0", "x"]).to_string()));
            }
            "PUT"
        }
        15..55 => {
            headers.push(("Content-Type", content_type.into()));
            body = match json {
                true => rng.pick(&["[1,2]", "{\"a\":1}", "\"s\"", "[[]]", "[]", "3"]).as_bytes().to_vec(),
                false => vec![b'x'; rng.below(100) as usize],
            };
            if rng.below(3) == 0 {
                headers.push(("Producer-Id", rng.pick(&["p", "q"]).to_string()));
                headers.push(("Producer-Epoch", rng.below(3).to_string()));
                headers.push(("Producer-Seq", rng.below(6).to_string()));
            }
            if rng.below(20) == 0 {
                headers.push(("Stream-Closed", "true".into()));
            }
            "POST"
        }
        55..85 => {
            let offsets =
                ["-1", "now", "0000000000000000_0000000000000000", "0000000000000001_0000000000000002"];
            path.push_str(&format!("?offset={}", rng.pick(&offsets)));
            "GET"
        }
        85..93 => "HEAD",
        _ => "DELETE",
    };
    headers.push(("Content-Length", body.len().to_string()));
    let head: String = headers.iter().map(|(name, value)| format!("{name}: {value}\r\n")).collect();
    let mut bytes = format!("{method} {path} HTTP/1.1\r\nHost: x\r\n{head}\r\n").into_bytes();
    bytes.extend_from_slice(&body);
    Sent { bytes, method: method.into(), path, leaves_bytes: false }
}

/// A request with odd parts: method, target, header values, body and framing drawn from
/// values a careless or hostile client sends.
fn hostile(rng: &mut Rng) -> Sent {
    let method =
        *rng.pick(&["GET", "PUT", "POST", "POST", "HEAD", "DELETE", "OPTIONS", "PATCH", "get", "TRACE"]);
    let names =
        ["a", "j1", "x%2Fy", "%00", "..", "a%20b", "%C3%A9", "%FF", "", "a/b", "%2e%2e", &"z".repeat(1100)];
    let targets = [
        "/v1/stream",
        "/v1/stream/",
        "/healthz",
        "/metrics",
        "/",
        "*",
        "http://x/v1/stream/a",
        "/v1//stream/a",
    ];
    let mut path = match rng.below(4) {
        0 => rng.pick(&targets).to_string(),
        _ => format!("/v1/stream/{}", rng.pick(&names)),
    };
    let values = [
        "1",
        "0",
        "-1",
        "true",
        "TRUE",
        "",
        "abc",
        "18446744073709551616",
        "2030-01-01T00:00:00Z",
        "not-a-date",
        "/v1/stream/a",
        "0000000000000000_0000000000000001",
        "*",
        "+5",
        " 5",
        "1e3",
    ];
    if rng.below(2) == 0 {
        let key = rng.pick(&["offset", "live", "cursor", "offset", ""]);
        let value = rng.pick(&[
            "-1",
            "now",
            "abc",
            "-2",
            "%00",
            "1_1",
            "99999999999999999999_0",
            "long-poll&live=sse",
        ]);
        path.push_str(&format!("?{key}={value}"));
    }
    let header_names = [
        "Content-Type",
        "Stream-TTL",
        "Stream-Expires-At",
        "Stream-Seq",
        "Stream-Closed",
        "Producer-Id",
        "Producer-Epoch",
        "Producer-Seq",
        "Stream-Forked-From",
        "Stream-Fork-Offset",
        "If-None-Match",
        "Origin",
    ];
    let mut head = String::new();
    for _ in 0..rng.below(5) {
        head.push_str(&format!("{}: {}\r\n", rng.pick(&header_names), rng.pick(&values)));
    }
    let body = hostile_body(rng);
    let version = if rng.below(20) == 0 { *rng.pick(&["HTTP/1.0", "HTTP/1.2", "HTTX"]) } else { "HTTP/1.1" };
    let (framing, framed, leaves_bytes) = frame(rng, &body);
    let mut bytes = format!("{method} {path} {version}\r\nHost: x\r\n{head}{framing}\r\n").into_bytes();
    bytes.extend_from_slice(&framed);
    let leaves_bytes = leaves_bytes || version != "HTTP/1.1";
    Sent { bytes, method: method.to_ascii_uppercase(), path, leaves_bytes }
}

fn hostile_body(rng: &mut Rng) -> Vec<u8> {
    let bodies: [&[u8]; 8] =
        [b"", b"[", b"[1,2", b"[]", b"\xff\xfe", b"{\"a\":\"\\ud800\"}", b"null", b"[1]x"];
    match rng.below(4) {
        0 => rng.pick(&bodies).to_vec(),
        1 => (0..rng.below(300)).map(|_| rng.below(256) as u8).collect(),
        2 => vec![b'x'; *rng.pick(&[0, 5, 5000, 70_000])],
        _ => "[".repeat(rng.below(3000) as usize).into_bytes(),
    }
}

/// The framing headers and the body as sent; whether bytes are left for the next request.
fn frame(rng: &mut Rng, body: &[u8]) -> (String, Vec<u8>, bool) {
    match rng.below(20) {
        0..13 => (format!("Content-Length: {}\r\n", body.len()), body.to_vec(), false),
        13..16 => {
            let mut framed = Vec::new();
            for piece in body.chunks(1 + rng.below(4096) as usize) {
                framed.extend_from_slice(format!("{:x};ext=1\r\n", piece.len()).as_bytes());
                framed.extend_from_slice(piece);
                framed.extend_from_slice(b"\r\n");
            }
            framed.extend_from_slice(b"0\r\n\r\n");
            ("Transfer-Encoding: chunked\r\n".into(), framed, false)
        }
        16 => (format!("Content-Length: {}\r\n", body.len().saturating_sub(3)), body.to_vec(), true),
        17 => (
            format!("Content-Length: {}\r\nContent-Length: {}\r\n", body.len(), body.len() + 1),
            body.to_vec(),
            true,
        ),
        _ => (
            format!("Content-Length: {}\r\n", rng.pick(&["-1", "abc", "99999999999999999999", "0x5"])),
            body.to_vec(),
            true,
        ),
    }
}
