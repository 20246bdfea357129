//! HTTP/2 with prior knowledge on plain TCP: every operation over one multiplexed
//! connection (live reads beside appends), the limits a connection and all of them get, a
//! graceful stop with HTTP/2 readers open, and `DS_SERVER__HTTP2=false`. HTTP/2 over TLS
//! (ALPN `h2`) is in `tls.rs`.

use std::io::{Read, Write};
use std::time::Duration;

use ds_tests::http2::Http2;
use ds_tests::Server;
use tokio::net::TcpStream;

/// What every server of these tests runs with: long-polls wait long enough to be counted.
const ENV: &[(&str, &str)] = &[("DS_SERVER__LONG_POLL_TIMEOUT_SECS", "20")];

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime")
}

async fn connect(server: &Server) -> Http2 {
    let socket = TcpStream::connect(server.addr).await.expect("connect");
    Http2::connect(socket, &format!("http://{}", server.addr)).await.expect("an HTTP/2 handshake")
}

/// Create, append, catch-up, HEAD, long-poll and SSE (woken by appends on the same
/// connection), close, delete: all on one connection.
async fn session(server: &Server) {
    let mut h2 = connect(server).await;
    let text = [("content-type", "text/plain")];
    let created = h2.send("PUT", "/v1/stream/h2", &text, b"").await;
    assert_eq!(created.status, 201, "{}", created.text());
    let location = created.header("location").expect("Location");
    assert_eq!(location, format!("http://{}/v1/stream/h2", server.addr), "Location from :authority");
    let appended = h2.send("POST", "/v1/stream/h2", &text, b"hello").await;
    assert_eq!(appended.status, 204, "a body without content-length: {}", appended.text());
    let read = h2.send("GET", "/v1/stream/h2?offset=-1", &[], b"").await;
    assert_eq!((read.status, read.text().as_str()), (200, "hello"));
    let tail = read.header("stream-next-offset").expect("Stream-Next-Offset").to_string();
    let head = h2.send("HEAD", "/v1/stream/h2", &[], b"").await;
    assert_eq!((head.status, head.header("stream-next-offset")), (200, Some(tail.as_str())));

    let long_poll = h2.open("GET", &format!("/v1/stream/h2?offset={tail}&live=long-poll"), &[], b"").await;
    let mut sse = h2.start("GET", &format!("/v1/stream/h2?offset={tail}&live=sse"), &[], b"").await;
    assert_eq!(sse.status, 200);
    assert_eq!(sse.headers.get("content-type").map(|v| v.to_str().unwrap()), Some("text/event-stream"));
    sse.read_until("upToDate").await;
    assert_eq!(h2.send("POST", "/v1/stream/h2", &text, b" world").await.status, 204);
    let woken = long_poll.whole().await;
    assert_eq!((woken.status, woken.text().as_str()), (200, " world"));
    assert!(sse.read_until(" world").await.contains("data:  world"), "{}", sse.text);

    let closed = h2.send("POST", "/v1/stream/h2", &[("stream-closed", "true")], b"").await;
    assert_eq!((closed.status, closed.header("stream-closed")), (204, Some("true")));
    assert!(sse.read_until("streamClosed").await.contains("\"streamClosed\":true"), "{}", sse.text);
    let refused = h2.send("POST", "/v1/stream/h2", &text, b"late").await;
    assert_eq!(refused.status, 409);
    assert_eq!(refused.header("content-type"), Some("application/problem+json"));
    assert_eq!(h2.send("DELETE", "/v1/stream/h2", &[], b"").await.status, 204);
    assert_eq!(h2.send("GET", "/v1/stream/h2?offset=-1", &[], b"").await.status, 404);
}

#[test]
fn every_operation_works_over_one_http2_connection() {
    let server = Server::start(ENV);
    runtime().block_on(session(&server));
    assert!(server.metric("ds_http2_connections_total") >= 1);
}

#[test]
fn http2_works_with_the_bare_front_off_and_in_acid() {
    let env = [ENV, &[("DS_SERVER__BARE_FRONT", "false")]].concat();
    let server = Server::start(&env);
    runtime().block_on(session(&server));
    let acid = Server::start_in("acid", ENV);
    runtime().block_on(session(&acid));
}

/// A connection is told it may open 100 requests at once; all HTTP/2 requests together
/// take at most `DS_SERVER__MAX_CONNECTIONS` (here 4), the next one is a 503 that says
/// so, and a request whose answer ended gives its place back.
#[test]
fn http2_requests_are_limited_per_connection_and_in_all() {
    let mut server = Server::start(&[ENV, &[("DS_SERVER__MAX_CONNECTIONS", "4")]].concat());
    let client = server.client();
    assert_eq!(client.put("/v1/stream/busy", "text/plain", b"").status, 201);
    runtime().block_on(async {
        let mut h2 = connect(&server).await;
        assert_eq!(h2.send("GET", "/healthz", &[], b"").await.status, 200);
        assert_eq!(h2.streams_max(), 100, "SETTINGS_MAX_CONCURRENT_STREAMS");
        let mut waiting = Vec::new();
        for _ in 0..4 {
            waiting.push(h2.open("GET", "/v1/stream/busy?offset=now&live=long-poll", &[], b"").await);
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while server.metric("ds_live_readers") < 4 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let refused = h2.send("GET", "/healthz", &[], b"").await;
        assert_eq!(refused.status, 503, "{}", refused.text());
        assert_eq!(refused.header("retry-after"), Some("1"));
        assert!(refused.text().contains("too-many-requests"), "{}", refused.text());
        assert_eq!(server.metric("ds_http2_refused_total"), 1);

        assert_eq!(client.post("/v1/stream/busy", "text/plain", b"go").status, 204);
        for answer in waiting {
            let answer = answer.whole().await;
            assert_eq!((answer.status, answer.text().as_str()), (200, "go"));
        }
        assert_eq!(h2.send("GET", "/healthz", &[], b"").await.status, 200, "places came back");
    });
    assert!(server.terminate().success());
    let log = server.log();
    let refused = log.lines().filter(|line| line.contains("ds::access") && line.contains("status=503"));
    assert_eq!(refused.count(), 1, "the refusal is in the access log:\n{log}");
}

/// An append past `DS_LIMITS__MAX_APPEND_BYTES` gets its 413 problem over HTTP/2 whether
/// its length was declared (refused before a byte is read) or not (refused at the limit),
/// and the connection stays usable.
#[test]
fn an_oversized_http2_append_gets_its_problem_and_the_connection_stays() {
    let server = Server::start(&[ENV, &[("DS_LIMITS__MAX_APPEND_BYTES", "1024")]].concat());
    runtime().block_on(async {
        let mut h2 = connect(&server).await;
        let bytes = [("content-type", "application/octet-stream")];
        assert_eq!(h2.send("PUT", "/v1/stream/big", &bytes, b"").await.status, 201);
        let body = vec![7u8; 256 * 1024];
        let declared = [bytes[0], ("content-length", "262144")];
        for headers in [&declared[..], &bytes[..]] {
            let refused = h2.send("POST", "/v1/stream/big", headers, &body).await;
            assert_eq!(refused.status, 413, "{headers:?}: {}", refused.text());
            assert_eq!(refused.header("content-type"), Some("application/problem+json"));
        }
        assert_eq!(h2.send("POST", "/v1/stream/big", &bytes, b"fits").await.status, 204);
        let read = h2.send("GET", "/v1/stream/big?offset=-1", &[], b"").await;
        assert_eq!(
            (read.status, read.text().as_str()),
            (200, "fits"),
            "nothing of the refused bodies stored"
        );
    });
}

/// How long a test waits for the server to act on a stalled HTTP/2 client.
const STALL_WAIT: Duration = Duration::from_secs(20);

/// Waits until `h2`'s connection has ended or `STALL_WAIT` passed; whether it ended.
async fn ended_in_time(h2: &Http2) -> bool {
    let deadline = tokio::time::Instant::now() + STALL_WAIT;
    while !h2.ended() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    h2.ended()
}

/// A client that takes its answers' heads and then grants no flow-control window, while
/// its connection stays healthy (it answers pings, it could send requests), holds every
/// answer's place in the HTTP/2 budget: past the write-stall timeout the server closes
/// that connection as it closes an HTTP/1.1 one whose client stopped reading, and the
/// places come back. A client that reads keeps its connection.
#[test]
fn a_connection_whose_answers_stall_in_flow_control_is_closed() {
    let env =
        [ENV, &[("DS_SERVER__MAX_CONNECTIONS", "3"), ("DS_SERVER__WRITE_STALL_TIMEOUT_SECS", "1")]].concat();
    let server = Server::start(&env);
    let big = vec![b'x'; 512 * 1024];
    assert_eq!(server.client().put("/v1/stream/big", "text/plain", &big).status, 201);
    runtime().block_on(async {
        let mut stalled = connect(&server).await;
        let mut heads = Vec::new();
        for _ in 0..3 {
            heads.push(stalled.start("GET", "/v1/stream/big?offset=-1", &[], b"").await);
        }
        assert!(heads.iter().all(|head| head.status == 200));
        let mut reader = connect(&server).await;
        assert_eq!(reader.send("GET", "/healthz", &[], b"").await.status, 503, "the budget is held");
        assert!(ended_in_time(&stalled).await, "the stalled connection was not closed");
        let read = reader.send("GET", "/v1/stream/big?offset=-1", &[], b"").await;
        assert_eq!((read.status, read.body.len()), (200, big.len()), "places came back; a reader is served");
        assert!(!reader.ended(), "a connection that reads stays");
    });
    assert_eq!(server.metric("ds_errors_total{kind=\"write-stall\"}"), 1);
}

/// An HTTP/2 connection with no request open for the idle timeout is sent away (GOAWAY,
/// then closed) as an idle HTTP/1.1 connection is, even while it answers pings (a
/// long-poll waiting past that timeout is a request open and keeps it); so is one
/// whose answers the server finished but whose client never took them in full (they wait in
/// the connection for a flow-control window), once the write-stall timeout after the GOAWAY
/// has passed.
#[test]
fn an_idle_http2_connection_is_closed() {
    let env = [ENV, &[("DS_SERVER__IDLE_TIMEOUT_SECS", "1"), ("DS_SERVER__WRITE_STALL_TIMEOUT_SECS", "2")]]
        .concat();
    let server = Server::start(&env);
    let small = vec![b'x'; 8 * 1024];
    let client = server.client();
    assert_eq!(client.put("/v1/stream/small", "text/plain", &small).status, 201);
    runtime().block_on(async {
        let mut idle = connect(&server).await;
        let tail = idle.send("HEAD", "/v1/stream/small", &[], b"").await;
        let tail = tail.header("stream-next-offset").expect("Stream-Next-Offset").to_string();
        let waiting =
            idle.open("GET", &format!("/v1/stream/small?offset={tail}&live=long-poll"), &[], b"").await;
        tokio::time::sleep(Duration::from_millis(4000)).await;
        assert!(!idle.ended(), "a waiting long-poll is a request open, not idleness");
        assert_eq!(client.post("/v1/stream/small", "text/plain", b"!").status, 204);
        let woken = waiting.whole().await;
        assert_eq!((woken.status, woken.text().as_str()), (200, "!"));
        assert!(ended_in_time(&idle).await, "the idle connection was not closed");

        let socket = TcpStream::connect(server.addr).await.expect("connect");
        let origin = format!("http://{}", server.addr);
        let mut stuck = Http2::connect_with_window(socket, &origin, 1024).await.expect("a handshake");
        let mut heads = Vec::new();
        for _ in 0..4 {
            heads.push(stuck.start("GET", "/v1/stream/small?offset=-1", &[], b"").await);
        }
        assert!(heads.iter().all(|head| head.status == 200));
        assert!(ended_in_time(&stuck).await, "the connection with stuck answers was not closed");
    });
    assert_eq!(server.metric("ds_errors_total{kind=\"write-stall\"}"), 0, "nothing stalled while open");
}

/// SIGTERM with an HTTP/2 SSE reader open: the reader's answer ends and the server exits
/// cleanly.
#[test]
fn a_server_with_http2_readers_stops_cleanly() {
    let mut server = Server::start(ENV);
    assert_eq!(server.client().put("/v1/stream/stop", "text/plain", b"x").status, 201);
    let rt = runtime();
    let mut h2 = rt.block_on(connect(&server));
    let mut sse = rt.block_on(h2.start("GET", "/v1/stream/stop?offset=-1&live=sse", &[], b""));
    rt.block_on(sse.read_until("upToDate"));
    let status = server.terminate();
    assert!(status.success(), "stopped with {status}; log:\n{}", server.log());
}

/// A client that sends part of the connection preface and stops is disconnected once the
/// head read timeout (30 s) passes, as a slow HTTP/1.1 head is (hyper's HTTP/2 would wait
/// for the rest for ever, its pings not yet started).
#[test]
fn a_connection_stalled_in_its_preface_is_closed() {
    let server = Server::start(ENV);
    let mut socket = std::net::TcpStream::connect(server.addr).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    socket.write_all(b"PRI * HTTP/2.0\r\n\r\n").unwrap();
    let started = std::time::Instant::now();
    let mut answer = Vec::new();
    let ended = socket.read_to_end(&mut answer);
    assert!(ended.is_ok(), "the server closed the connection: {ended:?} after {:?}", started.elapsed());
    assert!(started.elapsed() < Duration::from_secs(45), "closed after {:?}", started.elapsed());
}

/// `DS_SERVER__HTTP2=false`: the preface is not served as HTTP/2 (no frame comes back);
/// HTTP/1.1 still is.
#[test]
fn http2_can_be_turned_off() {
    let server = Server::start(&[ENV, &[("DS_SERVER__HTTP2", "false")]].concat());
    let mut socket = std::net::TcpStream::connect(server.addr).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    socket.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0").unwrap();
    let mut answer = Vec::new();
    let _ = socket.read_to_end(&mut answer);
    assert!(answer.is_empty() || answer.starts_with(b"HTTP/1.1 "), "no HTTP/2 frames: {answer:?}");
    assert_eq!(server.metric("ds_http2_connections_total"), 0);
    assert_eq!(server.client().get("/healthz").status, 200);
}
