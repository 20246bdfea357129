//! Restarts of the built server in each disk mode: everything acknowledged is there after a
//! clean restart (SIGTERM) and after `kill -9`, also when the kill lands under concurrent
//! load, and a producer's retry of the request that was in flight is applied exactly once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ds_tests::{Client, Server};

const MODES: [&str; 3] = ["acid", "file-durable", "file-fast"];
const PLAIN: &str = "text/plain";
const UNTIL: &str = "2099-01-02T03:04:05.678Z";

fn producer(id: &str, epoch: u64, seq: u64) -> [(String, String); 4] {
    [
        ("Content-Type".into(), PLAIN.into()),
        ("Producer-Id".into(), id.into()),
        ("Producer-Epoch".into(), epoch.to_string()),
        ("Producer-Seq".into(), seq.to_string()),
    ]
}

fn post_as(client: &Client, path: &str, headers: &[(String, String)], body: &str) -> ds_tests::Response {
    client.try_send_owned("POST", path, headers, body.as_bytes()).expect("the server answers")
}

/// Acknowledged writes of every kind.
fn write_state(client: &Client) {
    assert_eq!(client.put("/v1/stream/plain", PLAIN, b"ab").status, 201);
    assert_eq!(client.post("/v1/stream/plain", PLAIN, b"cde").status, 204);
    let json = client.put("/v1/stream/json", "application/json", br#"[1, {"big":12345678901234567890}]"#);
    assert_eq!(json.status, 201);
    let ttl = client.send("PUT", "/v1/stream/ttl", &[("Content-Type", PLAIN), ("Stream-TTL", "600")], b"");
    assert_eq!(ttl.status, 201);
    let until =
        client.send("PUT", "/v1/stream/until", &[("Content-Type", PLAIN), ("Stream-Expires-At", UNTIL)], b"");
    assert_eq!(until.status, 201);
    assert_eq!(client.put("/v1/stream/closed", PLAIN, b"").status, 201);
    let close = client.send(
        "POST",
        "/v1/stream/closed",
        &[("Content-Type", PLAIN), ("Stream-Closed", "true")],
        b"last",
    );
    assert_eq!(close.status, 204);
    assert_eq!(client.put("/v1/stream/producer", PLAIN, b"").status, 201);
    for seq in 0..3 {
        assert_eq!(
            post_as(client, "/v1/stream/producer", &producer("w1", 3, seq), &format!("p{seq}")).status,
            200
        );
    }
    assert_eq!(client.put("/v1/stream/seq", PLAIN, b"").status, 201);
    let seq = client.send("POST", "/v1/stream/seq", &[("Content-Type", PLAIN), ("Stream-Seq", "0005")], b"s");
    assert_eq!(seq.status, 204);
    assert_eq!(client.put("/v1/stream/deleted", PLAIN, b"gone").status, 201);
    assert_eq!(client.delete("/v1/stream/deleted").status, 204);
}

fn check_state(client: &Client, context: &str) {
    let plain = client.get("/v1/stream/plain");
    assert_eq!((plain.status, plain.text().as_str()), (200, "abcde"), "{context}");
    assert_eq!(plain.next_offset(), "0000000000000002_0000000000000005", "{context}");
    assert_eq!(plain.header("content-type"), Some(PLAIN));
    assert_eq!(client.get("/v1/stream/json").text(), r#"[1,{"big":12345678901234567890}]"#, "{context}");

    let ttl = client.head("/v1/stream/ttl");
    let left: u64 = ttl.header("stream-ttl").expect("Stream-TTL").parse().unwrap();
    assert!(left > 0 && left <= 600, "{context}: {left}");
    assert_eq!(client.head("/v1/stream/until").header("stream-expires-at"), Some(UNTIL), "{context}");

    assert_eq!(client.head("/v1/stream/closed").header("stream-closed"), Some("true"), "{context}");
    assert_eq!(client.post("/v1/stream/closed", PLAIN, b"more").status, 409, "{context}");

    let retry = post_as(client, "/v1/stream/producer", &producer("w1", 3, 2), "p2");
    assert_eq!(retry.status, 204, "{context}: a retry of the last write is a duplicate");
    assert_eq!(post_as(client, "/v1/stream/producer", &producer("w1", 2, 0), "x").status, 403, "{context}");
    assert_eq!(post_as(client, "/v1/stream/producer", &producer("w1", 3, 3), "p3").status, 200, "{context}");
    assert_eq!(client.get("/v1/stream/producer").text(), "p0p1p2p3", "{context}");

    let regress =
        client.send("POST", "/v1/stream/seq", &[("Content-Type", PLAIN), ("Stream-Seq", "0004")], b"t");
    assert_eq!(regress.status, 409, "{context}");
    assert_eq!(client.get("/v1/stream/deleted").status, 404, "{context}: a delete stays deleted");
}

#[test]
fn acknowledged_state_survives_a_clean_restart() {
    for mode in MODES {
        let mut server = Server::start_in(mode, &[]);
        write_state(&server.client());
        assert!(server.terminate().success());
        server.restart();
        check_state(&server.client(), &format!("{mode} after SIGTERM"));
    }
}

#[test]
fn acknowledged_state_survives_kill_9() {
    for mode in MODES {
        let mut server = Server::start_in(mode, &[]);
        write_state(&server.client());
        server.kill();
        server.restart();
        check_state(&server.client(), &format!("{mode} after kill -9"));
    }
}

const WRITERS: usize = 8;
/// Appends answered, across the writers, before the kill.
const LOAD_BEFORE_KILL: u64 = 200;

/// What one writer got acknowledged before the kill, and what it had in flight.
struct WriterOutcome {
    acknowledged: u64,
    in_flight: Option<u64>,
}

fn body(writer: usize, seq: u64) -> String {
    format!("w{writer}-s{seq};")
}

/// Appends `w{writer}-s{seq};` with producer sequence numbers until a request fails.
fn write_until_killed(client: Client, writer: usize, acknowledged: Arc<AtomicU64>) -> WriterOutcome {
    let path = format!("/v1/stream/load-{writer}");
    let id = format!("writer-{writer}");
    let mut seq = 0;
    loop {
        match client.try_send_owned("POST", &path, &producer(&id, 0, seq), body(writer, seq).as_bytes()) {
            Ok(response) if response.status == 200 => {
                seq += 1;
                acknowledged.fetch_add(1, Ordering::Relaxed);
            }
            Ok(response) => panic!("writer {writer}: unexpected {} {}", response.status, response.text()),
            Err(_) => return WriterOutcome { acknowledged: seq, in_flight: Some(seq) },
        }
    }
}

#[test]
fn kill_9_under_load_keeps_every_acknowledged_append_and_retries_apply_once() {
    for mode in MODES {
        let mut server = Server::start_in(mode, &[]);
        let client = server.client();
        for writer in 0..WRITERS {
            assert_eq!(client.put(&format!("/v1/stream/load-{writer}"), PLAIN, b"").status, 201);
        }
        let acknowledged = Arc::new(AtomicU64::new(0));
        let writers: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let acknowledged = Arc::clone(&acknowledged);
                std::thread::spawn(move || write_until_killed(client, writer, acknowledged))
            })
            .collect();
        // The kill lands under load: once the writers together have had appends answered.
        let deadline = Instant::now() + Duration::from_secs(30);
        while acknowledged.load(Ordering::Relaxed) < LOAD_BEFORE_KILL {
            assert!(Instant::now() < deadline, "{mode}: the writers got going");
            std::thread::sleep(Duration::from_millis(5));
        }
        server.kill();
        let outcomes: Vec<WriterOutcome> =
            writers.into_iter().map(|w| w.join().expect("writer thread")).collect();
        server.restart();
        let client = server.client();
        let total: u64 = outcomes.iter().map(|o| o.acknowledged).sum();
        assert!(total > 0, "{mode}: appends were acknowledged before the kill");
        for (writer, outcome) in outcomes.iter().enumerate() {
            check_writer(&client, mode, writer, outcome);
        }
    }
}

/// The stream holds every acknowledged append in order, then maybe the one in flight; the
/// retry of that one is stored exactly once.
fn check_writer(client: &Client, mode: &str, writer: usize, outcome: &WriterOutcome) {
    let path = format!("/v1/stream/load-{writer}");
    let acknowledged: String = (0..outcome.acknowledged).map(|seq| body(writer, seq)).collect();
    let stored = client.get(&path).text();
    let in_flight = outcome.in_flight.expect("every writer was cut off");
    let with_in_flight = acknowledged.clone() + &body(writer, in_flight);
    assert!(
        stored == acknowledged || stored == with_in_flight,
        "{mode} writer {writer}: {} acknowledged, stored {stored:?}",
        outcome.acknowledged
    );
    let retry = client.try_send_owned(
        "POST",
        &path,
        &producer(&format!("writer-{writer}"), 0, in_flight),
        body(writer, in_flight).as_bytes(),
    );
    let expected = if stored == acknowledged { 200 } else { 204 };
    assert_eq!(retry.expect("the retry is answered").status, expected, "{mode} writer {writer}");
    assert_eq!(client.get(&path).text(), with_in_flight, "{mode} writer {writer}: stored exactly once");
}
