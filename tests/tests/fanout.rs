//! Many SSE readers of one stream, served by the bare front (ds's own HTTP/1.1 writer,
//! `server/src/serve/bare/`) or, with it off, by hyper: every event arrives once, in order,
//! in valid chunk framing, through full sockets, stalled and vanishing readers, closing and
//! deletion, in every storage mode.

use std::time::Duration;

use ds_tests::{Client, Server, StreamingResponse};

/// Limits for tests that append tens of megabytes.
const ROOM_FOR_MEGABYTES: &[(&str, &str)] =
    &[("DS_LIMITS__MAX_STREAM_BYTES", "67108864"), ("DS_LIMITS__MAX_MEMORY_BYTES", "268435456")];

/// Data payloads (lines joined with `\n`) and the last control event's JSON of an SSE text.
fn events(text: &str) -> (Vec<String>, Option<serde_json::Value>) {
    let mut payloads = Vec::new();
    let mut control = None;
    for block in text.split("\n\n").filter(|block| !block.is_empty()) {
        let data: Vec<&str> = block.lines().filter_map(|line| line.strip_prefix("data:")).collect();
        if block.starts_with("event: data") {
            payloads.push(data.join("\n"));
        } else if block.starts_with("event: control") {
            control = Some(serde_json::from_str(&data.join("\n")).expect("control data is JSON"));
        }
    }
    (payloads, control)
}

/// The counter `name` of the server's metrics.
fn counter(client: &Client, name: &str) -> u64 {
    let text = client.get("/metrics").text();
    let line = text.lines().find(|line| line.starts_with(name)).unwrap_or_else(|| panic!("{name}: {text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// Creates the text stream `path` and subscribes `count` SSE readers from its start, each
/// read up to its first up-to-date event, then gives them time to settle at the tail.
fn readers_at_tail(client: &Client, path: &str, count: usize) -> Vec<StreamingResponse> {
    assert_eq!(client.put(path, "text/plain", b"").status, 201);
    let readers = (0..count).map(|_| subscribe(client, path)).collect();
    std::thread::sleep(Duration::from_millis(200));
    readers
}

fn subscribe(client: &Client, path: &str) -> StreamingResponse {
    let mut reader = client.open_stream(&format!("{path}?offset=-1&live=sse"), &[]);
    assert_eq!(reader.status, 200);
    reader.read_until("upToDate", Duration::from_secs(5));
    reader
}

fn many_readers_get_every_event_in_order(mode: &str) {
    many_readers_get_every_event_in_order_with(mode, true);
}

/// 24 readers, 60 messages and the closing; `bare`: the bare front is on (it writes the
/// readers' answers) or off (hyper does).
fn many_readers_get_every_event_in_order_with(mode: &str, bare: bool) {
    let switch = if bare { "true" } else { "false" };
    let server = Server::start_in(mode, &[("DS_SERVER__BARE_FRONT", switch)]);
    let client = server.client();
    let path = "/v1/stream/fan/out";
    let mut readers = readers_at_tail(&client, path, 24);
    let messages: Vec<String> = (0..60)
        .map(|i| match i % 4 {
            0 => format!("message {i}\nwith a second line"),
            1 => format!("message {i} {}", "y".repeat(i * 97)),
            _ => format!("message {i}"),
        })
        .collect();
    for message in &messages {
        assert_eq!(client.post(path, "text/plain", message.as_bytes()).status, 204);
    }
    let closed = client.send("POST", path, &[("stream-closed", "true")], b"");
    assert_eq!(closed.status, 204);
    for reader in &mut readers {
        assert!(reader.read_to_end(Duration::from_secs(10)), "the closing ends every reader");
        assert!(reader.ended_cleanly(), "with the terminating chunk");
        let (payloads, control) = events(&reader.text());
        assert!(payloads == messages, "every message once, in order, intact");
        assert_eq!(control.unwrap()["streamClosed"], true);
    }
    let served_bare = counter(&client, "ds_bare_requests_total");
    assert_eq!(served_bare >= 24, bare, "the bare front answered {served_bare} requests");
}

#[test]
fn with_the_bare_front_off_every_reader_gets_every_event_through_hyper() {
    many_readers_get_every_event_in_order_with("memory", false);
}

#[test]
fn many_readers_get_every_event_in_order_in_memory_mode() {
    many_readers_get_every_event_in_order("memory");
}

#[test]
fn many_readers_get_every_event_in_order_in_acid_mode() {
    many_readers_get_every_event_in_order("acid");
}

#[test]
fn a_reader_that_falls_behind_gets_every_byte() {
    let server = Server::start(ROOM_FOR_MEGABYTES);
    let client = server.client();
    let path = "/v1/stream/fan-slow";
    let mut slow = readers_at_tail(&client, path, 1).pop().unwrap();
    // More than the socket buffers hold while the reader reads nothing: the writes fill
    // the socket, end partially or find it full, and resume as the reader drains it.
    let messages: Vec<String> = (0..200).map(|i| format!("{i:08}{}", "z".repeat(60_000 + i * 7))).collect();
    for message in &messages {
        assert_eq!(client.post(path, "text/plain", message.as_bytes()).status, 204);
    }
    std::thread::sleep(Duration::from_millis(500));
    let last_offset = client.head(path).next_offset();
    slow.read_until(&format!("id:{last_offset}\n\n"), Duration::from_secs(30));
    let (payloads, _) = events(&slow.text());
    assert_eq!(payloads.len(), messages.len(), "every message arrives exactly once");
    assert!(payloads == messages, "in order and intact");
    assert!(counter(&client, "ds_bare_requests_total") > 0, "served by the bare front");
}

#[test]
fn deleting_the_stream_ends_its_readers_cleanly() {
    let server = Server::start(&[]);
    let client = server.client();
    let path = "/v1/stream/fan-deleted";
    let mut readers = readers_at_tail(&client, path, 8);
    assert_eq!(client.post(path, "text/plain", b"last words").status, 204);
    for reader in &mut readers {
        reader.read_until("last words", Duration::from_secs(5));
    }
    assert_eq!(client.send("DELETE", path, &[], b"").status, 204);
    for reader in &mut readers {
        assert!(reader.read_to_end(Duration::from_secs(5)), "the deletion ends every reader");
        assert!(reader.ended_cleanly(), "with the terminating chunk");
        assert_eq!(events(&reader.text()).0, ["last words"]);
    }
    let served_bare = counter(&client, "ds_bare_requests_total");
    assert!(served_bare >= 8, "the readers were served by the bare front ({served_bare})");
}

#[test]
fn fast_and_stalled_readers_side_by_side_all_get_everything() {
    let server = Server::start(ROOM_FOR_MEGABYTES);
    let client = server.client();
    let path = "/v1/stream/fan-mixed";
    let readers = readers_at_tail(&client, path, 16);
    // Sizes from a fixed pseudo-random sequence: small events and ones of tens of KB.
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let messages: Vec<String> = (0..300)
        .map(|i| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            format!("{i:05}{}", "m".repeat((seed % 40_000) as usize))
        })
        .collect();
    let received: Vec<(bool, Vec<String>)> = std::thread::scope(|scope| {
        let readers: Vec<_> = readers
            .into_iter()
            .enumerate()
            .map(|(index, mut reader)| {
                scope.spawn(move || {
                    if index % 2 == 1 {
                        // Stalled while most of the stream arrives: its socket fills up.
                        std::thread::sleep(Duration::from_secs(2));
                    }
                    reader.read_to_end(Duration::from_secs(60));
                    (reader.ended_cleanly(), events(&reader.text()).0)
                })
            })
            .collect();
        for message in &messages {
            assert_eq!(client.post(path, "text/plain", message.as_bytes()).status, 204);
        }
        assert_eq!(client.send("POST", path, &[("stream-closed", "true")], b"").status, 204);
        readers.into_iter().map(|reader| reader.join().unwrap()).collect()
    });
    for (index, (ended_cleanly, payloads)) in received.iter().enumerate() {
        assert!(ended_cleanly, "reader {index} ended with the terminating chunk");
        assert_eq!(payloads.len(), messages.len(), "reader {index} got every message once");
        assert!(*payloads == messages, "reader {index}: in order and intact");
    }
}

#[test]
fn readers_that_hang_up_mid_stream_leave_the_others_whole() {
    let server = Server::start(&[]);
    let client = server.client();
    let path = "/v1/stream/fan-churn";
    let mut readers = readers_at_tail(&client, path, 32);
    let messages: Vec<String> = (0..200).map(|i| format!("event {i} {}", "c".repeat(i * 13))).collect();
    for (index, message) in messages.iter().enumerate() {
        assert_eq!(client.post(path, "text/plain", message.as_bytes()).status, 204);
        if index % 20 == 10 {
            // Hang up while the server is writing to the others.
            drop(readers.pop());
            drop(readers.swap_remove(0));
        }
    }
    assert_eq!(client.send("POST", path, &[("stream-closed", "true")], b"").status, 204);
    assert_eq!(readers.len(), 12);
    for reader in &mut readers {
        assert!(reader.read_to_end(Duration::from_secs(10)));
        assert!(reader.ended_cleanly(), "with the terminating chunk");
        assert!(events(&reader.text()).0 == messages, "every message once, in order");
    }
    drop(readers);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let metrics = client.get("/metrics").text();
        if metrics.contains("ds_live_readers{kind=\"sse\"} 0\n") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "every SSE body ended: {metrics}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
