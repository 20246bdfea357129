//! Every scenario, briefly, against the built `ds-server`: the figures are sane (non-zero
//! rates, no errors, no lost events), `--json` writes them, and `compare` puts two servers
//! side by side.

use std::process::Command;

use ds_tests::data_dir::DataDir;
use ds_tests::Server;
use serde_json::Value;

/// Runs `ds-bench ARGS --url URL --json FILE --quiet`; returns the figures.
fn bench(server: &Server, args: &[&str]) -> Value {
    let out = DataDir::new("ds-bench-json");
    let json = out.path().join("figures.json");
    let url = server.base_url();
    let mut command = Command::new(env!("CARGO_BIN_EXE_ds-bench"));
    command.args(args).args(["--url", &url, "--quiet", "--json", json.to_str().unwrap()]);
    let output = command.output().expect("ds-bench runs");
    assert!(
        output.status.success(),
        "ds-bench {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let figures: Value =
        serde_json::from_slice(&std::fs::read(&json).expect("the JSON file is written")).unwrap();
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.starts_with(figures["scenario"].as_str().unwrap_or("compare")), "{table}");
    figures
}

fn figure(figures: &Value, name: &str) -> f64 {
    figures["figures"][name].as_f64().unwrap_or_else(|| panic!("no figure {name} in {figures}"))
}

const BRIEF: [&str; 4] = ["--duration", "1", "--warmup", "0.3"];

#[test]
fn append_read_and_healthz_measure_a_working_server() {
    let server = Server::start(&[]);
    let append = bench(&server, &[&["append", "--connections", "8", "--streams", "4"][..], &BRIEF].concat());
    assert!(figure(&append, "appends_per_sec") > 0.0);
    assert!(figure(&append, "appends_latency_p50_us") > 0.0);
    assert_eq!(figure(&append, "appends_errors"), 0.0);

    let producer = bench(&server, &[&["append", "--connections", "4", "--producer"][..], &BRIEF].concat());
    assert!(figure(&producer, "appends") > 0.0);
    assert_eq!(figure(&producer, "appends_errors"), 0.0, "producers append in sequence");

    let read =
        bench(&server, &[&["read", "--connections", "2", "--fill-bytes", "200000"][..], &BRIEF].concat());
    assert!(figure(&read, "passes") > 0.0);
    assert!(figure(&read, "reads_mb_per_sec") > 0.0);
    assert_eq!(figure(&read, "reads_errors"), 0.0);

    let healthz = bench(&server, &[&["healthz", "--connections", "4"][..], &BRIEF].concat());
    assert!(figure(&healthz, "requests_per_sec") > 0.0);
}

#[test]
fn idle_connections_stay_open_and_are_measured() {
    let server = Server::start(&[]);
    let pid = server.pid().to_string();
    let idle = bench(&server, &["idle", "--connections", "300", "--server-pid", &pid]);
    assert_eq!(figure(&idle, "connections"), 300.0, "every connection appended and stayed open");
    assert_eq!(figure(&idle, "append_errors"), 0.0);
    assert!(figure(&idle, "open_and_append_per_sec") > 0.0);
    // Present once the server's memory could be read; its size is the benchmark's business.
    assert!(figure(&idle, "server_memory_per_connection_bytes") >= 0.0);
}

#[test]
fn live_scenarios_lose_nothing() {
    let server = Server::start(&[("DS_SERVER__LONG_POLL_TIMEOUT_SECS", "2")]);
    let fanout = bench(&server, &[&["fanout", "--subscribers", "20", "--rate", "40"][..], &BRIEF].concat());
    assert!(figure(&fanout, "events_sent") > 0.0);
    assert_eq!(figure(&fanout, "events_lost"), 0.0);
    assert_eq!(figure(&fanout, "deliveries"), figure(&fanout, "events_sent") * 20.0);
    assert!(figure(&fanout, "events_timed") > 0.0);
    assert!(figure(&fanout, "events_timed") < figure(&fanout, "events_sent"), "warm-up events are not timed");
    if cfg!(target_os = "linux") {
        // Delivery is timed at the socket (the kernel's stamp), which comes before the read.
        assert_eq!(figure(&fanout, "deliveries_stamped"), figure(&fanout, "events_timed") * 20.0);
        assert!(figure(&fanout, "delivery_p50_us") <= figure(&fanout, "read_p50_us"));
    }

    let longpoll = bench(&server, &[&["longpoll", "--readers", "10", "--rate", "40"][..], &BRIEF].concat());
    assert!(figure(&longpoll, "events_sent") > 0.0);
    assert_eq!(figure(&longpoll, "events_lost"), 0.0);
    assert!(figure(&longpoll, "wake_p50_us") > 0.0);

    let mixed =
        bench(
            &server,
            &[
                &[
                    "mixed",
                    "--writers",
                    "4",
                    "--catchup-readers",
                    "2",
                    "--live-readers",
                    "8",
                    "--streams",
                    "4",
                ][..],
                &BRIEF,
            ]
            .concat(),
        );
    assert!(figure(&mixed, "appends_per_sec") > 0.0);
    assert!(figure(&mixed, "reads_per_sec") > 0.0);
    assert!(figure(&mixed, "live_deliveries") > 0.0);
    assert_eq!(figure(&mixed, "appends_errors") + figure(&mixed, "reads_errors"), 0.0);
}

#[test]
fn streams_reports_creations_and_memory_per_stream() {
    let server = Server::start(&[]);
    let pid = server.pid().to_string();
    let streams = bench(&server, &["streams", "--count", "2000", "--connections", "4", "--server-pid", &pid]);
    assert_eq!(figure(&streams, "streams"), 2000.0);
    assert_eq!(figure(&streams, "failures"), 0.0);
    assert!(figure(&streams, "creations_per_sec") > 0.0);
    assert!(figure(&streams, "server_memory_per_stream_bytes") > 0.0);
}

#[test]
fn compare_runs_both_servers_in_turns() {
    let (a, b) = (Server::start(&[]), Server::start(&[]));
    let out = DataDir::new("ds-bench-compare");
    let json = out.path().join("compare.json");
    let output = Command::new(env!("CARGO_BIN_EXE_ds-bench"))
        .args([
            "compare",
            "--a",
            &a.base_url(),
            "--b",
            &b.base_url(),
            "--rounds",
            "2",
            "append",
            "--connections",
            "4",
        ])
        .args(BRIEF)
        .args(["--quiet", "--json", json.to_str().unwrap()])
        .output()
        .expect("ds-bench runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.contains("median of 2 runs each"), "{table}");
    let figures: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rate =
        figures["figures"].as_array().unwrap().iter().find(|f| f["figure"] == "appends_per_sec").unwrap();
    assert!(rate["a"].as_f64().unwrap() > 0.0 && rate["b"].as_f64().unwrap() > 0.0);
    assert!(rate["ratio"].as_f64().unwrap() > 0.0);
    assert_eq!(figures["runs_a"].as_array().unwrap().len(), 2);
}
