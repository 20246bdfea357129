//! `kill -9` while compaction moves streams, and after it has: the built server in acid,
//! with segments small enough that every round fills several, deletes most of what it
//! wrote, and compacts the rest to the head of the log — streams moved again and again,
//! with appends between the moves, forks among them (at the tail, and at a boundary with
//! a sub-offset inside a message). Each seed kills the server at a random request (and a
//! random few milliseconds after it, while the shard compacts), restarts it, and kills it
//! again later. After every restart each stream reads exactly what was acknowledged, takes
//! an append, and nothing is marked damaged; after the last, a clean stop leaves a log that
//! `ds-tool verify` finds clean.
//!
//! A copy of a record that ended an earlier move must not end this one: read so, the
//! restart would mark healthy streams damaged. `DS_COMPACTION_CRASH_SEEDS`
//! runs more seeds (default 4), `DS_COMPACTION_CRASH_SEED_FROM` shifts them.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use ds_tests::rng::Rng;
use ds_tests::server::binary;
use ds_tests::{Client, Server};

const PLAIN: &str = "text/plain";
const SETTINGS: [(&str, &str); 3] = [
    ("DS_STORAGE__ACID_SHARD_COUNT", "1"),
    ("DS_STORAGE__SEGMENT_BYTES", "262144"),
    ("DS_LIMITS__MAX_APPEND_BYTES", "65536"),
];
/// Streams written and deleted each round, and their size.
const FILLERS: usize = 10;
const FILLER_BYTES: usize = 60_000;
const ROUNDS: usize = 12;
/// Longest wait after the last request before the kill, in milliseconds.
const KILL_AFTER_MS_MAX: u64 = 300;

/// What each stream holds, as acknowledged.
type Acknowledged = BTreeMap<String, Vec<u8>>;

#[test]
fn kill_9_during_and_after_compaction_loses_nothing_and_damages_nothing() {
    let count = setting("DS_COMPACTION_CRASH_SEEDS", 4);
    let from = setting("DS_COMPACTION_CRASH_SEED_FROM", 1);
    for seed in from..from + count {
        run_seed(seed);
    }
}

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

fn run_seed(seed: u64) {
    let mut rng = Rng::new(seed);
    let mut server = Server::start_in("acid", &SETTINGS);
    let mut acknowledged = Acknowledged::new();
    make_streams(&server.client(), &mut rng, &mut acknowledged);
    let mut moves = 0;
    for cycle in 0..2 {
        // Somewhere in the second half of the rounds: streams have moved more than once.
        let per_round = 2 * FILLERS as u64 + acknowledged.len() as u64;
        let requests = per_round * ROUNDS as u64 / 2 + rng.below(per_round * ROUNDS as u64 / 2);
        let context = format!("seed {seed}, cycle {cycle}");
        churn(&server.client(), &mut acknowledged, requests, &context);
        moves = server.metric("ds_compaction_moves_total");
        // While the shard compacts, or once it has.
        std::thread::sleep(Duration::from_millis(rng.below(KILL_AFTER_MS_MAX)));
        server.kill();
        server.restart();
        check(&server, &mut acknowledged, &context);
    }
    assert!(server.terminate().success(), "seed {seed}: a clean stop");
    eprintln!("compaction crash seed {seed}: {} moves before the last kill, all streams whole", moves);
    let data = server.data_dir().expect("acid has a data directory");
    let verify = Command::new(binary("ds-tool")).arg("verify").arg(data).output().expect("ds-tool runs");
    assert!(
        verify.status.success(),
        "seed {seed}: ds-tool verify: {}",
        String::from_utf8_lossy(&verify.stdout)
    );
}

/// A source of 30 messages and three streams beside it: plain ones or forks of it (at its
/// tail, or at a boundary and some bytes of the next message), as the seed picks.
fn make_streams(client: &Client, rng: &mut Rng, acknowledged: &mut Acknowledged) {
    let mut source = Vec::new();
    assert_eq!(client.put("/v1/stream/src", PLAIN, b"S00;").status, 201);
    source.extend_from_slice(b"S00;");
    for i in 1..30 {
        let body = format!("S{i:02};");
        assert_eq!(client.post("/v1/stream/src", PLAIN, body.as_bytes()).status, 204);
        source.extend_from_slice(body.as_bytes());
    }
    for name in ["p0", "p1", "p2"] {
        let path = format!("/v1/stream/{name}");
        let inherited = match rng.below(3) {
            0 => {
                assert_eq!(client.put(&path, PLAIN, b"").status, 201);
                Vec::new()
            }
            1 => {
                let headers = [("Content-Type", PLAIN), ("Stream-Forked-From", "/v1/stream/src")];
                assert_eq!(client.send("PUT", &path, &headers, b"").status, 201);
                source.clone()
            }
            _ => {
                // Message 7 ends at byte 28; two bytes of message 8 ("S0").
                let headers = [
                    ("Content-Type", PLAIN),
                    ("Stream-Forked-From", "/v1/stream/src"),
                    ("Stream-Fork-Offset", "0000000000000007_000000000000001c"),
                    ("Stream-Fork-Sub-Offset", "2"),
                ];
                let response = client.send("PUT", &path, &headers, b"");
                assert_eq!(response.status, 201, "{}", response.text());
                source[..30].to_vec()
            }
        };
        acknowledged.insert(name.to_string(), inherited);
    }
    acknowledged.insert("src".to_string(), source);
}

/// Rounds of fillers written and deleted, then a few bytes appended to every stream, for
/// `requests` requests.
fn churn(client: &Client, acknowledged: &mut Acknowledged, requests: u64, context: &str) {
    let filler = vec![b'f'; FILLER_BYTES];
    let names: Vec<String> = acknowledged.keys().cloned().collect();
    let mut sent = 0;
    for round in 0.. {
        for i in 0..FILLERS {
            if sent == requests {
                return;
            }
            let response = client.put(&format!("/v1/stream/filler{i}"), PLAIN, &filler);
            assert_eq!(response.status, 201, "{context}: {}", response.text());
            sent += 1;
        }
        for i in 0..FILLERS {
            if sent == requests {
                return;
            }
            assert_eq!(client.delete(&format!("/v1/stream/filler{i}")).status, 204, "{context}");
            sent += 1;
        }
        for name in &names {
            if sent == requests {
                return;
            }
            let body = format!("r{round}{name};");
            let response = client.post(&format!("/v1/stream/{name}"), PLAIN, body.as_bytes());
            assert_eq!(response.status, 204, "{context}: {name}: {}", response.text());
            acknowledged.get_mut(name).expect("known").extend_from_slice(body.as_bytes());
            sent += 1;
        }
    }
}

/// Every stream reads exactly what was acknowledged and takes an append; no filler is left
/// half there (a filler's create and delete are each whole or absent); nothing is damaged.
fn check(server: &Server, acknowledged: &mut Acknowledged, context: &str) {
    let client = server.client();
    assert_eq!(server.metric("ds_damaged_streams"), 0, "{context}: {}", server.log());
    for (name, bytes) in acknowledged.iter_mut() {
        let path = format!("/v1/stream/{name}");
        let read = client.get(&format!("{path}?offset=-1"));
        assert_eq!(read.status, 200, "{context}: {name}");
        assert!(
            read.body == *bytes,
            "{context}: {name} reads {:?}, not {:?}",
            read.text(),
            String::from_utf8_lossy(bytes)
        );
        let response = client.post(&path, PLAIN, b"+");
        assert_eq!(response.status, 204, "{context}: {name} takes an append: {}", response.text());
        bytes.push(b'+');
    }
    for i in 0..FILLERS {
        let head = client.head(&format!("/v1/stream/filler{i}"));
        assert!(head.status == 404 || head.status == 200, "{context}: filler{i}: {}", head.status);
        if head.status == 200 {
            assert_eq!(client.delete(&format!("/v1/stream/filler{i}")).status, 204, "{context}");
        }
    }
}
