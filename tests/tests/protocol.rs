//! Protocol behaviour of the built `ds-server`, beyond what the conformance suite pins down:
//! the decisions taken where the spec is silent or loose (names, offsets, partial reads,
//! exact JSON, SSE ids and resumption, problem documents, limits, CORS).

use std::time::Duration;

use ds_tests::{Client, Server};

/// The storage modes every case runs in.
macro_rules! in_every_mode {
    ($($case:ident),* $(,)?) => {
        mod memory {
            $( #[test] fn $case() { super::$case("memory") } )*
        }
        mod acid {
            $( #[test] fn $case() { super::$case("acid") } )*
        }
    };
}

fn create(client: &Client, path: &str, content_type: &str, body: &[u8]) {
    let response = client.put(path, content_type, body);
    assert_eq!(response.status, 201, "create {path}: {}", response.text());
}

fn offsets_are_fixed_width_and_must_be_message_boundaries(mode: &str) {
    let server = Server::start_in(mode, &[]);
    let client = server.client();
    create(&client, "/v1/stream/o", "text/plain", b"abc");
    let tail = client.post("/v1/stream/o", "text/plain", b"defg").next_offset();
    assert_eq!(tail, "0000000000000002_0000000000000007");
    let middle = client.get("/v1/stream/o?offset=0000000000000001_0000000000000003");
    assert_eq!((middle.status, middle.text()), (200, "defg".to_string()));
    for bad in [
        "0000000000000001_0000000000000002",
        "0000000000000002_0000000000000003",
        "0000000000000003_000000000000000a",
        "0000000000000001_0000000000000003x",
        "1_3",
    ] {
        let response = client.get(&format!("/v1/stream/o?offset={bad}"));
        assert_eq!(response.status, 400, "offset {bad}");
        assert_eq!(response.header("content-type"), Some("application/problem+json"));
    }
}

fn errors_are_problem_documents_and_routes_are_strict(mode: &str) {
    let server = Server::start_in(mode, &[]);
    let client = server.client();
    let missing = client.get("/v1/stream/nope");
    assert_eq!(missing.status, 404);
    let problem = missing.json();
    assert_eq!(problem["status"], 404);
    assert!(problem["type"].as_str().unwrap().starts_with("urn:ds:problem:"));
    assert!(problem["title"].is_string() && problem["detail"].is_string());
    assert_eq!(missing.header("cache-control"), Some("no-store"));
    assert_eq!(missing.header("x-content-type-options"), Some("nosniff"));

    let unknown = client.get("/v2/elsewhere");
    assert_eq!((unknown.status, unknown.json()["status"].as_u64()), (404, Some(404)));
    let patch = client.send("PATCH", "/v1/stream/x", &[], b"");
    assert_eq!(patch.status, 405);
    assert!(patch.header("allow").unwrap().contains("POST"));
    let health_post = client.send("POST", "/healthz", &[], b"");
    assert_eq!((health_post.status, health_post.header("allow")), (405, Some("GET, HEAD")));
    let health = client.get("/healthz");
    assert_eq!((health.status, health.text()), (200, "ok".to_string()));
}

fn stream_names_follow_the_naming_rules(mode: &str) {
    let server = Server::start_in(mode, &[]);
    let client = server.client();
    create(&client, "/v1/stream/tenant/orders/2024", "text/plain", b"nested");
    assert_eq!(
        client.get("/v1/stream/tenant%2Forders%2F2024").text(),
        "nested",
        "percent-decoded before use"
    );
    create(&client, "/v1/stream/caf%C3%A9", "text/plain", b"utf8");
    for bad in [
        "/v1/stream/",
        "/v1/stream/a//b",
        "/v1/stream/a/../b",
        "/v1/stream/a/%2E",
        "/v1/stream/__ds/subscriptions",
        "/v1/stream/a/b/c/d/e/f/g/h/i",
        "/v1/stream/bad%zz",
        "/v1/stream/nul%00",
    ] {
        let response = client.put(bad, "text/plain", b"");
        assert_eq!(response.status, 400, "{bad}: {}", response.text());
    }
    let long = format!("/v1/stream/{}", "n".repeat(1025));
    assert_eq!(client.put(&long, "text/plain", b"").status, 400);
    let longest = format!("/v1/stream/{}", "n".repeat(1024));
    assert_eq!(client.put(&longest, "text/plain", b"").status, 201);
}

fn json_messages_keep_their_exact_text(mode: &str) {
    let server = Server::start_in(mode, &[]);
    let client = server.client();
    create(&client, "/v1/stream/j", "application/json", b"");
    let body = br#"[ {"z":1,"a":[1,2]} , 12345678901234567890123456789 , 1.50E+3, "x,\"y\"" ]"#;
    assert_eq!(client.post("/v1/stream/j", "application/json", body).status, 204);
    assert_eq!(client.post("/v1/stream/j", "application/json", b"  {\"k\" : true}\n").status, 204);
    let read = client.get("/v1/stream/j");
    assert_eq!(
        read.text(),
        r#"[{"z":1,"a":[1,2]},12345678901234567890123456789,1.50E+3,"x,\"y\"",{"k" : true}]"#
    );
    assert_eq!(client.post("/v1/stream/j", "application/json", b"[]").status, 400);
    assert_eq!(client.post("/v1/stream/j", "application/json", b"{oops").status, 400);
    let offset_after_two = "0000000000000002_0000000000000030";
    let from_middle = client.get(&format!("/v1/stream/j?offset={offset_after_two}"));
    assert_eq!(from_middle.text(), r#"[1.50E+3,"x,\"y\"",{"k" : true}]"#);
    json_messages_nest_within_what_parsers_take(&client);
}

/// A message nested past `MESSAGE_DEPTH_MAX` would make every read through it unreadable to
/// strict parsers: refused, on append and as a create's initial data, and nothing stored.
fn json_messages_nest_within_what_parsers_take(client: &Client) {
    let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes();
    let tail = client.get("/v1/stream/j").next_offset();
    for too_deep in
        [nested(128), format!("{{\"a\":{}}}", String::from_utf8(nested(126)).unwrap()).into_bytes()]
    {
        let refused = client.post("/v1/stream/j", "application/json", &too_deep);
        assert_eq!(refused.status, 400);
        assert_eq!(refused.json()["type"], "urn:ds:problem:invalid-json");
    }
    assert_eq!(client.post("/v1/stream/j", "application/json", &nested(100_000)).status, 400);
    assert_eq!(client.put("/v1/stream/deep", "application/json", &nested(128)).status, 400);
    assert_eq!(client.head("/v1/stream/deep").status, 404, "a refused create makes nothing");
    assert_eq!(client.get("/v1/stream/j").next_offset(), tail, "refused appends store nothing");
    assert_eq!(
        client.post("/v1/stream/j", "application/json", &nested(127)).status,
        204,
        "messages 126 deep"
    );
    let read = client.get(&format!("/v1/stream/j?offset={tail}"));
    let messages: serde_json::Value = serde_json::from_slice(&read.body).expect("serde_json takes the read");
    assert_eq!(messages.as_array().map(Vec::len), Some(1));
}

fn catch_up_reads_are_capped_and_resume_at_the_next_offset(mode: &str) {
    let server = Server::start_in(mode, &[("DS_LIMITS__MAX_READ_BYTES", "1024")]);
    let client = server.client();
    create(&client, "/v1/stream/big", "application/octet-stream", b"");
    let message: Vec<u8> = (0..300).map(|i| (i % 251) as u8).collect();
    for _ in 0..10 {
        assert_eq!(client.post("/v1/stream/big", "application/octet-stream", &message).status, 204);
    }
    let mut offset = "-1".to_string();
    let mut collected = Vec::new();
    let mut responses = 0;
    loop {
        let response = client.get(&format!("/v1/stream/big?offset={offset}"));
        responses += 1;
        assert_eq!(response.status, 200);
        assert!(response.body.len() <= 1024, "capped at whole messages");
        collected.extend_from_slice(&response.body);
        offset = response.next_offset();
        if response.header("stream-up-to-date") == Some("true") {
            break;
        }
        assert!(!response.body.is_empty(), "a partial read always makes progress");
    }
    assert_eq!(responses, 4, "300-byte messages, 3 per response");
    assert_eq!(collected, message.repeat(10));
}

/// Answers of several megabytes made of many small messages (in acid mode: copied through
/// gather buffers, whose edges cut messages and the head; in memory mode one body frame of
/// dozens of block slices) arrive byte for byte, written by the bare front and by hyper.
fn large_answers_of_small_messages_arrive_intact(mode: &str) {
    for bare_front in ["true", "false"] {
        large_answers_arrive_intact_from(&Server::start_in(
            mode,
            &[("DS_LIMITS__MAX_READ_BYTES", "3000000"), ("DS_SERVER__BARE_FRONT", bare_front)],
        ));
    }
}

fn large_answers_arrive_intact_from(server: &Server) {
    let client = server.client();
    create(&client, "/v1/stream/many", "application/octet-stream", b"");
    let mut expected = Vec::new();
    for n in 0..1500u32 {
        let message: Vec<u8> = (0..3001u32).map(|i| (i.wrapping_mul(31) ^ n) as u8).collect();
        assert_eq!(client.post("/v1/stream/many", "application/octet-stream", &message).status, 204);
        expected.extend_from_slice(&message);
    }
    let (mut offset, mut collected, mut responses) = ("-1".to_string(), Vec::new(), 0);
    while collected.len() < expected.len() {
        let response = client.get(&format!("/v1/stream/many?offset={offset}"));
        assert_eq!(response.status, 200);
        assert!(!response.body.is_empty() && response.body.len() <= 3_000_000);
        assert_eq!(response.header("content-length"), Some(response.body.len().to_string().as_str()));
        collected.extend_from_slice(&response.body);
        offset = response.next_offset();
        responses += 1;
    }
    assert!(responses >= 2, "the cap splits 4.5 MB into several answers");
    assert!(collected == expected, "the bytes read are the bytes appended");
}

fn etags_follow_start_and_end_and_mark_closed_tails(mode: &str) {
    let server = Server::start_in(mode, &[]);
    let client = server.client();
    create(&client, "/v1/stream/e", "text/plain", b"hi");
    let read = client.get("/v1/stream/e");
    let etag = read.header("etag").unwrap().to_string();
    assert_eq!(etag, "\"-1:0000000000000001_0000000000000002\"");
    let cached = client.send("GET", "/v1/stream/e", &[("If-None-Match", &etag)], b"");
    assert_eq!(cached.status, 304);
    assert_eq!(cached.header("stream-next-offset"), Some("0000000000000001_0000000000000002"));
    assert_eq!(cached.header("stream-up-to-date"), Some("true"));
    assert_eq!(cached.header("cache-control"), Some("no-store"));
    client.send("POST", "/v1/stream/e", &[("Stream-Closed", "true")], b"");
    let closed = client.get("/v1/stream/e?offset=now");
    assert_eq!(closed.header("etag"), Some("\"now:0000000000000001_0000000000000002:c\""));
    assert_eq!(
        client.send("GET", "/v1/stream/e", &[("If-None-Match", &etag)], b"").status,
        200,
        "closing changes the ETag"
    );
}

fn head_reports_remaining_ttl_and_expiry_without_renewing(mode: &str) {
    let server = Server::start_in(mode, &[]);
    let client = server.client();
    let response = client.send("PUT", "/v1/stream/t", &[("Stream-TTL", "120")], b"");
    assert_eq!(response.status, 201);
    assert_eq!(response.header("content-type"), Some("application/octet-stream"), "default content type");
    let head = client.head("/v1/stream/t");
    assert_eq!(head.header("stream-ttl"), Some("120"));
    assert_eq!(head.header("stream-closed"), None);
    assert_eq!(head.header("content-type"), Some("application/octet-stream"));
    let at = "2099-01-02T03:04:05.678Z";
    client.send("PUT", "/v1/stream/x", &[("Stream-Expires-At", "2099-01-02T04:04:05.678+01:00")], b"");
    assert_eq!(client.head("/v1/stream/x").header("stream-expires-at"), Some(at));
    let both = [("Stream-TTL", "5"), ("Stream-Expires-At", at)];
    assert_eq!(client.send("PUT", "/v1/stream/y", &both, b"").status, 400);
    let same = client.send("PUT", "/v1/stream/x", &[("Stream-Expires-At", at)], b"");
    assert_eq!(same.status, 200, "the same instant in another spelling is the same config");
}

fn put_compares_the_closed_state(mode: &str) {
    let server = Server::start_in(mode, &[]);
    let client = server.client();
    let closed = [("Content-Type", "text/plain"), ("Stream-Closed", "true")];
    assert_eq!(client.send("PUT", "/v1/stream/c", &closed, b"").status, 201);
    assert_eq!(client.send("PUT", "/v1/stream/c", &closed, b"").status, 200);
    let open = client.put("/v1/stream/c", "text/plain", b"");
    assert_eq!(open.status, 409);
    assert_eq!(open.json()["status"], 409);
}

/// Only `Stream-Closed: true` (any case) closes; every other value is as if the header were
/// absent, with no error (PROTOCOL.md §4.1).
fn stream_closed_is_only_true(mode: &str) {
    let server = Server::start_in(mode, &[]);
    let client = server.client();
    let not_true = ["false", "yes", "1", ""];
    for (index, value) in not_true.iter().enumerate() {
        let path = format!("/v1/stream/n{index}");
        let headers = [("Content-Type", "text/plain"), ("Stream-Closed", value)];
        let created = client.send("PUT", &path, &headers, b"a");
        assert_eq!((created.status, created.header("stream-closed")), (201, None), "PUT {value:?}");
        let appended = client.send("POST", &path, &headers, b"b");
        assert_eq!((appended.status, appended.header("stream-closed")), (204, None), "POST {value:?}");
        assert_eq!(client.put(&path, "text/plain", b"").status, 200, "{value:?}: created open");
        assert_eq!(client.get(&format!("{path}?offset=-1")).body, b"ab");
    }
    let closing = [("Content-Type", "text/plain"), ("Stream-Closed", "TRUE")];
    let closed = client.send("POST", "/v1/stream/n0", &closing, b"c");
    assert_eq!((closed.status, closed.header("stream-closed")), (204, Some("true")));
}

/// A close-only request (no body) is never refused for its `Content-Type`, whatever it is:
/// empty, malformed, given twice or another type (PROTOCOL.md §5.2: clients and libraries
/// attach default headers). With a body, the same headers are still refused.
fn close_only_requests_ignore_their_content_type(mode: &str) {
    let server = Server::start_in(mode, &[]);
    let client = server.client();
    let content_types: [&[&str]; 4] =
        [&[""], &["no slash"], &["text/plain", "text/html"], &["application/json"]];
    for (index, values) in content_types.iter().enumerate() {
        let path = format!("/v1/stream/close{index}");
        create(&client, &path, "text/plain", b"a");
        let mut headers: Vec<(&str, &str)> = values.iter().map(|value| ("Content-Type", *value)).collect();
        headers.push(("Stream-Closed", "true"));
        let with_body = client.send("POST", &path, &headers, b"b");
        let refused = if index == 3 { 409 } else { 400 };
        assert_eq!(with_body.status, refused, "{values:?} with a body: {}", with_body.text());
        for attempt in ["closes", "closes again"] {
            let closed = client.send("POST", &path, &headers, b"");
            let answer = (closed.status, closed.header("stream-closed"));
            assert_eq!(answer, (204, Some("true")), "{values:?} {attempt}: {}", closed.text());
        }
        let read = client.get(&format!("{path}?offset=-1"));
        assert_eq!((read.body.as_slice(), read.header("stream-closed")), (&b"a"[..], Some("true")));
    }
}

/// On a closed stream every append that cannot succeed is a 409 with `Stream-Closed` and
/// the final offset, whatever else is wrong with it (PROTOCOL.md §5.2's precedence).
fn a_closed_stream_is_named_first(mode: &str) {
    let server = Server::start_in(mode, &[]);
    let client = server.client();
    create(&client, "/v1/stream/done", "text/plain", b"");
    let closing = [("Content-Type", "text/plain"), ("Stream-Closed", "true")];
    let tail = client.send("POST", "/v1/stream/done", &closing, b"end").next_offset();
    let producer = |epoch: &'static str, seq: &'static str| {
        [
            ("Content-Type", "text/plain"),
            ("Producer-Id", "p"),
            ("Producer-Epoch", epoch),
            ("Producer-Seq", seq),
        ]
    };
    let refused = [
        client.post("/v1/stream/done", "application/json", b"[1]"),
        client.send("POST", "/v1/stream/done", &producer("0", "3"), b"x"),
        client.send("POST", "/v1/stream/done", &producer("1", "2"), b"x"),
    ];
    for answer in refused {
        assert_eq!(answer.status, 409, "{}", answer.text());
        assert_eq!(answer.header("stream-closed"), Some("true"), "{}", answer.text());
        assert_eq!(answer.header("stream-next-offset"), Some(tail.as_str()));
    }
}

fn long_poll_wakes_on_append_and_times_out_with_204(mode: &str) {
    let server = Server::start_in(mode, &[("DS_SERVER__LONG_POLL_TIMEOUT_SECS", "1")]);
    let client = server.client();
    create(&client, "/v1/stream/lp", "text/plain", b"");
    let tail = client.head("/v1/stream/lp").next_offset();
    let waiting =
        std::thread::spawn(move || client.get(&format!("/v1/stream/lp?offset={tail}&live=long-poll")));
    std::thread::sleep(Duration::from_millis(200));
    client.post("/v1/stream/lp", "text/plain", b"wake");
    let woken = waiting.join().unwrap();
    assert_eq!((woken.status, woken.text()), (200, "wake".to_string()));
    assert!(woken.header("stream-cursor").unwrap().parse::<u64>().is_ok());
    let tail = woken.next_offset();
    let timeout = client.get(&format!("/v1/stream/lp?offset={tail}&live=long-poll"));
    assert_eq!(timeout.status, 204);
    assert_eq!(timeout.header("stream-next-offset"), Some(tail.as_str()));
    assert_eq!(timeout.header("stream-up-to-date"), Some("true"));
}

fn sse_events_carry_ids_and_last_event_id_resumes(mode: &str) {
    let server = Server::start_in(mode, &[]);
    let client = server.client();
    create(&client, "/v1/stream/s", "text/plain", b"one");
    let first_offset = client.get("/v1/stream/s").next_offset();
    client.post("/v1/stream/s", "text/plain", b"two\nlines");
    let mut events = client.open_stream("/v1/stream/s?offset=-1&live=sse", &[]);
    assert_eq!(events.status, 200);
    assert_eq!(events.header("content-type"), Some("text/event-stream"));
    assert_eq!(events.header("cache-control"), Some("no-cache"));
    let text = events.read_until("upToDate", Duration::from_secs(10));
    assert!(text.contains(&format!("event: data\ndata:one\nid:{first_offset}\n\n")), "{text}");
    assert!(text.contains("data:two\ndata:lines\n"), "{text}");
    assert_eq!(text.matches("event: control").count(), 2, "a control event after each data event");

    let mut resumed = client.open_stream("/v1/stream/s?live=sse", &[("Last-Event-ID", &first_offset)]);
    let text = resumed.read_until("upToDate", Duration::from_secs(10));
    assert!(!text.contains("data:one") && text.contains("data:two"), "{text}");
    let mut live = client.open_stream("/v1/stream/s?offset=now&live=sse", &[]);
    live.read_until("upToDate", Duration::from_secs(10));
    client.send(
        "POST",
        "/v1/stream/s",
        &[("Content-Type", "text/plain"), ("Stream-Closed", "true")],
        b"three",
    );
    assert!(live.read_to_end(Duration::from_secs(10)), "the body ends after the closing control event");
    let text = live.text();
    assert!(text.contains("data:three") && text.contains("\"streamClosed\":true"), "{text}");
}

fn sse_connections_close_when_idle(mode: &str) {
    let server = Server::start_in(mode, &[("DS_SERVER__SSE_RECONNECT_INTERVAL_SECS", "1")]);
    let client = server.client();
    create(&client, "/v1/stream/idle", "application/json", b"[1]");
    let mut events = client.open_stream("/v1/stream/idle?offset=-1&live=sse", &[]);
    let text = events.read_until("upToDate", Duration::from_secs(10));
    assert!(text.contains("data:[1]"), "{text}");
    assert!(events.read_to_end(Duration::from_secs(10)), "closed after the idle interval");
    assert!(events.ended_cleanly(), "with the terminating chunk");
}

fn bodies_and_streams_are_bounded_with_413(mode: &str) {
    // A stream costs 512 bytes besides its name, its content type and its data, an append
    // 64 besides its data: `a` with 900 bytes costs 1,437, `b` with 500 costs 1,037, and 200
    // more to `b` (264) only fit once `a` is gone.
    let server = Server::start_in(
        mode,
        &[("DS_LIMITS__MAX_STREAM_BYTES", "1000"), ("DS_LIMITS__MAX_MEMORY_BYTES", "2700")],
    );
    let client = server.client();
    create(&client, "/v1/stream/a", "application/octet-stream", &[1; 900]);
    assert_eq!(
        client.post("/v1/stream/a", "application/octet-stream", &[2; 200]).status,
        413,
        "stream limit"
    );
    let huge = client.post("/v1/stream/a", "application/octet-stream", &[3; 5000]);
    assert_eq!(huge.status, 413, "body larger than any stream may hold");
    let chunked = b"POST /v1/stream/a HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n7d0\r\n"
        .iter()
        .copied()
        .chain(std::iter::repeat_n(4u8, 2000))
        .chain(b"\r\n0\r\n\r\n".iter().copied())
        .collect::<Vec<u8>>();
    assert_eq!(client.raw(&chunked, false).status, 413, "chunked bodies are bounded too");
    create(&client, "/v1/stream/b", "application/octet-stream", &[1; 500]);
    let over_total = client.post("/v1/stream/b", "application/octet-stream", &[1; 200]);
    assert_eq!(over_total.status, 413, "memory limit across streams");
    assert_eq!(client.get("/v1/stream/a").body.len(), 900, "refused appends store nothing");
    assert_eq!(client.delete("/v1/stream/a").status, 204);
    assert_eq!(
        client.post("/v1/stream/b", "application/octet-stream", &[1; 200]).status,
        204,
        "deletes free memory"
    );
}

/// The largest append is its own limit: a stream grows past it by appends under it, and
/// a body over it is refused (413 `append-too-large`) whatever room the stream has.
fn appends_have_their_own_limit_under_the_stream_limit(mode: &str) {
    let server = Server::start_in(
        mode,
        &[("DS_LIMITS__MAX_STREAM_BYTES", "1000000"), ("DS_LIMITS__MAX_APPEND_BYTES", "1000")],
    );
    let client = server.client();
    create(&client, "/v1/stream/a", "application/octet-stream", &[1; 1000]);
    for _ in 0..4 {
        assert_eq!(client.post("/v1/stream/a", "application/octet-stream", &[2; 1000]).status, 204);
    }
    let over = client.post("/v1/stream/a", "application/octet-stream", &[3; 1001]);
    assert_eq!(over.status, 413, "{}", over.text());
    let too_big_create = client.put("/v1/stream/b", "application/octet-stream", &[1; 1001]);
    assert_eq!(too_big_create.status, 413, "a create's initial data too");
    assert_eq!(client.get("/v1/stream/a").body.len(), 5000, "a refused append stores nothing");
}

fn cors_follows_the_configured_origins(mode: &str) {
    let server =
        Server::start_in(mode, &[("DS_HTTP__CORS_ORIGINS", "https://app.example,https://other.example")]);
    let client = server.client();
    let allowed = client.send("GET", "/healthz", &[("Origin", "https://app.example")], b"");
    assert_eq!(allowed.header("access-control-allow-origin"), Some("https://app.example"));
    assert!(allowed.header("access-control-expose-headers").unwrap().contains("Stream-Next-Offset"));
    let denied = client.send("GET", "/healthz", &[("Origin", "https://evil.example")], b"");
    assert_eq!(denied.header("access-control-allow-origin"), None);
    let preflight = client.send(
        "OPTIONS",
        "/v1/stream/x",
        &[("Origin", "https://app.example"), ("Access-Control-Request-Method", "POST")],
        b"",
    );
    assert_eq!(preflight.status, 204);
    let allowed_headers = preflight.header("access-control-allow-headers").unwrap();
    assert!(allowed_headers.contains("Producer-Id"));
    assert!(allowed_headers.contains("Stream-Forked-From"), "a browser may create a fork: {allowed_headers}");
    assert!(preflight.header("access-control-allow-methods").unwrap().contains("DELETE"));
}

fn sigterm_ends_live_reads_and_exits_cleanly(mode: &str) {
    let mut server = Server::start_in(mode, &[]);
    let client = server.client();
    create(&client, "/v1/stream/bye", "text/plain", b"x");
    let mut events = client.open_stream("/v1/stream/bye?offset=now&live=sse", &[]);
    events.read_until("upToDate", Duration::from_secs(10));
    let status = server.terminate();
    assert!(status.success(), "exit status {status:?}; log:\n{}", server.log());
    assert!(events.read_to_end(Duration::from_secs(10)), "the SSE body ended");
    assert!(server.log().contains("ds-server stopped"));
}

in_every_mode!(
    offsets_are_fixed_width_and_must_be_message_boundaries,
    errors_are_problem_documents_and_routes_are_strict,
    stream_names_follow_the_naming_rules,
    json_messages_keep_their_exact_text,
    catch_up_reads_are_capped_and_resume_at_the_next_offset,
    large_answers_of_small_messages_arrive_intact,
    etags_follow_start_and_end_and_mark_closed_tails,
    head_reports_remaining_ttl_and_expiry_without_renewing,
    put_compares_the_closed_state,
    stream_closed_is_only_true,
    close_only_requests_ignore_their_content_type,
    a_closed_stream_is_named_first,
    long_poll_wakes_on_append_and_times_out_with_204,
    sse_events_carry_ids_and_last_event_id_resumes,
    sse_connections_close_when_idle,
    bodies_and_streams_are_bounded_with_413,
    appends_have_their_own_limit_under_the_stream_limit,
    cors_follows_the_configured_origins,
    sigterm_ends_live_reads_and_exits_cleanly,
);
