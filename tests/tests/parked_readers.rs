//! Caught-up SSE readers of the bare front are parked: their connections leave their tasks
//! for a lot of the stream's readers (`server/src/serve/bare/park.rs`). Parked readers get
//! every event, a client that hangs up while parked is let go without waiting for an event
//! (also one of many that hang up while their lot sweeps for an event), a connection carries
//! on after its parked answer ends (with a request sent afterwards or pipelined behind it),
//! and more readers than one lot holds are served by several.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use ds_tests::Server;

fn address(server: &Server) -> SocketAddr {
    server.base_url().trim_start_matches("http://").parse().unwrap()
}

/// A raw connection and all it received.
struct Raw {
    socket: TcpStream,
    received: Vec<u8>,
}

impl Raw {
    /// Connects and sends `request` (keep-alive unless it says otherwise).
    fn send(addr: SocketAddr, request: &str) -> Raw {
        let mut socket = TcpStream::connect(addr).unwrap();
        socket.write_all(request.as_bytes()).unwrap();
        Raw { socket, received: Vec::new() }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.received).into_owned()
    }

    /// Reads until the text received contains `needle` (10 s at most).
    fn read_until(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.text().contains(needle) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "no {needle:?} in {:?}", self.text());
            self.socket.set_read_timeout(Some(left)).unwrap();
            let mut buffer = [0u8; 16384];
            match self.socket.read(&mut buffer) {
                Ok(0) => panic!("closed before {needle:?}: {:?}", self.text()),
                Ok(read) => self.received.extend_from_slice(&buffer[..read]),
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(error) if error.kind() == std::io::ErrorKind::TimedOut => {}
                Err(error) => panic!("read: {error}"),
            }
        }
        self.text()
    }
}

fn sse_request(path: &str) -> String {
    format!("GET {path}?offset=-1&live=sse HTTP/1.1\r\nHost: ds\r\n\r\n")
}

/// Creates the stream at `path` and `count` SSE readers of it, each caught up and parked.
fn parked_readers(server: &Server, path: &str, count: usize) -> Vec<Raw> {
    let client = server.client();
    assert_eq!(client.put(path, "text/plain", b"").status, 201);
    let mut readers: Vec<Raw> = (0..count).map(|_| Raw::send(address(server), &sse_request(path))).collect();
    for reader in &mut readers {
        reader.read_until("upToDate");
    }
    server.wait_for_metric("ds_sse_parked_readers", count as u64);
    readers
}

#[test]
fn caught_up_readers_are_parked_and_get_every_event() {
    let server = Server::start(&[]);
    let client = server.client();
    let path = "/v1/stream/parked";
    let mut readers = parked_readers(&server, path, 40);
    for i in 0..20 {
        assert_eq!(client.post(path, "text/plain", format!("event-{i:02}").as_bytes()).status, 204);
    }
    for reader in &mut readers {
        let text = reader.read_until("event-19");
        let order: Vec<usize> =
            (0..20).map(|i| text.find(&format!("event-{i:02}")).expect("every event")).collect();
        assert!(order.windows(2).all(|pair| pair[0] < pair[1]), "in order: {text}");
    }
    // Back in the lot once they caught up again.
    server.wait_for_metric("ds_sse_parked_readers", 40);
    assert_eq!(server.metric("ds_live_readers{kind=\"sse\"}"), 40);
}

#[test]
fn a_parked_reader_that_hangs_up_is_let_go_without_an_event() {
    let server = Server::start(&[]);
    let client = server.client();
    let path = "/v1/stream/parked-gone";
    let mut readers = parked_readers(&server, path, 3);
    // The readers and the metrics request itself (each of the client's requests has its own
    // connection; an earlier one may still be counted for a moment after its answer, so the
    // count is waited for, not read once).
    server.wait_for_metric("ds_connections", 3 + 1);
    drop(readers.pop());
    server.wait_for_metric("ds_sse_parked_readers", 2);
    server.wait_for_metric("ds_live_readers{kind=\"sse\"}", 2);
    server.wait_for_metric("ds_connections", 2 + 1);
    // The others are untouched.
    assert_eq!(client.post(path, "text/plain", b"still here").status, 204);
    for reader in &mut readers {
        reader.read_until("still here");
    }
}

#[test]
fn readers_that_hang_up_while_a_large_lot_sweeps_are_let_go_without_an_event() {
    let server = Server::start(&[]);
    let client = server.client();
    let path = "/v1/stream/parked-sweep";
    // One lot, and many more readers than one poll of it visits (128): a sweep for an event
    // takes several polls, and some milliseconds.
    let mut readers = parked_readers(&server, path, 1000);
    // Readers hang up as soon as the event reached them, while the lot may still be
    // sweeping (leaving readers are swapped out of the lot mid-sweep); each is let go before
    // any other event, and every other reader got the event.
    assert_eq!(client.post(path, "text/plain", b"swept").status, 204);
    for mut reader in readers.drain(..10) {
        reader.read_until("swept");
    }
    server.wait_for_metric("ds_sse_parked_readers", 990);
    for reader in &mut readers {
        reader.read_until("swept");
    }
}

#[test]
fn a_connection_carries_on_after_its_parked_answer_ends() {
    let server = Server::start(&[]);
    let client = server.client();
    let path = "/v1/stream/parked-keep-alive";
    assert_eq!(client.put(path, "text/plain", b"first").status, 201);
    let mut reader = Raw::send(address(&server), &sse_request(path));
    reader.read_until("upToDate");
    server.wait_for_metric("ds_sse_parked_readers", 1);
    assert_eq!(client.send("POST", path, &[("Stream-Closed", "true")], b"").status, 204);
    reader.read_until("\r\n0\r\n\r\n");
    assert!(reader.text().contains("streamClosed"), "{}", reader.text());
    // The same connection serves the next request.
    reader.socket.write_all(b"GET /healthz HTTP/1.1\r\nHost: ds\r\nConnection: close\r\n\r\n").unwrap();
    let after = reader.read_until("\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n");
    assert_eq!(after.matches("HTTP/1.1 200 OK").count(), 2, "{after}");
}

#[test]
fn a_request_pipelined_behind_a_parked_answer_is_served_after_it() {
    let server = Server::start(&[]);
    let client = server.client();
    let path = "/v1/stream/parked-pipelined";
    assert_eq!(client.put(path, "text/plain", b"").status, 201);
    let both = format!("{}GET /healthz HTTP/1.1\r\nHost: ds\r\nConnection: close\r\n\r\n", sse_request(path));
    let mut reader = Raw::send(address(&server), &both);
    reader.read_until("upToDate");
    server.wait_for_metric("ds_sse_parked_readers", 1);
    assert_eq!(client.post(path, "text/plain", b"while parked").status, 204);
    reader.read_until("while parked");
    assert_eq!(reader.text().matches("HTTP/1.1 200 OK").count(), 1, "the health check waits its turn");
    assert_eq!(client.send("POST", path, &[("Stream-Closed", "true")], b"").status, 204);
    let text = reader.read_until("\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n");
    assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 2, "{text}");
}

#[test]
fn readers_beyond_one_lot_are_all_served() {
    let server = Server::start(&[]);
    let client = server.client();
    let path = "/v1/stream/parked-many";
    // One lot holds 1,024 readers.
    let mut readers = parked_readers(&server, path, 1100);
    for i in 0..3 {
        assert_eq!(client.post(path, "text/plain", format!("wide-{i}").as_bytes()).status, 204);
    }
    for reader in &mut readers {
        let text = reader.read_until("wide-2");
        assert!(text.contains("wide-0") && text.contains("wide-1"), "{text}");
    }
}
