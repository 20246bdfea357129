//! Nodes of a cluster for the etcd tests: `ds-server` processes in acid mode sharing one
//! [`Etcd`], found by where they hold streams, and the directory's entries read and written
//! in etcd by hand (as a crash or an operator would leave them).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;

use crate::client::Client;
use crate::etcd::{free_port, Etcd};
use crate::server::{binary, Server, TEST_STORAGE};

/// Starts node `id` of the cluster on `port` (acid, a 2 s lease).
pub fn node(etcd: &Etcd, id: &str, port: SocketAddr) -> Server {
    node_with(etcd, id, port, &[])
}

/// Node `id` as [`node`] starts it, with `extra` settings too.
pub fn node_with(etcd: &Etcd, id: &str, port: SocketAddr, extra: &[(&str, &str)]) -> Server {
    let (port_text, url, endpoint) = (port.port().to_string(), format!("http://{port}"), etcd.endpoint());
    let mut env = vec![
        ("DS_SERVER__PORT", port_text.as_str()),
        ("DS_CLUSTER__ETCD_ENDPOINTS", endpoint.as_str()),
        ("DS_CLUSTER__NODE_ID", id),
        ("DS_CLUSTER__ADVERTISE_URL", url.as_str()),
        ("DS_CLUSTER__LEASE_TTL_SECS", "2"),
    ];
    env.extend_from_slice(extra);
    Server::start_in("acid", &env)
}

/// Nodes `node-0` … of the cluster, each on a free port.
pub fn nodes(etcd: &Etcd, count: usize) -> Vec<Server> {
    (0..count).map(|i| node(etcd, &format!("node-{i}"), free_port())).collect()
}

/// The nodes that hold `path` themselves: asked as if forwarded, a node that does not hold
/// it answers 503 instead of forwarding again.
pub fn holders(nodes: &[&Server], path: &str) -> Vec<SocketAddr> {
    nodes
        .iter()
        .filter(|node| {
            Client::new(node.addr).send("HEAD", path, &[("ds-forwarded-by", "test")], b"").status == 200
        })
        .map(|node| node.addr)
        .collect()
}

/// Retries `check` for up to `timeout`; the last failure message if it never passes.
pub fn eventually(timeout: Duration, mut check: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + timeout;
    loop {
        match check() {
            Ok(()) => return,
            Err(why) if Instant::now() > deadline => panic!("still not true after {timeout:?}: {why}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Puts the directory entry of stream `name` by hand.
pub fn put_entry(etcd: &Etcd, name: &str, value: &str) {
    put_key(etcd, &format!("/ds/streams/{name}"), value);
}

/// The directory entry of stream `name`, if there is one.
pub fn entry(etcd: &Etcd, name: &str) -> Option<String> {
    key(etcd, &format!("/ds/streams/{name}")).map(|(value, _)| value)
}

/// Puts `value` at `key` in etcd (no lease), as an operator would.
pub fn put_key(etcd: &Etcd, key: &str, value: &str) {
    let body = serde_json::json!({ "key": BASE64.encode(key), "value": BASE64.encode(value) });
    let put = Client::new(etcd.client_addr).send("POST", "/v3/kv/put", &[], body.to_string().as_bytes());
    assert_eq!(put.status, 200, "{}", put.text());
}

/// Deletes `key` in etcd, as an operator would.
pub fn delete_key(etcd: &Etcd, key: &str) {
    let body = serde_json::json!({ "key": BASE64.encode(key) });
    let deleted =
        Client::new(etcd.client_addr).send("POST", "/v3/kv/deleterange", &[], body.to_string().as_bytes());
    assert_eq!(deleted.status, 200, "{}", deleted.text());
}

/// The value at `key` in etcd and the lease it is attached to (0: none), if present.
pub fn key(etcd: &Etcd, key: &str) -> Option<(String, i64)> {
    let body = serde_json::json!({ "key": BASE64.encode(key) });
    let range = Client::new(etcd.client_addr).send("POST", "/v3/kv/range", &[], body.to_string().as_bytes());
    let found = &range.json()["kvs"][0];
    let value = found["value"].as_str().map(|text| BASE64.decode(text).unwrap())?;
    let lease = found["lease"].as_str().and_then(|text| text.parse().ok()).unwrap_or(0);
    Some((String::from_utf8(value).unwrap(), lease))
}

/// A `ds-server` command for node `id` on `port` with its data in `data_dir` (acid), to run
/// by hand, as a start expected to be refused is.
pub fn node_command(etcd: &Etcd, id: &str, port: SocketAddr, data_dir: &Path) -> Command {
    let mut command = Command::new(binary("ds-server"));
    command
        .env_clear()
        .env("DS_STORAGE__MODE", "acid")
        .env("DS_STORAGE__DATA_DIR", data_dir)
        .env("DS_SERVER__HOST", "127.0.0.1")
        .env("DS_SERVER__PORT", port.port().to_string())
        .env("DS_CLUSTER__ETCD_ENDPOINTS", etcd.endpoint())
        .env("DS_CLUSTER__NODE_ID", id)
        .env("DS_CLUSTER__ADVERTISE_URL", format!("http://{port}"))
        .envs(TEST_STORAGE);
    command
}

/// Runs `command`, which must exit unsuccessfully within 20 s; its standard error.
pub fn refused_start(mut command: Command) -> String {
    let mut child = command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("ds-server runs");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait on ds-server") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ds-server started where it should have refused to");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("piped stderr"), &mut stderr).unwrap();
    assert!(!status.success(), "ds-server exits unsuccessfully: {stderr}");
    stderr
}
