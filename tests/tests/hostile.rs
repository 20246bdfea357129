//! Hostile clients against the real server: whatever one client makes the server hold is
//! bounded by what it is charged, within a stated factor, measured on the process itself.
//!
//! - Producers with the longest ids cost resident memory within
//!   [`MEMORY_PER_CHARGED_BYTE_MAX`] of their charge to the byte budget, until the budget
//!   refuses more (413), in memory mode and in acid.
//! - One-byte appends carrying the longest `Producer-Id` and `Stream-Seq` write log bytes
//!   within [`LOG_PER_CHARGED_BYTE_MAX`] of their charge, in acid and file-durable.
//! - Big bodies are refused before they are read when the stream is missing (404, closing
//!   the connection), past the cap on buffered bodies (503 with `Retry-After`), and cut when
//!   they stall (408); what the stalled ones hold stays within the cap. Short bodies refused
//!   before they are read keep their connection usable, however late they arrive; so do
//!   short bodies sent to routes that take none (a read, a health check, a deletion), and a
//!   long one left unread gets an answer that says the connection closes.
//! - Catch-up readers that never read their answers hold at most the budget of reads'
//!   copies (and the gather buffers' cap) in acid, however many they are; each still gets
//!   its whole answer.
//! - Request heads past their limits (one huge header, too many headers, a long request
//!   line) get 431 or 414 as problem documents — hyper's own answers too — and access lines
//!   cut short.

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use ds_tests::client::read_response;
use ds_tests::server::binary;
use ds_tests::{Response, Server};

/// Resident memory a client may grow per byte it is charged.
const MEMORY_PER_CHARGED_BYTE_MAX: f64 = 2.0;
/// Log bytes a client may write per byte it is charged.
const LOG_PER_CHARGED_BYTE_MAX: f64 = 1.5;
/// The byte budget of these servers: small, so a test fills it in seconds.
const BUDGET_BYTES: &str = "16777216";
/// The longest producer id and `Stream-Seq` the server takes.
const ID_BYTES: usize = 256;
/// Requests written before their answers are read.
const PIPELINE: u64 = 64;
/// Streams (each with its own connection) a flood spreads over, so group commits batch.
const FLOOD_STREAMS: usize = 8;

#[test]
fn producers_cost_memory_within_their_charge() {
    for mode in ["memory", "acid"] {
        let server = Server::start_in(mode, &[("DS_LIMITS__MAX_MEMORY_BYTES", BUDGET_BYTES)]);
        let streams = create_streams(&server, "p");
        let (charged_before, memory_before) =
            (server.metric("ds_charged_bytes"), server.anonymous_resident_bytes());
        let refusals = flood(&server, &streams, |stream, i| {
            let id = format!("{stream}-{i:0>width$}", width = ID_BYTES - stream.len() - 1);
            append(stream, &[("Producer-Id", &id), ("Producer-Epoch", "0"), ("Producer-Seq", "0")])
        });
        assert_budget_refused(mode, &refusals);
        let charged = server.metric("ds_charged_bytes") - charged_before;
        let memory = server.anonymous_resident_bytes().saturating_sub(memory_before);
        let ratio = memory as f64 / charged as f64;
        eprintln!("{mode}: producers grew memory {memory} bytes for {charged} charged: {ratio:.2} per byte");
        assert!(charged > 8 << 20, "{mode}: the flood filled most of the budget ({charged} bytes)");
        assert!(ratio <= MEMORY_PER_CHARGED_BYTE_MAX, "{mode}: {ratio:.2} bytes of memory per charged byte");
        // Full, the server still answers what costs nothing.
        assert_eq!(server.client().get(&format!("{}?offset=-1", streams[0])).status, 200, "{mode}");
    }
}

#[test]
fn tagged_one_byte_appends_write_log_within_their_charge() {
    for mode in ["acid", "file-durable"] {
        let mut server = Server::start_in(mode, &[("DS_LIMITS__MAX_MEMORY_BYTES", "8388608")]);
        let streams = create_streams(&server, "s");
        let refusals = flood(&server, &streams, |stream, i| {
            let id = format!("{stream}-{:0>width$}", 0, width = ID_BYTES - stream.len() - 1);
            let (seq, stream_seq) = (i.to_string(), format!("{i:0>ID_BYTES$}"));
            append(
                stream,
                &[
                    ("Producer-Id", &id),
                    ("Producer-Epoch", "0"),
                    ("Producer-Seq", &seq),
                    ("Stream-Seq", &stream_seq),
                ],
            )
        });
        assert_budget_refused(mode, &refusals);
        let charged = server.metric("ds_charged_bytes");
        assert!(server.terminate().success(), "{mode}");
        let dir = server.data_dir().expect("a disk mode").display().to_string();
        let info = ds_tool_info(&dir);
        let log_bytes =
            info[if mode == "acid" { "live_bytes" } else { "file_bytes" }].as_u64().expect("log bytes");
        let ratio = log_bytes as f64 / charged as f64;
        eprintln!(
            "{mode}: tagged appends wrote {log_bytes} log bytes for {charged} charged: {ratio:.2} per byte"
        );
        assert!(ratio <= LOG_PER_CHARGED_BYTE_MAX, "{mode}: {ratio:.2} log bytes per charged byte");
        // Everything acknowledged is there after the restart, and the budget is as full.
        server.restart();
        let recharged = server.metric("ds_charged_bytes");
        assert!(recharged * 10 >= charged * 9, "{mode}: recovery charges {recharged} of {charged}");
    }
}

#[test]
fn big_bodies_are_refused_early_and_stalled_ones_are_cut() {
    const DECLARED: usize = 10_000_000;
    const SENT: usize = 9_800_000;
    let server = Server::start_in(
        "memory",
        &[("DS_LIMITS__MAX_BODY_BUFFER_BYTES", "33554432"), ("DS_SERVER__BODY_TIMEOUT_SECS", "3")],
    );
    let head = |name: &str| {
        format!(
            "POST /v1/stream/{name} HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n\
             Content-Length: {DECLARED}\r\n\r\n"
        )
    };
    // A missing stream: answered from the head, whatever the body would have been, and the
    // connection (whose body is left unread) closed.
    let missing: Vec<TcpStream> =
        (0..30).map(|_| send_raw(server.addr, head("missing").as_bytes())).collect();
    for connection in missing {
        let response = read_answer(connection).expect("an answer before the body");
        assert_eq!(response.status, 404);
        assert_eq!(response.header("connection"), Some("close"));
    }

    let client = server.client();
    assert_eq!(client.put("/v1/stream/target", "text/plain", b"").status, 201);
    let memory_before = server.anonymous_resident_bytes();
    // Three bodies fit the cap; each sends most of itself, then stalls.
    let body = vec![b'x'; SENT];
    let stalled: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut connection = send_raw(server.addr, head("target").as_bytes());
            connection.write_all(&body).expect("the server reads a body it has room for");
            connection
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let memory = server.anonymous_resident_bytes().saturating_sub(memory_before);
    // Any more are refused at once, before their bodies.
    for _ in 0..27 {
        let response = read_answer(send_raw(server.addr, head("target").as_bytes())).expect("an answer");
        assert_eq!(response.status, 503, "{}", response.text());
        assert_eq!(response.header("retry-after"), Some("1"));
    }
    eprintln!("stalled bodies: {memory} bytes of memory held for a 32 MiB cap");
    assert!(memory < 48 << 20, "three stalled bodies hold {memory} bytes");
    for connection in stalled {
        let response = read_answer(connection).expect("the stalled body is answered");
        assert_eq!(response.status, 408, "{}", response.text());
    }
    // Nothing of them was stored, and the room they held is free again.
    assert_eq!(client.get("/v1/stream/target?offset=-1").body, b"");
    assert_eq!(client.post("/v1/stream/target", "text/plain", &body).status, 204);
    assert_eq!(server.metric("ds_request_body_held_bytes"), 0);
}

#[test]
fn short_bodies_refused_before_they_are_read_keep_the_connection() {
    let server = Server::start(&[]);
    assert_eq!(server.client().put("/v1/stream/text", "text/plain", b"").status, 201);
    let body = "b".repeat(3000);
    // Each request's head, then (a moment later, as it comes over a real network) its body.
    let request = |method: &str, path: &str, content_type: &str| {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n\
             Content-Length: {}\r\n\r\n",
            body.len()
        );
        (head, body.clone())
    };
    let refused = [
        (request("POST", "/v1/stream/missing", "text/plain"), 404),
        (request("POST", "/v1/stream/text", "application/json"), 409),
        (request("POST", "/v1/stream/text", "text/plain\r\nStream-Closed: true\r\nStream-Closed: true"), 400),
        (request("POST", "/v1/stream/a/../b", "text/plain"), 400),
        (request("PATCH", "/v1/stream/text", "text/plain"), 405),
        (request("POST", "/nowhere", "text/plain"), 404),
    ];
    let mut connection = TcpStream::connect(server.addr).expect("connect");
    connection.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut reader = BufReader::new(connection.try_clone().unwrap());
    for round in 0..5 {
        for ((head, body), status) in &refused {
            connection.write_all(head.as_bytes()).expect("the connection is still open");
            std::thread::sleep(Duration::from_millis(20));
            connection.write_all(body.as_bytes()).expect("the connection is still open");
            let response = read_response(&mut reader, false).expect("an answer on the same connection");
            assert_eq!(response.status, *status, "round {round}: {head:.60}: {}", response.text());
            assert_eq!(response.header("connection"), None, "round {round}: kept open");
        }
    }
    let (head, body) = request("POST", "/v1/stream/text", "text/plain");
    connection.write_all(format!("{head}{body}").as_bytes()).unwrap();
    assert_eq!(read_response(&mut reader, false).unwrap().status, 204, "and it still takes appends");
}

#[test]
fn bodies_on_requests_that_take_none_keep_the_connection_or_say_it_closes() {
    let server = Server::start(&[]);
    assert_eq!(server.client().put("/v1/stream/text", "text/plain", b"kept").status, 201);
    let sized = |method: &str, path: &str| {
        format!("{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
    };
    let chunked = |method: &str, path: &str| {
        format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
        )
    };
    // Routes that read no body, answered each in turn on one connection: the body is
    // dropped, the answer is the route's, and the connection carries the next request.
    let answered = [
        (sized("GET", "/healthz"), 200),
        (chunked("GET", "/v1/stream/text?offset=-1"), 200),
        (sized("HEAD", "/v1/stream/text"), 200),
        (chunked("POST", "/metrics"), 405),
        (sized("OPTIONS", "/v1/stream/text"), 204),
        (chunked("PATCH", "/v1/stream/text"), 405),
        (sized("DELETE", "/v1/stream/missing"), 404),
    ];
    let mut connection = TcpStream::connect(server.addr).expect("connect");
    connection.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut reader = BufReader::new(connection.try_clone().unwrap());
    for (request, status) in &answered {
        connection.write_all(request.as_bytes()).expect("the connection is still open");
        let head_request = request.starts_with("HEAD");
        let response = read_response(&mut reader, head_request).expect("an answer on the same connection");
        assert_eq!(response.status, *status, "{request:.40}: {}", response.text());
        assert_eq!(response.header("connection"), None, "{request:.40}: kept open");
    }
    connection.write_all(sized("GET", "/v1/stream/text?offset=-1").as_bytes()).unwrap();
    assert_eq!(read_response(&mut reader, false).unwrap().body, b"kept", "and it still serves reads");
    // A body too long to drop is left unread, and the answer says the connection closes.
    let long = "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n";
    let response = read_answer(send_raw(server.addr, long.as_bytes())).expect("an answer");
    assert_eq!((response.status, response.header("connection")), (200, Some("close")));
}

#[test]
fn answers_that_close_a_connection_mid_body_reach_the_client() {
    // The answer closes a connection whose body the server leaves unread: closing the socket
    // over unread bytes would reset it, and a reset that arrives first destroys the answer.
    let server = Server::start(&[]);
    assert_eq!(server.client().put("/v1/stream/text", "text/plain", b"").status, 201);
    // More than the socket buffers take: the client is still sending when the answer comes.
    let sent = "x".repeat(4_000_000);
    let requests = [
        ("GET /healthz", "", 200),
        ("POST /v1/stream/missing", "Content-Type: text/plain\r\n", 404),
        ("POST /v1/stream/text", "Content-Type: application/json\r\n", 409),
        ("POST /v1/stream/text", "Content-Type: text/plain\r\n", 413),
    ];
    let request = |line: &str, headers: &str| {
        format!("{line} HTTP/1.1\r\nHost: x\r\n{headers}Content-Length: 100000000\r\n\r\n{sent}")
    };
    for round in 0..5 {
        for (line, headers, status) in requests {
            let mut connection = TcpStream::connect(server.addr).expect("connect");
            let sending = connection.write_all(request(line, headers).as_bytes());
            // A client that sends its request whole before it reads (as most do) must not find
            // the connection reset under it.
            assert!(sending.is_ok(), "round {round}, {line}: sending failed: {sending:?}");
            let response = read_answer(connection)
                .unwrap_or_else(|error| panic!("round {round}, {line}: no answer ({error})"));
            assert_eq!(response.status, status, "round {round}, {line}: {}", response.text());
            assert_eq!(response.header("connection"), Some("close"), "round {round}, {line}");
        }
    }
    // A client that keeps its end open after the answer is counted as lingering (for at
    // most 2 s); once clients close their ends, none is left.
    let held =
        send_raw(server.addr, request("POST /v1/stream/text", "Content-Type: text/plain\r\n").as_bytes());
    let response = read_answer(held.try_clone().unwrap()).expect("an answer");
    assert_eq!(response.status, 413);
    server.wait_for_metric("ds_connections_lingering", 1);
    drop(held);
    server.wait_for_metric("ds_connections_lingering", 0);
}

#[test]
fn catch_up_readers_that_never_read_hold_at_most_the_copies_budget() {
    /// Readers, each asking for 16 MB of 4,000-byte messages (copied, below the budget):
    /// the kernel's socket buffers take a few MB of each answer, the rest waits in the
    /// server (about 400 MB in all, were copies not capped).
    const READERS: usize = 32;
    const MESSAGE_BYTES: usize = 4000;
    const MESSAGES: usize = 4096;
    /// The budget of reads' copies (64 MiB) and the gather buffers' cap (32 MiB), with room.
    const HELD_MAX: u64 = 128 << 20;
    let server = Server::start_in(
        "acid",
        &[
            ("DS_LIMITS__MAX_MEMORY_BYTES", "1073741824"),
            ("DS_LIMITS__MAX_STREAM_BYTES", "33554432"),
            ("DS_LIMITS__MAX_READ_BYTES", "16777216"),
        ],
    );
    let client = server.client();
    let path = "/v1/stream/small";
    assert_eq!(client.put(path, "application/octet-stream", b"").status, 201);
    let message = vec![b'm'; MESSAGE_BYTES];
    for _ in 0..MESSAGES {
        assert_eq!(client.post(path, "application/octet-stream", &message).status, 204);
    }
    let memory_before = server.anonymous_resident_bytes();
    let request = format!("GET {path}?offset=-1 HTTP/1.1\r\nHost: x\r\n\r\n");
    let readers: Vec<TcpStream> = (0..READERS).map(|_| send_raw(server.addr, request.as_bytes())).collect();
    // Every answer is made at once; give the server a moment to make them all.
    std::thread::sleep(Duration::from_millis(3000));
    let held = server.metric("ds_read_copies_held_bytes");
    let memory = server.anonymous_resident_bytes().saturating_sub(memory_before);
    eprintln!("{READERS} readers that never read: copies charge {held} bytes, memory grew {memory} bytes");
    assert!(held > 0 && held <= 64 << 20, "copies are charged to their budget: {held} bytes");
    let refused = server.metric("ds_read_copies_refused_total");
    let copied_max = (64 << 20) / (MESSAGE_BYTES * MESSAGES) as u64;
    assert!(refused >= READERS as u64 - copied_max, "the rest send slices, and are counted: {refused}");
    assert!(memory < HELD_MAX, "{READERS} stalled answers of 16 MB hold {memory} bytes");
    // Each still gets its whole answer, copied or sliced.
    for reader in readers {
        let answer = read_answer(reader).expect("the whole answer");
        assert_eq!(answer.status, 200);
        assert_eq!(answer.body.len(), MESSAGE_BYTES * MESSAGES);
        assert!(answer.body.iter().all(|byte| *byte == b'm'));
    }
    assert_eq!(server.metric("ds_read_copies_held_bytes"), 0, "given back with the answers");
}

/// Heads past their limits get 431 or 414 as problem documents (memory and acid: heads are
/// read before any storage is touched).
#[test]
fn oversized_request_heads_are_refused() {
    for mode in ["memory", "acid"] {
        oversized_request_heads_are_refused_in(mode);
    }
}

fn oversized_request_heads_are_refused_in(mode: &str) {
    let mut server = Server::start_in(mode, &[]);
    let client = server.client();
    let big = "x".repeat(100 * 1024);
    let response = client.send("GET", "/v1/stream/a", &[("X-Big", &big)], b"");
    assert_eq!(response.status, 431);
    let many: Vec<(String, String)> = (0..101).map(|i| (format!("X-H{i}"), "v".to_string())).collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let too_many = client.send("GET", "/v1/stream/a", &many, b"");
    assert_eq!(too_many.status, 431);
    // hyper answers this one itself; its bare head goes out as a problem document too.
    assert_eq!(too_many.header("content-type"), Some("application/problem+json"), "{}", too_many.text());
    assert!(too_many.text().contains("urn:ds:problem:head-too-large"), "{}", too_many.text());
    let long_uri = format!("/v1/stream/{}", "u".repeat(9 * 1024));
    assert_eq!(client.get(&long_uri).status, 414);
    let garbage = client.raw(b"NOT HTTP AT ALL\r\n\r\n", false);
    assert_eq!(garbage.status, 400);
    assert!(garbage.text().contains("urn:ds:problem:malformed-request"), "{}", garbage.text());
    assert!(server.terminate().success());
    // Every refused request is in the access log, its path cut short: those the router
    // refuses like any other, those hyper answers itself (too many headers, the garbage)
    // with `-` for the method and path they did not give.
    let log = server.log();
    let access: Vec<&str> = log.lines().filter(|line| line.contains("ds::access")).collect();
    let with = |status: &str| access.iter().filter(|line| line.contains(status)).count();
    assert_eq!((with("status=431"), with("status=414"), with("status=400")), (2, 1, 1), "{log}");
    let unparsed = access.iter().filter(|line| line.contains("method=- path=-")).count();
    assert_eq!(unparsed, 2, "{log}");
    assert!(access.iter().all(|line| line.len() < 4400), "{log}");
}

/// Creates `FLOOD_STREAMS` text streams named `{prefix}N`; their paths.
fn create_streams(server: &Server, prefix: &str) -> Vec<String> {
    let client = server.client();
    let paths: Vec<String> = (0..FLOOD_STREAMS).map(|n| format!("/v1/stream/{prefix}{n}")).collect();
    for path in &paths {
        assert_eq!(client.put(path, "text/plain", b"").status, 201);
    }
    paths
}

/// A one-byte text append to `path` with `headers`, as raw HTTP/1.1.
fn append(path: &str, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut request =
        format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 1\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\nx");
    request.into_bytes()
}

/// Sends `request(path, i)` for i = 0, 1, … on one connection per stream path, all streams
/// at once, until the server refuses one; the first refusal of each stream.
fn flood(server: &Server, paths: &[String], request: impl Fn(&str, u64) -> Vec<u8> + Sync) -> Vec<Response> {
    std::thread::scope(|scope| {
        let floods: Vec<_> =
            paths.iter().map(|path| scope.spawn(|| flood_one(server.addr, path, &request))).collect();
        floods.into_iter().map(|flood| flood.join().expect("flood thread")).collect()
    })
}

/// One stream's flood: `PIPELINE` requests written, then their answers read, until one is
/// refused (at most a million).
fn flood_one(addr: SocketAddr, path: &str, request: &dyn Fn(&str, u64) -> Vec<u8>) -> Response {
    let mut connection = TcpStream::connect(addr).expect("connect");
    connection.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut reader = BufReader::new(connection.try_clone().unwrap());
    for first in (0..1_000_000).step_by(PIPELINE as usize) {
        let batch: Vec<u8> = (first..first + PIPELINE).flat_map(|i| request(path, i)).collect();
        connection.write_all(&batch).expect("the server takes requests");
        let answers: Vec<Response> =
            (0..PIPELINE).map(|_| read_response(&mut reader, false).expect("an answer")).collect();
        if let Some(refusal) = answers.into_iter().find(|answer| answer.status >= 300) {
            return refusal;
        }
    }
    panic!("{path}: a million requests and none refused");
}

/// A keep-alive connection that sends no next request, and one that sends half a head, are
/// closed after `DS_SERVER__IDLE_TIMEOUT_SECS`, by the bare front and by hyper alike.
#[test]
fn idle_and_half_sent_connections_are_closed_after_the_idle_timeout() {
    for bare_front in ["true", "false"] {
        let server =
            Server::start(&[("DS_SERVER__IDLE_TIMEOUT_SECS", "1"), ("DS_SERVER__BARE_FRONT", bare_front)]);
        let idle = send_raw(server.addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
        let half = send_raw(server.addr, b"GET /healthz HTTP/1.1\r\nHo");
        let started = std::time::Instant::now();
        let mut reader = BufReader::new(idle.try_clone().expect("a clone"));
        idle.set_read_timeout(Some(Duration::from_secs(10))).expect("a timeout");
        assert_eq!(read_response(&mut reader, false).expect("an answer").status, 200);
        for (what, connection) in [("idle", idle), ("half a head", half)] {
            connection.set_read_timeout(Some(Duration::from_secs(10))).expect("a timeout");
            let mut rest = Vec::new();
            let ended = std::io::Read::read_to_end(&mut &connection, &mut rest);
            assert!(ended.is_ok(), "bare front {bare_front}, {what}: not closed ({ended:?})");
        }
        assert!(started.elapsed() < Duration::from_secs(8), "closed after {:?}", started.elapsed());
    }
}

fn assert_budget_refused(mode: &str, refusals: &[Response]) {
    for refusal in refusals {
        assert_eq!(refusal.status, 413, "{mode}: {}", refusal.text());
        assert_eq!(refusal.header("content-type"), Some("application/problem+json"), "{mode}");
    }
}

/// A connection that has sent `bytes`.
fn send_raw(addr: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut connection = TcpStream::connect(addr).expect("connect");
    connection.write_all(bytes).expect("send");
    connection
}

/// The answer on `connection`, waiting at most ten seconds.
fn read_answer(connection: TcpStream) -> std::io::Result<Response> {
    connection.set_read_timeout(Some(Duration::from_secs(10)))?;
    read_response(&mut BufReader::new(connection), false)
}

/// `ds-tool info --json DIR`.
fn ds_tool_info(dir: &str) -> serde_json::Value {
    let output =
        Command::new(binary("ds-tool")).args(["info", "--json", dir]).output().expect("ds-tool runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("JSON")
}
