//! Requests at the edges of what the protocol and HTTP/1.1 allow, against the real server.
//!
//! - A `cursor` past what a `u64` holds (PROTOCOL.md §8.1) still gets a cursor strictly
//!   greater than it, on long-poll and SSE: cursors are decimal interval numbers the client
//!   echoes, and they must never go back or repeat.
//! - A `Transfer-Encoding` other than `chunked` alone (`gzip, chunked`) is 501 with a
//!   problem document, and nothing of its body is stored: the chunked framing comes off,
//!   but the coding under it would be stored still encoded (RFC 9112 §6.1).

use std::time::Duration;

use ds_tests::Server;

/// Whether decimal `a` is greater than decimal `b` (both without leading zeros).
fn greater(a: &str, b: &str) -> bool {
    a.len() > b.len() || (a.len() == b.len() && a > b)
}

const HUGE_CURSORS: [&str; 3] =
    ["18446744073709551615", "18446744073709551616", "999999999999999999999999999999999999999999"];

#[test]
fn cursors_past_u64_get_a_strictly_greater_cursor() {
    let server = Server::start_in("memory", &[]);
    let client = server.client();
    assert_eq!(client.put("/v1/stream/c", "text/plain", b"x").status, 201);
    assert_eq!(client.put("/v1/stream/closed", "text/plain", b"x").status, 201);
    let close = client.send("POST", "/v1/stream/closed", &[("Stream-Closed", "true")], b"");
    assert_eq!(close.status, 204);
    let tail = client.head("/v1/stream/closed").next_offset();
    for echoed in HUGE_CURSORS {
        // A closed stream's long-poll at its tail answers at once (204, with a cursor).
        let polled = client.get(&format!("/v1/stream/closed?offset={tail}&live=long-poll&cursor={echoed}"));
        assert_eq!(polled.status, 204, "{echoed}");
        let cursor = polled.header("stream-cursor").expect("a cursor");
        assert!(greater(cursor, echoed), "long-poll: {cursor} after {echoed}");
        // From the start: data at once, with the cursor beside it.
        let read = client.get(&format!("/v1/stream/c?offset=-1&live=long-poll&cursor={echoed}"));
        assert_eq!(read.status, 200, "{echoed}");
        assert!(greater(read.header("stream-cursor").unwrap(), echoed), "long-poll with data");
        let mut events = client.open_stream(&format!("/v1/stream/c?offset=-1&live=sse&cursor={echoed}"), &[]);
        let text = events.read_until("streamCursor", Duration::from_secs(10));
        let rest = text.split("\"streamCursor\":\"").nth(1).expect("a control event with a cursor");
        let cursor = rest.split('"').next().unwrap();
        assert!(greater(cursor, echoed), "SSE: {cursor} after {echoed}");
    }
}

#[test]
fn transfer_codings_other_than_chunked_alone_are_501() {
    for mode in ["memory", "acid"] {
        let server = Server::start_in(mode, &[]);
        let client = server.client();
        assert_eq!(client.put("/v1/stream/t", "application/octet-stream", b"").status, 201);
        for coding in ["gzip, chunked", "deflate,chunked", "chunked, chunked", "identity, chunked"] {
            let request = format!(
                "POST /v1/stream/t HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: {coding}\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
            );
            let refused = client.raw(request.as_bytes(), false);
            assert_eq!(refused.status, 501, "{mode}: {coding}: {}", refused.text());
            assert_eq!(refused.header("content-type"), Some("application/problem+json"), "{mode}: {coding}");
        }
        let chunked = b"POST /v1/stream/t HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: Chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
        assert_eq!(client.raw(chunked, false).status, 204, "{mode}: chunked alone is taken");
        assert_eq!(client.get("/v1/stream/t").body, b"hello", "{mode}: only the chunked append is stored");
    }
}
