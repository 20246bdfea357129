//! Several `ds-server` nodes behind the shipped HAProxy cluster configuration
//! (`deploy/haproxy/backend-cluster.cfg`): each stream lives on exactly one node, every
//! request for it lands there, live reads work through the proxy, and stopping one node
//! affects only the streams that live on it.
//!
//! `haproxy` is found or installed by `.ci/setup.sh`; the tests fail, saying why, without it.

use std::time::{Duration, Instant};

use ds_tests::haproxy::Proxy;
use ds_tests::jwt::{mint, valid_claims, TRUSTED_KEY};
use ds_tests::{Client, Server};

const STREAMS: usize = 24;
const APPENDS: usize = 3;

fn stream_path(index: usize) -> String {
    // Names with several segments and characters that are percent-encoded on the way.
    format!("/v1/stream/tenant-{}/orders%20{index}", index % 4)
}

/// The nodes that hold `path` (asked directly, not through the proxy).
fn holders(nodes: &[Server], path: &str) -> Vec<usize> {
    nodes
        .iter()
        .enumerate()
        .filter(|(_, node)| Client::new(node.addr).head(path).status == 200)
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn streams_are_placed_by_name_and_a_stopped_node_affects_only_its_own() {
    Proxy::require();
    let mut nodes: Vec<Server> = (0..3).map(|_| Server::start(&[])).collect();
    let env: Vec<(&str, String)> = ["DS_NODE1", "DS_NODE2", "DS_NODE3"]
        .into_iter()
        .zip(&nodes)
        .map(|(variable, node)| (variable, node.addr.to_string()))
        .collect();
    let proxy = Proxy::start("backend-cluster.cfg", &env);
    let token = format!("Bearer {}", mint(&valid_claims("cluster-test"), TRUSTED_KEY));
    let auth = ("Authorization", token.as_str());
    let text = ("Content-Type", "text/plain");
    let client = proxy.client();

    let mut owner = Vec::new();
    for index in 0..STREAMS {
        let path = stream_path(index);
        assert_eq!(client.send("PUT", &path, &[auth, text], b"").status, 201, "{path}");
        for append in 0..APPENDS {
            let body = format!("{index}.{append};");
            assert_eq!(client.send("POST", &path, &[auth, text], body.as_bytes()).status, 204, "{path}");
        }
        let held_by = holders(&nodes, &path);
        assert_eq!(held_by.len(), 1, "{path} lives on exactly one node: {held_by:?}");
        let read = Client::new(nodes[held_by[0]].addr).get(&format!("{path}?offset=-1"));
        assert_eq!(read.text(), (0..APPENDS).map(|a| format!("{index}.{a};")).collect::<String>(), "{path}");
        owner.push(held_by[0]);
    }
    let used: std::collections::BTreeSet<usize> = owner.iter().copied().collect();
    assert!(used.len() >= 2, "names spread over the nodes: {owner:?}");

    // A live read through the proxy follows the writes that land on the same node.
    let live_path = stream_path(0);
    let mut events = client.open_stream(&format!("{live_path}?offset=-1&live=sse"), &[auth]);
    events.read_until("\"upToDate\":true", Duration::from_secs(5));
    assert_eq!(client.send("POST", &live_path, &[auth, text], b"live;").status, 204);
    assert!(events.read_until("data:live;", Duration::from_secs(5)).contains("data:live;"));
    drop(events);

    let stopped = owner[0];
    assert!(nodes[stopped].terminate().success());
    let check = |after: &str| {
        for (index, &node) in owner.iter().enumerate() {
            let read = client.send("GET", &format!("{}?offset=-1", stream_path(index)), &[auth], b"");
            if node == stopped {
                assert_ne!(read.status, 200, "{after}: stream {index} lived on the stopped node");
            } else {
                assert_eq!(read.status, 200, "{after}: stream {index} on node {node} is unaffected");
                assert!(read.text().starts_with(&format!("{index}.0;")), "{after}: stream {index}");
            }
        }
    };
    check("right after the stop");
    // Once health checks take the node out of the ring (2 failed checks, 1 s apart), the
    // other streams still land where they live: seen when a stream of the stopped node is
    // answered by a node that runs (404: it lives nowhere else), no longer by the proxy.
    let stopped_stream = owner.iter().position(|&node| node == stopped).expect("a stream on it");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let read = client.send("GET", &format!("{}?offset=-1", stream_path(stopped_stream)), &[auth], b"");
        if read.status == 404 {
            break;
        }
        assert!(Instant::now() < deadline, "the stopped node never left the ring: {}", read.status);
        std::thread::sleep(Duration::from_millis(100));
    }
    let started = Instant::now();
    check("after the node left the ring");
    eprintln!("placement held for {} streams ({:?} to check)", STREAMS, started.elapsed());
}
