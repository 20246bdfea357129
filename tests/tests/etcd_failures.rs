//! The cluster under partial failures, each as an unlucky operator meets it (real etcd,
//! real nodes): a forward that breaks after the request left is an unknown outcome (502 or
//! 504 `outcome-unknown`), never 503 and never a hang; a node key taken away is noticed and
//! put back within a renewal, and one slow etcd member does not expire the lease; an empty
//! data directory under a node id etcd knows is refused; a storm of requests for unknown
//! names is not a storm on etcd; entries lost from the directory are put back by their
//! owners; a frozen watch is noticed; appends wait while a delete is unsettled.
//!
//! `etcd` is found or installed by `.ci/setup.sh`.

use std::time::Duration;

use ds_tests::cluster::{
    delete_key, entry, eventually, key, node, node_command, node_with, put_key, refused_start,
};
use ds_tests::data_dir::DataDir;
use ds_tests::etcd::{free_port, Etcd};
use ds_tests::relay::Relay;
use ds_tests::{Client, Server};

/// A short long-poll timeout, so a forward's answer timeout (long-poll timeout + 5 s) is
/// short too.
const SHORT_LONG_POLL: (&str, &str) = ("DS_SERVER__LONG_POLL_TIMEOUT_SECS", "3");

fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: a plain kill(2) on the test's own child process.
    let sent = unsafe { libc::kill(pid as libc::pid_t, signal) };
    assert_eq!(sent, 0, "signal {signal} to {pid}");
}

#[test]
fn a_forward_that_breaks_after_the_request_left_is_an_unknown_outcome() {
    let etcd = Etcd::start();
    let mut owner = node_with(&etcd, "owner", free_port(), &[SHORT_LONG_POLL]);
    let other = node_with(&etcd, "other", free_port(), &[SHORT_LONG_POLL]);
    assert_eq!(owner.client().put("/v1/stream/s", "text/plain", b"a").status, 201);
    let tail = owner.client().head("/v1/stream/s").next_offset();

    // The owner killed while it holds a forwarded long-poll: the request had arrived.
    let other_addr = other.addr;
    let path = format!("/v1/stream/s?offset={tail}&live=long-poll");
    let waiting = std::thread::spawn(move || Client::new(other_addr).get(&path));
    owner.wait_for_metric("ds_live_readers", 1);
    owner.kill();
    let broken = waiting.join().unwrap();
    assert_eq!(broken.status, 502, "{}", broken.text());
    assert_eq!(broken.json()["type"], "urn:ds:problem:outcome-unknown");

    // The owner stopped (not dead: its socket takes the request) while an append is
    // forwarded to it: 504 once the answer timeout passes, not a request held forever.
    owner.restart();
    let stopped = owner.pid();
    signal(stopped, libc::SIGSTOP);
    let timed_out = other.client().post("/v1/stream/s", "text/plain", b"b");
    signal(stopped, libc::SIGCONT);
    assert_eq!(timed_out.status, 504, "{}", timed_out.text());
    assert_eq!(timed_out.json()["type"], "urn:ds:problem:outcome-unknown");
    // Unknown was the right word: the owner applied it once it ran again.
    eventually(Duration::from_secs(10), || {
        let read = owner.client().get("/v1/stream/s?offset=-1").text();
        (read == "ab").then_some(()).ok_or(read)
    });

    // A refused connection sent nothing: 503, safe to retry.
    owner.kill();
    let refused = other.client().post("/v1/stream/s", "text/plain", b"c");
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.json()["type"], "urn:ds:problem:owner-unavailable");
}

#[test]
fn a_node_key_taken_away_is_put_back_within_a_renewal() {
    let etcd = Etcd::start();
    let owner = node(&etcd, "owner", free_port());
    let other = node(&etcd, "other", free_port());
    assert_eq!(owner.client().put("/v1/stream/s", "text/plain", b"a").status, 201);
    let (value, lease) = key(&etcd, "/ds/nodes/owner").expect("the owner's key");
    assert_ne!(lease, 0, "the node key lives under the node's lease");

    // Deleted by hand (a mistaken cleanup, a restore from before the node joined).
    delete_key(&etcd, "/ds/nodes/owner");
    eventually(Duration::from_secs(5), || match key(&etcd, "/ds/nodes/owner") {
        Some(found) if found == (value.clone(), lease) => Ok(()),
        found => Err(format!("the node key is {found:?}")),
    });
    eventually(Duration::from_secs(5), || {
        let read = other.client().get("/v1/stream/s?offset=-1");
        (read.status == 200).then_some(()).ok_or(format!("{} {}", read.status, read.text()))
    });

    // Another address under this id: another process has it, and the owner stops serving.
    put_key(&etcd, "/ds/nodes/owner", r#"{"url":"http://127.0.0.1:9"}"#);
    eventually(Duration::from_secs(5), || {
        let read = owner.client().get("/v1/stream/s?offset=-1");
        let taken = read.status == 503 && read.text().contains("urn:ds:problem:identity-taken");
        taken.then_some(()).ok_or(format!("{} {}", read.status, read.text()))
    });
    // Gone again: the key is the owner's once more, and so are its streams.
    delete_key(&etcd, "/ds/nodes/owner");
    eventually(Duration::from_secs(5), || {
        let read = owner.client().get("/v1/stream/s?offset=-1");
        (read.status == 200 && read.text() == "a").then_some(()).ok_or(format!(
            "{} {}",
            read.status,
            read.text()
        ))
    });
}

#[test]
fn one_black_holed_etcd_endpoint_does_not_expire_the_lease() {
    let etcd = Etcd::start();
    let relays = [0, 1].map(|_| Relay::start(etcd.client_addr, "/v3/lease/keepalive"));
    let endpoints = format!("http://{},http://{}", relays[0].addr, relays[1].addr);
    let owner = node_with(&etcd, "owner", free_port(), &[("DS_CLUSTER__ETCD_ENDPOINTS", &endpoints)]);
    let (_, lease) = key(&etcd, "/ds/nodes/owner").expect("the owner's key");
    eventually(Duration::from_secs(5), || {
        (relays[0].forwarded() > 0).then_some(()).ok_or("no renewal through the first endpoint yet".into())
    });

    // The first member stops answering renewals (a 2 s lease, renewed every 667 ms).
    relays[0].hold(true);
    let before = relays[1].forwarded();
    eventually(Duration::from_secs(10), || {
        let through_second = relays[1].forwarded() - before;
        (through_second >= 4)
            .then_some(())
            .ok_or(format!("{through_second} renewals through the second endpoint"))
    });
    assert_eq!(key(&etcd, "/ds/nodes/owner").map(|(_, now)| now), Some(lease), "the same lease lives on");
    assert!(!owner.log().contains("lease expired"), "{}", owner.log());
}

#[test]
fn an_empty_data_directory_under_a_used_node_id_is_refused_unless_adopted() {
    let etcd = Etcd::start();
    let port = free_port();
    let mut owner = node(&etcd, "owner", port);
    assert_eq!(owner.client().put("/v1/stream/kept", "text/plain", b"a").status, 201);
    owner.kill();
    let old_disk = owner.data_dir().unwrap().to_path_buf();

    // The disk did not mount: the same id and address, an empty data directory.
    let empty = DataDir::new("unmounted");
    let stderr = refused_start(node_command(&etcd, "owner", port, empty.path()));
    assert!(stderr.contains("kept") && stderr.contains("DS_CLUSTER__ADOPT_NODE_ID"), "{stderr}");
    assert!(entry(&etcd, "kept").is_some(), "the refused start removed nothing");
    // Nor does a start in memory mode by mistake (a lost setting) drop the disk's streams.
    let mut in_memory = node_command(&etcd, "owner", port, empty.path());
    in_memory.env("DS_STORAGE__MODE", "memory");
    let stderr = refused_start(in_memory);
    assert!(stderr.contains("kept") && stderr.contains("memory"), "{stderr}");
    assert!(entry(&etcd, "kept").is_some(), "the refused start removed nothing");
    // A second host given the same id is refused alike while the first is up.
    owner.restart();
    let second = DataDir::new("second-host");
    let stderr = refused_start(node_command(&etcd, "owner", free_port(), second.path()));
    assert!(stderr.contains("kept"), "{stderr}");
    assert_eq!(owner.client().get("/v1/stream/kept?offset=-1").text(), "a", "the old disk serves on");
    owner.kill();

    // The old disk is lost for good: the operator says so, and its streams leave the directory.
    let adopter = DataDir::new("adopter");
    let (port_text, url, endpoint) = (port.port().to_string(), format!("http://{port}"), etcd.endpoint());
    let adopter_path = adopter.path().display().to_string();
    let adopted = Server::start(&[
        ("DS_STORAGE__MODE", "acid"),
        ("DS_STORAGE__DATA_DIR", &adopter_path),
        ("DS_SERVER__PORT", &port_text),
        ("DS_CLUSTER__ETCD_ENDPOINTS", &endpoint),
        ("DS_CLUSTER__NODE_ID", "owner"),
        ("DS_CLUSTER__ADVERTISE_URL", &url),
        ("DS_CLUSTER__ADOPT_NODE_ID", "true"),
    ]);
    assert_eq!(entry(&etcd, "kept"), None);
    assert_eq!(adopted.client().get("/v1/stream/kept").status, 404);
    drop(adopted);
    // And the old disk, found again, no longer runs as the id it gave up.
    let stderr = refused_start(node_command(&etcd, "owner", port, &old_disk));
    assert!(stderr.contains("DS_CLUSTER__ADOPT_NODE_ID"), "{stderr}");
}

#[test]
fn a_storm_of_requests_for_unknown_names_is_not_a_storm_on_etcd() {
    let etcd = Etcd::start();
    let asked = node(&etcd, "asked", free_port());
    let other = node(&etcd, "other", free_port());
    let before = etcd.range_requests();
    for _ in 0..200 {
        assert_eq!(asked.client().get("/v1/stream/nobody").status, 404);
    }
    let ranges = etcd.range_requests() - before;
    assert!(ranges < 50, "{ranges} reads of etcd for 200 requests of one unknown name");
    // The name made elsewhere: a write through this node right after finds it (a write never
    // takes remembered absence), and reads do once the watch forgets what etcd said.
    assert_eq!(other.client().put("/v1/stream/nobody", "text/plain", b"here").status, 201);
    assert_eq!(asked.client().post("/v1/stream/nobody", "text/plain", b"!").status, 204);
    eventually(Duration::from_secs(5), || {
        let read = asked.client().get("/v1/stream/nobody?offset=-1");
        (read.status == 200).then_some(()).ok_or(format!("{}", read.status))
    });
}

#[test]
fn entries_lost_from_the_directory_are_put_back_by_their_owner() {
    let mut etcd = Etcd::start();
    let owner = node(&etcd, "owner", free_port());
    let other = node(&etcd, "other", free_port());
    assert_eq!(owner.client().put("/v1/stream/s", "text/plain", b"a").status, 201);
    let live = Some(r#"{"owner":"owner","state":"live"}"#.to_string());

    // Removed by hand: put back, so no other node makes a second copy.
    delete_key(&etcd, "/ds/streams/s");
    eventually(Duration::from_secs(5), || {
        let found = entry(&etcd, "s");
        (found == live).then_some(()).ok_or(format!("{found:?}"))
    });
    assert_eq!(other.client().put("/v1/stream/s", "text/plain", b"").status, 200, "it exists, on its owner");

    // etcd lost whole (started again with no data): the owner registers its streams again.
    etcd.start_empty();
    eventually(Duration::from_secs(15), || {
        let found = entry(&etcd, "s");
        (found == live).then_some(()).ok_or(format!("{found:?}"))
    });
    eventually(Duration::from_secs(15), || {
        let read = other.client().get("/v1/stream/s?offset=-1");
        (read.status == 200 && read.text() == "a").then_some(()).ok_or(format!(
            "{} {}",
            read.status,
            read.text()
        ))
    });
    // Creates wait (503) until each node has registered its streams again; never a copy.
    eventually(Duration::from_secs(15), || match other.client().put("/v1/stream/s", "text/plain", b"") {
        created if created.status == 201 => panic!("a second copy of s was made"),
        exists if exists.status == 200 => Ok(()),
        waiting => Err(format!("{} {}", waiting.status, waiting.text())),
    });
}

#[test]
fn a_frozen_watch_is_noticed_and_followed_again() {
    let etcd = Etcd::start();
    let relay = Relay::start(etcd.client_addr, "never sent");
    let through_relay = format!("http://{}", relay.addr);
    let frozen = node_with(&etcd, "frozen", free_port(), &[("DS_CLUSTER__ETCD_ENDPOINTS", &through_relay)]);
    let first = node(&etcd, "first", free_port());
    let second = node(&etcd, "second", free_port());
    assert_eq!(first.client().put("/v1/stream/x", "text/plain", b"first").status, 201);
    assert_eq!(frozen.client().get("/v1/stream/x?offset=-1").text(), "first");

    // Its etcd member goes quiet on every open connection, the watch's too.
    relay.freeze();
    assert_eq!(first.client().delete("/v1/stream/x").status, 204);
    assert_eq!(second.client().put("/v1/stream/x", "text/plain", b"second").status, 201);
    eventually(Duration::from_secs(15), || {
        let read = frozen.client().get("/v1/stream/x?offset=-1");
        (read.status == 200 && read.text() == "second").then_some(()).ok_or(format!(
            "{} {}",
            read.status,
            read.text()
        ))
    });
}

#[test]
fn appends_wait_while_a_delete_is_unsettled_in_the_directory() {
    let etcd = Etcd::start();
    let relay = Relay::start(etcd.client_addr, "/v3/kv/txn");
    let through_relay = format!("http://{}", relay.addr);
    let owner = node_with(&etcd, "owner", free_port(), &[("DS_CLUSTER__ETCD_ENDPOINTS", &through_relay)]);
    assert_eq!(owner.client().put("/v1/stream/s", "text/plain", b"a").status, 201);

    // etcd marks the entry `deleting`, and its answer is lost: the delete's outcome in the
    // directory is unknown to the node, and so is every settling write for a while.
    relay.swallow(true);
    let deleted = owner.client().delete("/v1/stream/s");
    assert_eq!(deleted.status, 503, "{}", deleted.text());
    assert!(entry(&etcd, "s").is_some(), "the entry stays: the delete was not answered");
    let refused = owner.client().post("/v1/stream/s", "text/plain", b"b");
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert!(refused.text().contains("urn:ds:problem:delete-unsettled"), "{}", refused.text());

    // etcd's answers come through again: the entry is live once more, and appends go on.
    relay.swallow(false);
    eventually(Duration::from_secs(15), || {
        let appended = owner.client().post("/v1/stream/s", "text/plain", b"b");
        (appended.status == 204).then_some(()).ok_or(format!("{} {}", appended.status, appended.text()))
    });
    assert_eq!(entry(&etcd, "s").as_deref(), Some(r#"{"owner":"owner","state":"live"}"#));
    assert_eq!(owner.client().get("/v1/stream/s?offset=-1").text(), "ab");
}
