//! What operators rely on: `/metrics` scraped for real, the connection limit, the bound on
//! a reader that stops reading, a graceful shutdown under load, stop signals sent while the
//! server starts or a second one while it shuts down, and the count of acid's waits for
//! zeros.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ds_tests::client::read_response;
use ds_tests::data_dir::DataDir;
use ds_tests::{Client, Server};

/// The samples of a Prometheus text exposition: `name{labels}` → value.
fn scrape(client: &Client) -> HashMap<String, f64> {
    let response = client.get("/metrics");
    assert_eq!(response.status, 200);
    assert!(response.header("content-type").is_some_and(|v| v.starts_with("text/plain")));
    let text = response.text();
    let mut samples = HashMap::new();
    for line in text.lines().filter(|line| !line.starts_with('#') && !line.is_empty()) {
        let (name, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("sample line {line:?}"));
        samples.insert(name.to_string(), value.parse().unwrap_or_else(|_| panic!("value in {line:?}")));
    }
    samples
}

fn sample(samples: &HashMap<String, f64>, name: &str) -> f64 {
    *samples.get(name).unwrap_or_else(|| panic!("{name} missing from {samples:#?}"))
}

#[test]
fn metrics_count_what_the_server_did() {
    let server = Server::start_in("acid", &[]);
    let client = server.client();
    for index in 0..3 {
        assert_eq!(client.put(&format!("/v1/stream/m{index}"), "text/plain", b"").status, 201);
    }
    for _ in 0..5 {
        assert_eq!(client.post("/v1/stream/m0", "text/plain", b"0123456789").status, 204);
    }
    assert_eq!(client.get("/v1/stream/m0?offset=-1").text().len(), 50);
    let again = client.get("/v1/stream/m0?offset=-1");
    assert_eq!(again.text().len(), 50, "the same read again: the kept answer");
    assert_eq!(client.get("/v1/stream/missing?offset=-1").status, 404);
    let mut sse = client.open_stream("/v1/stream/m1?offset=-1&live=sse", &[]);
    sse.read_until("upToDate", Duration::from_secs(5));
    let tail = client.head("/v1/stream/m2").next_offset();
    let long_poll =
        std::thread::spawn(move || client.get(&format!("/v1/stream/m2?offset={tail}&live=long-poll")));
    let deadline = Instant::now() + Duration::from_secs(10);
    let samples = loop {
        let samples = scrape(&client);
        if sample(&samples, "ds_live_readers{kind=\"long-poll\"}") == 1.0 || Instant::now() > deadline {
            break samples;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(sample(&samples, "ds_requests_total{route=\"create\",status=\"201\"}"), 3.0);
    assert_eq!(sample(&samples, "ds_requests_total{route=\"append\",status=\"204\"}"), 5.0);
    assert_eq!(sample(&samples, "ds_requests_total{route=\"read\",status=\"200\"}"), 2.0);
    assert_eq!(
        sample(&samples, "ds_kept_answer_hits_total"),
        1.0,
        "the second read was answered from the kept answer"
    );
    assert_eq!(sample(&samples, "ds_read_copies_refused_total"), 0.0, "two small reads fit the copies cap");
    assert_eq!(sample(&samples, "ds_requests_total{route=\"read\",status=\"404\"}"), 1.0);
    assert_eq!(sample(&samples, "ds_append_bytes_total"), 50.0);
    assert!(sample(&samples, "ds_read_bytes_total") >= 50.0);
    assert_eq!(sample(&samples, "ds_live_readers{kind=\"sse\"}"), 1.0);
    assert_eq!(sample(&samples, "ds_live_readers{kind=\"long-poll\"}"), 1.0);
    assert_eq!(sample(&samples, "ds_streams"), 3.0);
    assert_eq!(sample(&samples, "ds_stored_bytes"), 50.0);
    for shard in 0..4 {
        assert_eq!(sample(&samples, &format!("ds_shard_queue_depth{{shard=\"{shard}\"}}")), 0.0);
    }
    assert!(sample(&samples, "ds_batch_ops_count") >= 1.0);
    assert_eq!(sample(&samples, "ds_batch_ops_sum"), 8.0, "3 creates and 5 appends were committed");
    assert!(sample(&samples, "ds_commit_seconds_count") >= 1.0, "acid commits are timed");
    assert!(sample(&samples, "ds_commit_seconds_bucket{le=\"+Inf\"}") >= 1.0);
    assert_eq!(sample(&samples, "ds_errors_total{kind=\"write-stall\"}"), 0.0);

    assert_eq!(server.client().post("/v1/stream/m2", "text/plain", b"wake").status, 204);
    assert_eq!(long_poll.join().unwrap().status, 200);
    drop(sse);
}

/// A keep-alive connection that has been served once (so it holds a connection slot).
fn held_connection(server: &Server) -> BufReader<TcpStream> {
    let mut socket = TcpStream::connect(server.addr).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    socket.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut reader = BufReader::new(socket);
    assert_eq!(read_response(&mut reader, false).unwrap().status, 200);
    reader
}

#[test]
fn connections_past_the_limit_get_a_fast_503() {
    let server = Server::start(&[("DS_SERVER__MAX_CONNECTIONS", "2")]);
    let mut first = held_connection(&server);
    let second = held_connection(&server);
    let refused = server.client().send("GET", "/healthz", &[], b"");
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(refused.json()["type"], "urn:ds:problem:too-many-connections");

    first.get_mut().write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let metrics = read_response(&mut first, false).unwrap().text();
    assert!(metrics.contains("ds_connections_refused_total 1\n"), "{metrics}");
    assert!(metrics.contains("ds_connections 2\n"), "{metrics}");

    drop(second);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = server.client().send("GET", "/healthz", &[], b"").status;
        if status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "a closed connection frees its slot (still {status})");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The data payloads and the last `id:` of the complete events in an SSE text.
fn complete_events(text: &str) -> (Vec<String>, Option<String>) {
    let mut blocks: Vec<&str> = text.split("\n\n").collect();
    blocks.pop(); // the piece after the last blank line is incomplete (or empty)
    let mut payloads = Vec::new();
    let mut last_id = None;
    for block in blocks {
        let line = |prefix: &str| block.lines().find_map(|l| l.strip_prefix(prefix)).map(String::from);
        if block.starts_with("event: data") {
            payloads.push(line("data:").expect("a data line"));
        }
        last_id = line("id:").or(last_id);
    }
    (payloads, last_id)
}

#[test]
fn a_reader_that_stops_reading_is_cut_and_resumes_without_loss() {
    let server = Server::start(&[
        ("DS_SERVER__WRITE_STALL_TIMEOUT_SECS", "1"),
        ("DS_SERVER__SSE_RECONNECT_INTERVAL_SECS", "0"),
        ("DS_LIMITS__MAX_STREAM_BYTES", "67108864"),
        ("DS_LIMITS__MAX_MEMORY_BYTES", "268435456"),
    ]);
    let client = server.client();
    let path = "/v1/stream/slow-reader";
    assert_eq!(client.put(path, "text/plain", b"").status, 201);
    let mut stalled = client.open_stream(&format!("{path}?offset=-1&live=sse"), &[]);
    // More than the socket buffers on both sides can hold, so the server's writes block.
    let messages: Vec<String> = (0..400).map(|i| format!("{i:08}{}", "x".repeat(65_528))).collect();
    for message in &messages {
        assert_eq!(client.post(path, "text/plain", message.as_bytes()).status, 204);
    }
    std::thread::sleep(Duration::from_secs(3));
    assert!(stalled.read_to_end(Duration::from_secs(30)), "the server closed the stalled reader");
    let (mut received, last_id) = complete_events(&stalled.text());
    assert!(received.len() < messages.len(), "the reader was cut before the end ({})", received.len());
    let stalls = server.client().get("/metrics").text();
    assert!(stalls.contains("ds_errors_total{kind=\"write-stall\"} 1\n"), "{stalls}");

    // Resume from the last complete event, as a client does; on a loaded machine a resumed
    // reader that falls a second behind is cut too, and resumes again.
    let last_offset = client.head(path).next_offset();
    let mut resume_from = last_id.unwrap_or_else(|| "-1".to_string());
    for _ in 0..10 {
        if resume_from == last_offset {
            break;
        }
        let mut resumed = client.open_stream(&format!("{path}?offset={resume_from}&live=sse"), &[]);
        resumed.read_until(&format!("id:{last_offset}\n\n"), Duration::from_secs(30));
        let (rest, last) = complete_events(&resumed.text());
        received.extend(rest);
        resume_from = last.unwrap_or(resume_from);
    }
    assert_eq!(received.len(), messages.len(), "every message arrives exactly once");
    assert!(received == messages, "in order and intact");
}

#[test]
fn sigterm_ends_live_reads_finishes_writes_and_exits_cleanly() {
    let mut server = Server::start_in("acid", &[]);
    let client = server.client();
    let path = "/v1/stream/shutdown";
    assert_eq!(client.put(path, "text/plain", b"").status, 201);
    let mut sse = client.open_stream(&format!("{path}?offset=-1&live=sse"), &[]);
    sse.read_until("upToDate", Duration::from_secs(5));
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let writers: Vec<_> = (0..4)
        .map(|writer| {
            let (stop, acknowledged) = (Arc::clone(&stop), Arc::clone(&acknowledged));
            std::thread::spawn(move || {
                for index in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let message = format!("w{writer}-{index};");
                    match client.try_send("POST", path, &[("Content-Type", "text/plain")], message.as_bytes())
                    {
                        Ok(response) if response.status == 204 => acknowledged.lock().unwrap().push(message),
                        Ok(_) | Err(_) => break,
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));

    let status = server.terminate();
    stop.store(true, Ordering::Relaxed);
    writers.into_iter().for_each(|writer| writer.join().unwrap());
    assert!(status.success(), "exit status {status}; log:\n{}", server.log());
    assert!(sse.read_to_end(Duration::from_secs(5)), "the SSE response ended at shutdown");
    assert!(server.log().contains("ds-server stopped"), "{}", server.log());

    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(!acknowledged.is_empty(), "writes were in flight");
    server.restart();
    let stored = server.client().get(&format!("{path}?offset=-1")).text();
    for message in &acknowledged {
        assert!(stored.contains(message.as_str()), "acknowledged {message} survived the shutdown");
    }
}

/// Starts `ds-server` in acid on `dir` with SIGINT ignored, as a shell script's background
/// job inherits it; returns the process and a channel of its log lines.
fn spawn_with_sigint_ignored(dir: &DataDir) -> (Child, Receiver<String>) {
    let mut command = Command::new(ds_tests::server::binary("ds-server"));
    command
        .env_clear()
        .env("RUST_LOG", "info")
        .env("DS_SERVER__HOST", "127.0.0.1")
        .env("DS_SERVER__PORT", "0")
        .env("DS_STORAGE__MODE", "acid")
        .env("DS_STORAGE__DATA_DIR", dir.path())
        .envs(ds_tests::server::TEST_STORAGE)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: the closure only makes one async-signal-safe system call in the child.
    unsafe {
        command.pre_exec(|| match libc::signal(libc::SIGINT, libc::SIG_IGN) {
            libc::SIG_ERR => Err(std::io::Error::last_os_error()),
            _ => Ok(()),
        });
    }
    let mut child = command.spawn().expect("ds-server starts");
    let stderr = child.stderr.take().expect("piped stderr");
    let (lines_tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    (child, lines)
}

/// Waits up to 20 s for `child` to exit, gathering its log lines into `log`.
fn exit_status(child: &mut Child, lines: &Receiver<String>, log: &mut String) -> Option<ExitStatus> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        log.extend(lines.try_iter().map(|line| line + "\n"));
        if let Some(status) = child.try_wait().expect("wait on ds-server") {
            // Its last lines: until the reader sees the end of its stderr (5 s at most).
            while let Ok(line) = lines.recv_timeout(Duration::from_secs(5)) {
                log.push_str(&line);
                log.push('\n');
            }
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// A stop signal sent while the server starts (here as soon as it says it is starting,
/// while the engine opens its data directory) is kept: the server starts, stops cleanly and
/// exits 0. SIGINT is sent to a process that inherited it as ignored, SIGTERM to one with
/// the default action (which would have killed it mid-start).
#[test]
fn a_stop_signal_during_the_start_stops_the_server_cleanly() {
    for (signal, name) in [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM")] {
        let dir = DataDir::new("acid");
        let (mut child, lines) = spawn_with_sigint_ignored(&dir);
        let mut log = String::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !log.contains("starting (mode acid") {
            let line = lines.recv_timeout(deadline.saturating_duration_since(Instant::now()));
            log.push_str(&line.unwrap_or_else(|_| panic!("{name}: no start line; log:\n{log}")));
            log.push('\n');
        }
        // SAFETY: kill only sends a signal to the child this test started.
        assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0, "{name}: kill");
        let status = exit_status(&mut child, &lines, &mut log);
        let status = status.unwrap_or_else(|| panic!("{name}: still running 20 s later; log:\n{log}"));
        assert_eq!(status.code(), Some(0), "{name}: exit status {status}; log:\n{log}");
        for said in [format!("{name}: shutting down"), "ds-server stopped".to_string()] {
            assert!(log.contains(&said), "{name}: the log says {said:?}; log:\n{log}");
        }
    }
}

/// A second stop signal ends a shutdown that waits for a request in flight: the process ends
/// at once, by the signal, and the next start has everything acknowledged.
#[test]
fn a_second_stop_signal_exits_at_once() {
    let mut server = Server::start_in("acid", &[("DS_SERVER__BODY_TIMEOUT_SECS", "120")]);
    let client = server.client();
    let path = "/v1/stream/kept";
    assert_eq!(client.put(path, "text/plain", b"").status, 201);
    assert_eq!(client.post(path, "text/plain", b"acknowledged").status, 204);
    // An append whose body stops arriving: the graceful shutdown waits for it (10 s).
    let mut held = TcpStream::connect(server.addr).expect("connect");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: ds\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\n"
    );
    held.write_all(head.as_bytes()).and_then(|()| held.write_all(b"partial")).expect("send");
    server.wait_for_metric("ds_request_body_held_bytes", 1000);

    // SAFETY: kill only sends a signal to the server this test started.
    assert_eq!(unsafe { libc::kill(server.pid() as libc::pid_t, libc::SIGTERM) }, 0);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !server.log().contains("SIGTERM: shutting down") {
        assert!(Instant::now() < deadline, "no shutdown; log:\n{}", server.log());
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = server.terminate();
    assert_eq!(status.signal(), Some(libc::SIGTERM), "exit status {status}; log:\n{}", server.log());
    let log = server.log();
    assert!(log.contains("SIGTERM again: exiting at once"), "{log}");
    assert!(!log.contains("ds-server stopped"), "no clean stop; log:\n{log}");
    drop(held);

    server.restart();
    assert_eq!(server.client().get(&format!("{path}?offset=-1")).text(), "acknowledged");
}

/// acid counts the times a shard waited for zeros: an append past the zero-filled prefix of
/// a fresh segment (2 MiB, against the 384 KiB a 12 MiB segment starts with and the three
/// more steps of 384 KiB at most the housekeeper fills ahead) waits for them.
#[test]
fn waits_for_zeros_are_counted() {
    let server = Server::start_in("acid", &[]);
    assert_eq!(server.metric("ds_wal_zero_waits_total"), 0, "nothing written yet");
    let client = server.client();
    assert_eq!(client.put("/v1/stream/big", "application/octet-stream", b"").status, 201);
    let body = vec![7u8; 2 << 20];
    assert_eq!(client.post("/v1/stream/big", "application/octet-stream", &body).status, 204);
    let waits = server.metric("ds_wal_zero_waits_total");
    assert!(waits >= 1, "the append waited for zeros");
    assert_eq!(server.metric("ds_wal_zero_wait_seconds_count"), waits, "each wait timed");
    let memory = Server::start(&[]);
    let text = memory.client().get("/metrics").text();
    assert!(!text.contains("ds_wal_zero_waits_total"), "memory mode fills no zeros");
}
