//! File descriptors: a process allowed few of them refuses a configuration that cannot fit,
//! and one that fits never dies when clients take every descriptor it has.

use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use ds_tests::server::{binary, limit_open_files};
use ds_tests::Server;

const OPEN_FILES: u64 = 256;

#[test]
fn connections_that_cannot_fit_are_refused_at_start() {
    let mut command = Command::new(binary("ds-server"));
    command.env_clear().env("DS_SERVER__HOST", "127.0.0.1").env("DS_SERVER__PORT", "0");
    limit_open_files(&mut command, OPEN_FILES);
    let output = command.output().expect("ds-server runs");
    assert!(!output.status.success(), "10,000 connections do not fit in {OPEN_FILES} descriptors");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("DS_SERVER__MAX_CONNECTIONS=10000"), "{stderr}");
    assert!(stderr.contains("at most 160"), "it says what would fit: {stderr}");
}

#[test]
fn clients_taking_every_descriptor_never_kill_the_server() {
    for mode in ["acid", "file-durable"] {
        // One shard, so that 64 connections fit beside the file modes' cache of open files.
        let env = [("DS_SERVER__MAX_CONNECTIONS", "64"), ("DS_STORAGE__ACID_SHARD_COUNT", "1")];
        let server = Server::start_with_open_files(mode, &env, OPEN_FILES);
        let client = server.client();
        assert_eq!(client.put("/v1/stream/before", "text/plain", b"one;").status, 201);
        // More idle connections than the process has descriptors.
        let idle: Vec<TcpStream> = (0..300).filter_map(|_| TcpStream::connect(server.addr).ok()).collect();
        std::thread::sleep(Duration::from_millis(500));
        drop(idle);
        // Once they are gone, everything works as before.
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            let status =
                client.try_send("PUT", "/v1/stream/after", &[("Content-Type", "text/plain")], b"two;");
            match status {
                Ok(response) if response.status != 503 => break response.status,
                _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
                other => {
                    panic!("{mode}: the server never took a request again: {:?}", other.map(|r| r.status))
                }
            }
        };
        assert_eq!(status, 201, "{mode}");
        for name in ["before", "after"] {
            assert_eq!(
                client.post(&format!("/v1/stream/{name}"), "text/plain", b"more;").status,
                204,
                "{mode}"
            );
        }
        assert_eq!(client.get("/v1/stream/before").text(), "one;more;");
        let metrics = client.get("/metrics").text();
        assert!(
            metrics.contains("ds_errors_total{kind=\"accept\"}"),
            "accept failures are counted: {metrics}"
        );
    }
}
