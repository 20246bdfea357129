//! Several `ds-server` nodes sharing a directory of streams in a real etcd (one member, data
//! in a temporary directory), alone and behind the shipped HAProxy configuration
//! (`deploy/haproxy/backend-directory.cfg`): one owner per stream under racing creates, any
//! node serves any stream, a node added breaks nothing, a killed owner's streams answer
//! 503 (and every acknowledged append is there when it returns), owners keep serving
//! while etcd is down, and a data directory keeps its node id.
//!
//! `etcd` and `haproxy` are found or installed by `.ci/setup.sh`.

use std::time::Duration;

use ds_tests::cluster::{entry, eventually, holders, node, node_command, nodes, put_entry, refused_start};
use ds_tests::etcd::{free_port, Etcd};
use ds_tests::haproxy::Proxy;
use ds_tests::jwt::{mint, valid_claims, TRUSTED_KEY};
use ds_tests::{Client, Server};

const TEXT: (&str, &str) = ("Content-Type", "text/plain");

#[test]
fn racing_creates_of_one_name_on_different_nodes_make_one_stream() {
    let etcd = Etcd::start();
    let cluster = nodes(&etcd, 3);
    let all: Vec<&Server> = cluster.iter().collect();
    for round in 0..6 {
        // Identical creates: one 201, the others 200 (it exists with that configuration).
        let path = format!("/v1/stream/race-{round}");
        let statuses = race(&all, &path, &["text/plain"; 3]);
        assert_eq!(statuses.iter().filter(|s| **s == 201).count(), 1, "{path}: {statuses:?}");
        assert!(statuses.iter().all(|s| *s == 201 || *s == 200), "{path}: {statuses:?}");
        assert_eq!(holders(&all, &path).len(), 1, "{path} has one owner");
        // Different configurations: one 201, the others 409.
        let path = format!("/v1/stream/race-mixed-{round}");
        let statuses = race(&all, &path, &["text/plain", "application/json", "application/octet-stream"]);
        assert_eq!(statuses.iter().filter(|s| **s == 201).count(), 1, "{path}: {statuses:?}");
        assert_eq!(statuses.iter().filter(|s| **s == 409).count(), 2, "{path}: {statuses:?}");
        assert_eq!(holders(&all, &path).len(), 1, "{path} has one owner");
    }
    // Any node serves any stream: appends through one, reads through another.
    for (i, node) in cluster.iter().enumerate() {
        let response = node.client().post("/v1/stream/race-0", "text/plain", format!("{i};").as_bytes());
        assert_eq!(response.status, 204, "append through node {i}");
    }
    for node in &cluster {
        assert_eq!(node.client().get("/v1/stream/race-0?offset=-1").text(), "0;1;2;");
        assert_eq!(node.client().get("/v1/stream/never-made").status, 404);
    }
    // A delete through a non-owner deletes it everywhere; the name can then be made anew.
    let owner = holders(&all, "/v1/stream/race-1")[0];
    let other = cluster.iter().find(|node| node.addr != owner).unwrap();
    assert_eq!(other.client().delete("/v1/stream/race-1").status, 204);
    for node in &cluster {
        assert_eq!(node.client().get("/v1/stream/race-1").status, 404);
    }
    assert_eq!(other.client().put("/v1/stream/race-1", "text/plain", b"again").status, 201);
    assert_eq!(holders(&all, "/v1/stream/race-1"), vec![other.addr], "made anew where it was asked");
}

/// PUTs `path` through every node at once, node `i` with content type `types[i]`.
fn race(nodes: &[&Server], path: &str, types: &[&str]) -> Vec<u16> {
    std::thread::scope(|scope| {
        let racers: Vec<_> = nodes
            .iter()
            .zip(types)
            .map(|(node, content_type)| {
                let addr = node.addr;
                scope.spawn(move || Client::new(addr).put(path, content_type, b"").status)
            })
            .collect();
        racers.into_iter().map(|racer| racer.join().unwrap()).collect()
    })
}

#[test]
fn a_node_added_behind_the_proxy_breaks_no_stream() {
    Proxy::require();
    let etcd = Etcd::start();
    let mut cluster = nodes(&etcd, 3);
    let fourth_port = free_port();
    let mut env: Vec<(&str, String)> = ["DS_NODE1", "DS_NODE2", "DS_NODE3"]
        .into_iter()
        .zip(&cluster)
        .map(|(variable, node)| (variable, node.addr.to_string()))
        .collect();
    env.push(("DS_NODE4", fourth_port.to_string()));
    let proxy = Proxy::start("backend-directory.cfg", &env);
    let token = format!("Bearer {}", mint(&valid_claims("cluster-test"), TRUSTED_KEY));
    let auth = ("Authorization", token.as_str());
    let client = proxy.client();
    let path = |i: usize| format!("/v1/stream/tenant-{}/orders%20{i}", i % 3);
    let expected = |i: usize| format!("{i}.0;{i}.1;");
    for i in 0..24 {
        assert_eq!(client.send("PUT", &path(i), &[auth, TEXT], b"").status, 201, "{}", path(i));
        for append in 0..2 {
            let body = format!("{i}.{append};");
            assert_eq!(client.send("POST", &path(i), &[auth, TEXT], body.as_bytes()).status, 204);
        }
    }

    cluster.push(node(&etcd, "node-3", fourth_port));
    // The proxy puts the new node in its ring after two passed health checks.
    let all: Vec<&Server> = cluster.iter().collect();
    let mut placed_on_new = 0;
    let mut fresh = 0;
    eventually(Duration::from_secs(20), || {
        let name = format!("/v1/stream/after-{fresh}");
        fresh += 1;
        assert_eq!(client.send("PUT", &name, &[auth, TEXT], b"").status, 201);
        if holders(&all, &name) == vec![fourth_port] {
            placed_on_new += 1;
        }
        (placed_on_new >= 1).then_some(()).ok_or_else(|| "no new stream on the new node yet".into())
    });
    // The new node holds none of the first streams, yet about a quarter of their names hash
    // to it: it forwards them. A client posing as a forwarding node gets nothing different
    // (the proxy strips the header; a node asked as if forwarded answers 503 instead).
    let posing = ("ds-forwarded-by", "node-0");
    for i in 0..24 {
        let through_proxy = client.send("GET", &format!("{}?offset=-1", path(i)), &[auth, posing], b"");
        assert_eq!(
            (through_proxy.status, through_proxy.text()),
            (200, expected(i)),
            "{} via the proxy",
            path(i)
        );
        for node in &cluster {
            let direct = node.client().get(&format!("{}?offset=-1", path(i)));
            assert_eq!((direct.status, direct.text()), (200, expected(i)), "{} via {}", path(i), node.addr);
        }
        assert_eq!(holders(&all, &path(i)).len(), 1);
    }
    // A live read through a node that forwards it follows appends.
    let owner = holders(&all, &path(0))[0];
    let other = cluster.iter().find(|node| node.addr != owner).unwrap();
    let mut events = other.client().open_stream(&format!("{}?offset=-1&live=sse", path(0)), &[]);
    events.read_until("\"upToDate\":true", Duration::from_secs(5));
    assert_eq!(Client::new(owner).post(&path(0), "text/plain", b"live;").status, 204);
    assert!(events.read_until("data:live;", Duration::from_secs(5)).contains("data:live;"));
}

#[test]
fn a_killed_owner_answers_503_and_keeps_every_acknowledged_append() {
    let etcd = Etcd::start();
    let mut cluster = nodes(&etcd, 3);
    let mut acknowledged = Vec::new();
    for i in 0..12 {
        let path = format!("/v1/stream/k{i}");
        let through = &cluster[i % 3];
        assert_eq!(through.client().put(&path, "text/plain", b"").status, 201);
        let mut body = String::new();
        for append in 0..5 {
            let piece = format!("{i}.{append};");
            assert_eq!(
                cluster[(i + append) % 3].client().post(&path, "text/plain", piece.as_bytes()).status,
                204
            );
            body.push_str(&piece);
        }
        acknowledged.push((path, body, i % 3));
    }
    cluster[0].kill();
    let survivors = [&cluster[1], &cluster[2]];
    for (path, body, owner) in &acknowledged {
        for node in survivors {
            let read = node.client().get(&format!("{path}?offset=-1"));
            if *owner == 0 {
                assert_eq!(read.status, 503, "{path} lives on the killed node");
                assert_eq!(read.header("retry-after"), Some("1"));
                let create = node.client().put(path, "text/plain", b"");
                assert_eq!(create.status, 503, "{path} is never made again elsewhere");
            } else {
                assert_eq!((read.status, read.text()), (200, body.clone()), "{path} is unaffected");
            }
        }
    }
    cluster[0].restart();
    for (path, body, _) in &acknowledged {
        eventually(Duration::from_secs(10), || {
            let read = cluster[1].client().get(&format!("{path}?offset=-1"));
            (read.status == 200 && read.text() == *body)
                .then_some(())
                .ok_or(format!("{path}: {}", read.status))
        });
    }
}

#[test]
fn owners_keep_serving_their_streams_while_etcd_is_down() {
    let mut etcd = Etcd::start();
    let cluster = nodes(&etcd, 2);
    let owned = &cluster[0];
    assert_eq!(owned.client().put("/v1/stream/steady", "text/plain", b"a;").status, 201);
    etcd.stop();
    for piece in ["b;", "c;"] {
        assert_eq!(owned.client().post("/v1/stream/steady", "text/plain", piece.as_bytes()).status, 204);
    }
    assert_eq!(owned.client().get("/v1/stream/steady?offset=-1").text(), "a;b;c;");
    let create = owned.client().put("/v1/stream/new-while-down", "text/plain", b"");
    assert_eq!(create.status, 503, "no create without the directory");
    assert_eq!(owned.client().delete("/v1/stream/steady").status, 503, "no delete without the directory");
    eventually(Duration::from_secs(15), || {
        let read = cluster[1].client().get("/v1/stream/never-seen");
        let stale = read.status == 503 && read.text().contains("urn:ds:problem:directory-stale");
        stale.then_some(()).ok_or(format!("lookup without the directory: {} {}", read.status, read.text()))
    });
    // A stream the other node knows is still forwarded to its owner: owners never change
    // while an entry lives.
    let forwarded = cluster[1].client().get("/v1/stream/steady?offset=-1");
    assert_eq!(
        (forwarded.status, forwarded.text()),
        (200, "a;b;c;".to_string()),
        "forwarded while etcd is down"
    );
    etcd.start_again();
    eventually(Duration::from_secs(15), || {
        let status = owned.client().put("/v1/stream/new-after", "text/plain", b"").status;
        (status == 201).then_some(()).ok_or(format!("create after etcd returned: {status}"))
    });
    assert_eq!(cluster[1].client().get("/v1/stream/steady?offset=-1").text(), "a;b;c;");
}

#[test]
fn a_data_directory_keeps_its_node_id_and_split_streams_are_refused() {
    let etcd = Etcd::start();
    let port = free_port();
    let mut first = node(&etcd, "alpha", port);
    assert_eq!(first.client().put("/v1/stream/mine", "text/plain", b"x").status, 201);
    assert!(first.terminate().success());
    let data_dir = first.data_dir().unwrap().to_path_buf();
    let start = |id: &str| refused_start(node_command(&etcd, id, port, &data_dir));
    let stderr = start("beta");
    assert!(stderr.contains("alpha"), "joins under another id: {stderr}");

    // The same stream name made on another node while this one was away: a split stream.
    let other = node(&etcd, "gamma", free_port());
    assert_eq!(other.client().delete("/v1/stream/mine").status, 503, "its owner is down");
    // (By hand, as a lost directory would: the entry of /ds/streams/mine removed.)
    let deleted = Client::new(etcd.client_addr).send(
        "POST",
        "/v3/kv/deleterange",
        &[("Content-Type", "application/json")],
        br#"{"key":"L2RzL3N0cmVhbXMvbWluZQ=="}"#,
    );
    assert_eq!(deleted.status, 200);
    assert_eq!(other.client().put("/v1/stream/mine", "text/plain", b"y").status, 201);
    let stderr = start("alpha");
    assert!(stderr.contains("mine"), "a split stream is refused: {stderr}");
}

#[test]
fn a_restart_settles_what_a_crash_left_in_the_directory() {
    let etcd = Etcd::start();
    let mut alpha = node(&etcd, "alpha", free_port());
    for name in ["being-deleted", "made"] {
        assert_eq!(alpha.client().put(&format!("/v1/stream/{name}"), "text/plain", b"x").status, 201);
    }
    alpha.kill();
    // As a crash leaves them: a delete begun and never answered, a claim whose create never ran, a create
    // whose entry was never marked live.
    put_entry(&etcd, "being-deleted", r#"{"owner":"alpha","state":"deleting"}"#);
    put_entry(&etcd, "never-made", r#"{"owner":"alpha","state":"creating"}"#);
    put_entry(&etcd, "made", r#"{"owner":"alpha","state":"creating"}"#);
    alpha.restart();
    let beta = node(&etcd, "beta", free_port());
    // The delete was never answered (the stream is still here): rolled back, not finished.
    assert_eq!(entry(&etcd, "being-deleted").as_deref(), Some(r#"{"owner":"alpha","state":"live"}"#));
    assert_eq!(beta.client().post("/v1/stream/being-deleted", "text/plain", b"y").status, 204);
    assert_eq!(beta.client().get("/v1/stream/being-deleted?offset=-1").text(), "xy");
    assert_eq!(entry(&etcd, "never-made"), None, "the claim was given back");
    assert_eq!(beta.client().put("/v1/stream/never-made", "text/plain", b"").status, 201);
    assert_eq!(entry(&etcd, "made").as_deref(), Some(r#"{"owner":"alpha","state":"live"}"#));
    assert_eq!(beta.client().get("/v1/stream/made?offset=-1").text(), "x");
}
