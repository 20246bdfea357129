//! Short bodies through the bare front (`server/src/serve/bare/head.rs`): a request whose
//! `Content-Length` body (at most 64 KiB) has arrived with its head is served by the bare
//! front, so a producer's connection holds nothing between its appends; anything else goes
//! to hyper, which answers as it always has.
//!
//! - Appends, creates and a JSON append, pipelined in one write, are stored in order and
//!   answered in order, none handed to hyper, in memory mode and in acid.
//! - A body larger than one read (but all sent) is still served bare; one that arrives a
//!   moment after its head, and one past 64 KiB, go to hyper and are stored the same.
//! - Limits hold on the bare path: past the append limit 413, past the body budget 503,
//!   both problem documents, nothing stored, every charge given back.
//! - Idle producer connections (one append each, then nothing) hold a few KiB each.
//! - A client that half-closes after its request (`shutdown(SHUT_WR)`) gets the answer to a
//!   create, an append, a catch-up read, a HEAD and a deletion, and then the connection's
//!   end; a long-poll it half-closed on is dropped at once (the client may be gone: the two
//!   look alike), its reader freed.

use std::io::{BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use ds_tests::client::read_response;
use ds_tests::{Response, Server};

/// A request with `body`, as a client sends it.
fn request(method: &str, path: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    [head.as_bytes(), body].concat()
}

/// Sends `requests` in one write on a new connection and reads as many answers.
fn pipelined(server: &Server, requests: &[Vec<u8>]) -> Vec<Response> {
    let mut connection = TcpStream::connect(server.addr).expect("connect");
    connection.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    connection.write_all(&requests.concat()).expect("send");
    let mut reader = BufReader::new(connection);
    requests.iter().map(|_| read_response(&mut reader, false).expect("an answer")).collect()
}

#[test]
fn pipelined_short_bodies_are_served_bare_in_order() {
    for mode in ["memory", "acid"] {
        let server = Server::start_in(mode, &[]);
        let requests = [
            request("PUT", "/v1/stream/text", "text/plain", b"first "),
            request("POST", "/v1/stream/text", "text/plain", b"second "),
            request("POST", "/v1/stream/text", "text/plain", b"third"),
            request("PUT", "/v1/stream/json", "application/json", b""),
            request("POST", "/v1/stream/json", "application/json", br#"[{"a":1},{"b":2}]"#),
        ];
        let statuses: Vec<u16> = pipelined(&server, &requests).iter().map(|r| r.status).collect();
        assert_eq!(statuses, [201, 204, 204, 201, 204], "{mode}");
        let client = server.client();
        assert_eq!(client.get("/v1/stream/text?offset=-1").body, b"first second third", "{mode}");
        assert_eq!(client.get("/v1/stream/json?offset=-1").body, br#"[{"a":1},{"b":2}]"#, "{mode}");
        assert_eq!(server.metric("ds_bare_handoffs_total"), 0, "{mode}: none went to hyper");
        assert!(server.metric("ds_bare_requests_total") >= 5, "{mode}");
    }
}

#[test]
fn bodies_that_arrive_late_or_are_long_go_to_hyper_and_are_stored_the_same() {
    let server = Server::start(&[]);
    let client = server.client();
    assert_eq!(client.put("/v1/stream/s", "text/plain", b"").status, 201);
    // Longer than one read of the bare front (4 KiB), all sent at once: still bare.
    let across_reads = vec![b'a'; 12 * 1024];
    assert_eq!(client.post("/v1/stream/s", "text/plain", &across_reads).status, 204);
    assert_eq!(server.metric("ds_bare_handoffs_total"), 0, "all of it had arrived");
    // The body a moment after its head: hyper reads it as it comes.
    let late = request("POST", "/v1/stream/s", "text/plain", b"late");
    let (head, body) = late.split_at(late.len() - 4);
    let mut connection = TcpStream::connect(server.addr).expect("connect");
    connection.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    connection.write_all(head).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    connection.write_all(body).unwrap();
    let mut reader = BufReader::new(connection.try_clone().unwrap());
    assert_eq!(read_response(&mut reader, false).unwrap().status, 204);
    assert_eq!(server.metric("ds_bare_handoffs_total"), 1, "the late body went to hyper");
    // Past the bare front's 64 KiB: hyper's.
    let long = vec![b'b'; 64 * 1024 + 1];
    assert_eq!(client.post("/v1/stream/s", "text/plain", &long).status, 204);
    assert_eq!(server.metric("ds_bare_handoffs_total"), 2);
    let stored = client.get("/v1/stream/s?offset=-1").body;
    assert_eq!(stored, [across_reads, b"late".to_vec(), long].concat(), "every byte, in order");
}

#[test]
fn limits_hold_for_bodies_served_bare() {
    // Appends at most 3,000 bytes; bodies held at once at most 2,048 bytes.
    let server = Server::start(&[
        ("DS_LIMITS__MAX_APPEND_BYTES", "3000"),
        ("DS_LIMITS__MAX_BODY_BUFFER_BYTES", "2048"),
    ]);
    let client = server.client();
    assert_eq!(client.put("/v1/stream/s", "text/plain", b"kept").status, 201);
    let too_long = client.post("/v1/stream/s", "text/plain", &[b'x'; 3001]);
    assert_eq!(too_long.status, 413, "{}", too_long.text());
    assert_eq!(too_long.header("content-type"), Some("application/problem+json"));
    let past_budget = client.post("/v1/stream/s", "text/plain", &[b'z'; 2049]);
    assert_eq!(past_budget.status, 503, "{}", past_budget.text());
    assert_eq!(past_budget.header("content-type"), Some("application/problem+json"));
    assert_eq!(client.post("/v1/stream/s", "text/plain", &[b'y'; 1000]).status, 204);
    assert_eq!(client.get("/v1/stream/s?offset=-1").body, [b"kept".to_vec(), vec![b'y'; 1000]].concat());
    assert_eq!(server.metric("ds_bare_handoffs_total"), 0);
    assert_eq!(server.metric("ds_request_body_held_bytes"), 0, "every charge given back");
}

#[test]
fn idle_producer_connections_hold_a_few_kib_each() {
    const CONNECTIONS: usize = 400;
    let server = Server::start(&[]);
    let client = server.client();
    assert_eq!(client.put("/v1/stream/s", "text/plain", b"").status, 201);
    let append = request("POST", "/v1/stream/s", "text/plain", &[b'p'; 16]);
    // Warm up: the first connections grow the runtime's and the allocator's own tables.
    drop((0..50).map(|_| appended(&server, &append)).collect::<Vec<_>>());
    std::thread::sleep(Duration::from_millis(200));
    let before = server.anonymous_resident_bytes();
    let idle: Vec<TcpStream> = (0..CONNECTIONS).map(|_| appended(&server, &append)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let per_connection = server.anonymous_resident_bytes().saturating_sub(before) / CONNECTIONS as u64;
    eprintln!("an idle producer connection: {per_connection} bytes");
    // Through hyper each held its read and write buffers (8 KiB each, reserved): 13 KB.
    assert!(per_connection < 6 * 1024, "an idle producer connection holds {per_connection} bytes");
    assert_eq!(server.metric("ds_bare_handoffs_total"), 0);
    drop(idle);
}

#[test]
fn a_client_that_half_closes_gets_its_answer_but_no_wait() {
    for mode in ["memory", "acid"] {
        let server = Server::start_in(mode, &[]);
        let answers = [
            (request("PUT", "/v1/stream/s", "text/plain", b"first "), 201),
            (request("POST", "/v1/stream/s", "text/plain", b"second"), 204),
            (request("PUT", "/v1/stream/gone", "text/plain", b""), 201),
            (b"GET /v1/stream/s?offset=-1 HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(), 200),
            (b"HEAD /v1/stream/s HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(), 200),
            (b"DELETE /v1/stream/gone HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(), 204),
        ];
        for (sent, status) in answers {
            let (mut reader, answer) = half_closed(&server, &sent);
            let answer =
                answer.unwrap_or_else(|| panic!("{mode}: no answer to {}", String::from_utf8_lossy(&sent)));
            assert_eq!(answer.status, status, "{mode}: {}", answer.text());
            let mut rest = Vec::new();
            assert_eq!(reader.read_to_end(&mut rest).unwrap(), 0, "{mode}: then the connection ends");
        }
        let client = server.client();
        assert_eq!(client.get("/v1/stream/s?offset=-1").body, b"first second", "{mode}");
        assert_eq!(client.get("/v1/stream/gone?offset=-1").status, 404, "{mode}");
        // A long-poll ends with its sender's side: no answer, the reader and connection freed.
        let wait = b"GET /v1/stream/s?offset=now&live=long-poll HTTP/1.1\r\nHost: x\r\n\r\n";
        let started = std::time::Instant::now();
        let (_, answer) = half_closed(&server, wait);
        assert!(answer.is_none(), "{mode}: a long-poll answered after its client's half-close");
        assert!(started.elapsed() < Duration::from_secs(5), "{mode}: dropped at once, not at its timeout");
        server.wait_for_metric("ds_live_readers{kind=\"long-poll\"}", 0);
        server.wait_for_metric("ds_connections", 1);
        assert_eq!(server.metric("ds_bare_handoffs_total"), 0, "{mode}");
    }
}

/// Sends `request` on a new connection, half-closes it, and reads the answer (`None` when
/// the server closed without one).
fn half_closed(server: &Server, request: &[u8]) -> (BufReader<TcpStream>, Option<Response>) {
    let mut connection = TcpStream::connect(server.addr).expect("connect");
    connection.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    connection.write_all(request).expect("send");
    connection.shutdown(Shutdown::Write).expect("half-close");
    let mut reader = BufReader::new(connection);
    let head_only = request.starts_with(b"HEAD ");
    let answer = read_response(&mut reader, head_only).ok();
    (reader, answer)
}

/// A connection that has appended `append` and read its answer, left open.
fn appended(server: &Server, append: &[u8]) -> TcpStream {
    let mut connection = TcpStream::connect(server.addr).expect("connect");
    connection.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    connection.write_all(append).expect("send");
    let answer = read_response(&mut BufReader::new(&connection), false).expect("an answer");
    assert_eq!(answer.status, 204);
    connection
}
