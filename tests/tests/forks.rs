//! Forks on the real process, where the conformance suite leaves things loose: sub-offsets
//! in both content modes read back through catch-up, SSE and small reads; forks of forks of
//! a soft-deleted source; a fork whose source expires; forks across shards; the byte budget
//! given back once a cascade ends; all of it in memory mode and the disk modes, and forks,
//! soft deletes and cascades across a kill -9 and a restart; a fork offset given as a read's
//! sentinel (`-1`, `now`); a source deleted right after its last fork is gone at once.

use std::time::{Duration, Instant};

use ds_tests::{Client, Response, Server};

fn fork(client: &Client, path: &str, headers: &[(&str, &str)]) -> Response {
    client.send("PUT", path, headers, b"")
}

fn read_all(client: &Client, path: &str) -> String {
    let response = client.get(&format!("{path}?offset=-1"));
    assert_eq!(response.status, 200, "{path}: {}", response.text());
    response.text()
}

/// Reads `path` one small response at a time from the start, following Stream-Next-Offset.
fn read_in_steps(server: &Server, path: &str) -> (String, usize) {
    let client = server.client();
    let (mut text, mut offset, mut steps) = (String::new(), "-1".to_string(), 0);
    loop {
        let response = client.get(&format!("{path}?offset={offset}"));
        assert_eq!(response.status, 200, "{}", response.text());
        text.push_str(&response.text());
        offset = response.next_offset();
        steps += 1;
        if response.header("stream-up-to-date") == Some("true") {
            return (text, steps);
        }
        assert!(steps < 10_000, "reads advance");
    }
}

/// The storage modes forks are tested in.
const MODES: [&str; 3] = ["memory", "acid", "file-durable"];

#[test]
fn sub_offsets_cut_a_message_in_both_content_modes() {
    for mode in MODES {
        sub_offsets_cut_a_message(mode);
    }
}

fn sub_offsets_cut_a_message(mode: &str) {
    let server = Server::start_in(mode, &[]);
    let client = server.client();
    assert_eq!(client.put("/v1/stream/bin", "text/plain", b"hello").status, 201);
    let second = client.post("/v1/stream/bin", "text/plain", b"world");
    assert_eq!(second.status, 204);
    let first_end = "0000000000000001_0000000000000005";
    let cut = fork(
        &client,
        "/v1/stream/bin-cut",
        &[
            ("Stream-Forked-From", "/v1/stream/bin"),
            ("Stream-Fork-Offset", first_end),
            ("Stream-Fork-Sub-Offset", "2"),
        ],
    );
    assert_eq!(cut.status, 201, "{}", cut.text());
    assert_eq!(cut.next_offset(), "0000000000000002_0000000000000007", "the cut message counts as one");
    assert_eq!(read_all(&client, "/v1/stream/bin-cut"), "hellowo");
    assert_eq!(client.post("/v1/stream/bin-cut", "text/plain", b"!").status, 204);
    assert_eq!(read_all(&client, "/v1/stream/bin-cut"), "hellowo!");
    // From the fork point on, only the fork's own bytes; the cut message alone from its start.
    assert_eq!(client.get(&format!("/v1/stream/bin-cut?offset={first_end}")).text(), "wo!");
    let own = client.get("/v1/stream/bin-cut?offset=0000000000000002_0000000000000007");
    assert_eq!(own.text(), "!");
    // SSE sees the same messages.
    let mut sse = client.open_stream("/v1/stream/bin-cut?offset=-1&live=sse", &[]);
    let events = sse.read_until("data:!", Duration::from_secs(5));
    for data in ["data:hello\n", "data:wo\n", "data:!\n"] {
        assert!(events.contains(data), "{data:?} in {events}");
    }

    let json = [("Content-Type", "application/json")];
    assert_eq!(client.send("PUT", "/v1/stream/js", &json, br#"[1,2,3,4]"#).status, 201);
    let js = fork(
        &client,
        "/v1/stream/js-cut",
        &[
            ("Stream-Forked-From", "/v1/stream/js"),
            ("Stream-Fork-Offset", "0000000000000001_0000000000000002"),
            ("Stream-Fork-Sub-Offset", "2"),
        ],
    );
    assert_eq!(js.status, 201, "{}", js.text());
    assert_eq!(js.header("content-type"), Some("application/json"), "inherited");
    assert_eq!(read_all(&client, "/v1/stream/js-cut"), "[1,2,3]");
    let past = fork(
        &client,
        "/v1/stream/js-past",
        &[
            ("Stream-Forked-From", "/v1/stream/js"),
            ("Stream-Fork-Offset", "0000000000000001_0000000000000002"),
            ("Stream-Fork-Sub-Offset", "4"),
        ],
    );
    assert_eq!(past.status, 400, "three messages follow the anchor");
}

#[test]
fn a_chain_of_forks_reads_through_a_soft_deleted_middle_and_cascades_away() {
    for mode in MODES {
        chain_of_forks(mode);
    }
}

fn chain_of_forks(mode: &str) {
    let server = Server::start_in(mode, &[]);
    let client = server.client();
    let memory_before = server.metric("ds_charged_bytes");
    assert_eq!(client.put("/v1/stream/root", "text/plain", b"A").status, 201);
    let mut parent = "/v1/stream/root".to_string();
    let mut expected = "A".to_string();
    let mut chain = Vec::new();
    // Names spread over every shard; each level appends its own letter.
    for level in 1..=5u8 {
        let path = format!("/v1/stream/level-{level}");
        assert_eq!(fork(&client, &path, &[("Stream-Forked-From", &parent)]).status, 201);
        let letter = [b'A' + level];
        assert_eq!(client.post(&path, "text/plain", &letter).status, 204);
        expected.push(letter[0] as char);
        parent = path.clone();
        chain.push(path);
    }
    assert_eq!(read_all(&client, &parent), expected);
    assert_eq!(read_in_steps(&server, &parent).0, expected, "small reads cross every boundary");
    // Delete everything above the leaf: each is soft-deleted (410), the leaf reads on.
    for path in std::iter::once("/v1/stream/root".to_string()).chain(chain[..4].iter().cloned()) {
        assert_eq!(client.delete(&path).status, 204);
        assert_eq!(client.head(&path).status, 410);
        assert_eq!(client.get(&path).status, 410);
        assert_eq!(client.post(&path, "text/plain", b"x").status, 410);
        assert_eq!(client.delete(&path).status, 410);
        assert_eq!(client.put(&path, "text/plain", b"").status, 409, "the name stays taken");
        let refused = fork(&client, "/v1/stream/late", &[("Stream-Forked-From", &path)]);
        assert_eq!(refused.status, 409, "no new forks of a deleted stream");
    }
    assert_eq!(read_all(&client, &parent), expected);
    // The leaf goes: the whole chain is cleaned up by the time the delete is answered, and
    // the budget given back.
    assert_eq!(client.delete(&parent).status, 204);
    assert_eq!(client.head("/v1/stream/root").status, 404, "the cascade reached the root");
    for path in &chain {
        assert_eq!(client.head(path).status, 404);
    }
    assert_eq!(server.metric("ds_charged_bytes"), memory_before, "every charge given back");
    assert_eq!(client.put("/v1/stream/root", "text/plain", b"new").status, 201, "the name is free");
}

/// A fork's delete is answered only once its source knows: a source deleted right after its
/// last fork is deleted for good (404, its name free), never soft-deleted for a moment
/// (410, 409 on its name) while the fork's release is still on its way — with the source
/// and the fork in the same shard or in different ones, and 4 clients at once so that
/// batches carry several ops (the race is rare, which is why `churn.py` in `tests/campaigns`
/// looks for it over thousands of such lives, docs/performance/code-choices.md; the order
/// itself is tested in the shard's tests).
#[test]
fn a_source_deleted_right_after_its_last_fork_is_gone_at_once() {
    for mode in ["memory", "acid"] {
        let server = Server::start_in(mode, &[]);
        std::thread::scope(|scope| {
            for client_index in 0..4 {
                let client = server.client();
                scope.spawn(move || delete_fork_then_source(&client, &format!("{mode}-{client_index}")));
            }
        });
        assert_eq!(server.metric("ds_streams"), 0, "{mode}");
    }
}

fn delete_fork_then_source(client: &Client, prefix: &str) {
    for round in 0..50 {
        let source = format!("/v1/stream/src-{prefix}-{round}");
        let fork_path = format!("/v1/stream/fork-{prefix}-{round}");
        assert_eq!(client.put(&source, "text/plain", b"a").status, 201);
        assert_eq!(fork(client, &fork_path, &[("Stream-Forked-From", &source)]).status, 201);
        assert_eq!(client.get(&format!("{fork_path}?offset=-1")).status, 200);
        assert_eq!(client.delete(&fork_path).status, 204);
        assert_eq!(client.delete(&source).status, 204);
        let context = format!("{prefix}, round {round}");
        assert_eq!(
            client.get(&format!("{source}?offset=-1")).status,
            404,
            "{context}: gone, not soft-deleted"
        );
        assert_eq!(client.put(&source, "text/plain", b"").status, 201, "{context}: the name is free");
        assert_eq!(client.delete(&source).status, 204);
    }
}

#[test]
fn a_fork_offset_may_be_a_reads_sentinel() {
    let server = Server::start(&[]);
    let client = server.client();
    assert_eq!(client.put("/v1/stream/s", "text/plain", b"hello").status, 201);
    let at = |offset: &'static str| [("Stream-Forked-From", "/v1/stream/s"), ("Stream-Fork-Offset", offset)];
    assert_eq!(fork(&client, "/v1/stream/start", &at("-1")).status, 201);
    assert_eq!(fork(&client, "/v1/stream/tail", &at("now")).status, 201);
    assert_eq!(client.post("/v1/stream/s", "text/plain", b" world").status, 204);
    assert_eq!(read_all(&client, "/v1/stream/start"), "", "-1: from the source's start");
    assert_eq!(read_all(&client, "/v1/stream/tail"), "hello", "now: the source's tail when forked");
    assert_eq!(fork(&client, "/v1/stream/start", &at("-1")).status, 200, "the same fork again");
    let bad = fork(&client, "/v1/stream/bad", &at("-2"));
    assert_eq!((bad.status, bad.json()["type"].as_str()), (400, Some("urn:ds:problem:invalid-fork")));
}

#[test]
fn a_fork_outlives_its_expiring_source() {
    let server = Server::start(&[]);
    let client = server.client();
    // Three seconds: the fork must be made before the source expires, on a loaded machine too.
    let ttl = [("Content-Type", "text/plain"), ("Stream-TTL", "3")];
    assert_eq!(client.send("PUT", "/v1/stream/short", &ttl, b"kept").status, 201);
    let forked =
        fork(&client, "/v1/stream/long", &[("Stream-Forked-From", "/v1/stream/short"), ("Stream-TTL", "60")]);
    assert_eq!(forked.status, 201);
    // Polled with HEAD, which (unlike a read) does not renew the TTL.
    let deadline = Instant::now() + Duration::from_secs(15);
    while !matches!(client.head("/v1/stream/short").status, 404 | 410) {
        assert!(Instant::now() < deadline, "the source expires");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(read_all(&client, "/v1/stream/long"), "kept");
    assert_eq!(client.delete("/v1/stream/long").status, 204);
    let deadline = Instant::now() + Duration::from_secs(5);
    while client.head("/v1/stream/short").status != 404 {
        assert!(Instant::now() < deadline, "the expired source goes with its last fork");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(client.put("/v1/stream/short", "text/plain", b"").status, 201);
}

#[test]
fn forks_soft_deletes_and_cascades_survive_a_kill_and_a_restart() {
    for mode in ["acid", "file-durable"] {
        let mut server = Server::start_in(mode, &[]);
        let client = server.client();
        assert_eq!(client.put("/v1/stream/src", "text/plain", b"hello").status, 201);
        assert_eq!(client.post("/v1/stream/src", "text/plain", b"world").status, 204);
        let headers = [("Stream-Forked-From", "/v1/stream/src"), ("Stream-Fork-Sub-Offset", "0")];
        assert_eq!(fork(&client, "/v1/stream/whole", &headers).status, 201);
        let cut = [
            ("Stream-Forked-From", "/v1/stream/src"),
            ("Stream-Fork-Offset", "0000000000000001_0000000000000005"),
            ("Stream-Fork-Sub-Offset", "3"),
        ];
        assert_eq!(fork(&client, "/v1/stream/cut", &cut).status, 201);
        assert_eq!(client.post("/v1/stream/cut", "text/plain", b"!").status, 204);
        server.kill();
        server.restart();
        let client = server.client();
        // Idempotent re-creation of a fork is recognised after a restart.
        assert_eq!(fork(&client, "/v1/stream/cut", &cut).status, 200, "{mode}");
        assert_eq!(client.delete("/v1/stream/src").status, 204);
        server.kill();
        server.restart();
        let client = server.client();
        assert_eq!(read_all(&client, "/v1/stream/whole"), "helloworld", "{mode}");
        assert_eq!(read_all(&client, "/v1/stream/cut"), "hellowor!", "{mode}");
        assert_eq!(client.head("/v1/stream/src").status, 410, "{mode}: still soft-deleted");
        assert_eq!(client.put("/v1/stream/src", "text/plain", b"").status, 409, "{mode}: name held");
        assert_eq!(client.delete("/v1/stream/whole").status, 204);
        assert_eq!(client.delete("/v1/stream/cut").status, 204);
        let deadline = Instant::now() + Duration::from_secs(5);
        while client.head("/v1/stream/src").status != 404 {
            assert!(Instant::now() < deadline, "{mode}: the source goes with its last fork");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(server.terminate().code(), Some(0));
        server.restart();
        let client = server.client();
        for path in ["/v1/stream/src", "/v1/stream/whole", "/v1/stream/cut"] {
            assert_eq!(client.head(path).status, 404, "{mode}: {path} stays gone");
        }
        assert_eq!(client.put("/v1/stream/src", "text/plain", b"").status, 201, "{mode}: the name is free");
    }
}
