//! The public conformance suite (`@durable-streams/server-conformance-tests`, pinned in
//! `tests/conformance/package-lock.json`) against the built `ds-server`.
//!
//! Every group runs, forks included, in each of memory mode, acid and file-durable
//! (file-fast writes the same
//! files as file-durable, only without syncing them). The memory-mode server runs on a
//! single CPU, as in the benchmarks, where the front holds shard wake-ups back until its
//! worker goes idle (`ds_engine::wake_batch`); the other two run unpinned.
//! The suite's own tests wait up to 5 s, so the server runs with a 2 s long-poll timeout.
//! `npm ci` installs the pinned suite first (once per test run), with the Node.js that
//! `.ci/setup.sh` finds or downloads. The suite runs once more over HTTP/2, against a TLS
//! server, with undici (pinned beside it) offering `h2` on every connection.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use ds_tests::data_dir::DataDir;
use ds_tests::prerequisites::tool;
use ds_tests::Server;

/// vitest name filter: every test.
const EVERY_GROUP: &str = ".";
/// The suite's entry files: over HTTP/1.1, and over HTTP/2 (undici with `allowH2`, TLS).
const OVER_HTTP1: &str = "conformance.test.mjs";
const OVER_HTTP2: &str = "conformance-http2.test.mjs";
/// What ds-server logs when it holds shard wake-ups back (it has one CPU).
const ONE_CPU_LOG_LINE: &str = "rings the shards it sent ops to once per turn";

fn suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance")
}

/// Installs the pinned suite once; suites run one at a time (they measure timing).
fn suite_lock() -> std::sync::MutexGuard<'static, ()> {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    static RUNNING: Mutex<()> = Mutex::new(());
    let guard = RUNNING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    INSTALLED.get_or_init(|| {
        let status = tool("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(suite_dir())
            .status()
            .expect("npm is installed (Node.js 20.19 or newer, or 22.12 or newer, is needed for the conformance suite)");
        assert!(status.success(), "npm ci failed in {}", suite_dir().display());
    });
    guard
}

fn run_suite(mode: &str, one_cpu: bool, groups: &str) {
    let _one_at_a_time = suite_lock();
    let server_env = [("DS_SERVER__LONG_POLL_TIMEOUT_SECS", "2"), ("RUST_LOG", "warn,ds_server=info")];
    let server = match one_cpu {
        true => Server::start_on_one_cpu(mode, &server_env),
        false => Server::start_in(mode, &server_env),
    };
    if one_cpu {
        // On one CPU the worker holds shard wake-ups back until it goes idle: make sure
        // this run exercises that path.
        assert!(server.log().contains(ONE_CPU_LOG_LINE), "no one-CPU line; log:\n{}", server.log());
    }
    let passed = vitest(mode, OVER_HTTP1, groups, &[("CONFORMANCE_TEST_URL", server.base_url())]);
    assert!(passed, "conformance suite failed in {mode} mode; server log:\n{}", server.log());
}

/// Runs the suite's entry file `file` (vitest filters files by name) with `env`, the
/// tests whose names match `groups`, as the run `run` of the totals; whether every one
/// passed.
fn vitest(run: &str, file: &str, groups: &str, env: &[(&str, String)]) -> bool {
    let report = DataDir::new("conformance-report");
    let report_file = report.path().join("report.json");
    let status = tool("npx")
        .args(["--no-install", "vitest", "run", file, "--no-coverage", "--reporter=dot", "--reporter=json"])
        .arg(format!("--outputFile.json={}", report_file.display()))
        .args(["-t", groups])
        .envs(env.iter().map(|(name, value)| (*name, value.as_str())))
        .env("CI", "true")
        .current_dir(suite_dir())
        .status()
        .expect("npx runs vitest");
    tell_totals(run, &report_file);
    status.success()
}

/// Writes the run's totals, and each test the suite skipped, past the test harness's
/// capture, for the test command's last line (`./test.sh`).
fn tell_totals(run: &str, report_file: &Path) {
    let Ok(text) = std::fs::read_to_string(report_file) else {
        eprintln!("CONFORMANCE {run}: 0 passed, 1 failed, 0 skipped (vitest wrote no report)");
        return;
    };
    let report: serde_json::Value = serde_json::from_str(&text).expect("vitest's JSON report");
    let count = |key: &str| report[key].as_u64().unwrap_or(0);
    let skipped = count("numPendingTests") + count("numTodoTests");
    let (passed, failed) = (count("numPassedTests"), count("numFailedTests"));
    let results = report["testResults"].as_array().into_iter().flatten();
    let assertions = results.flat_map(|file| file["assertionResults"].as_array().into_iter().flatten());
    let mut out = std::io::stderr().lock();
    for test in
        assertions.filter(|test| matches!(test["status"].as_str(), Some("pending" | "skipped" | "todo")))
    {
        let name = test["fullName"].as_str().unwrap_or("?");
        let why = match name.starts_with("Reserved subscription APIs") {
            true => {
                "the suite runs its subscription tests only when a server says it has them (ds has not yet)"
            }
            false => "skipped by the suite itself",
        };
        let _ = writeln!(out, "SKIPPED conformance {run}: {name}: {why}");
    }
    let _ = writeln!(out, "CONFORMANCE {run}: {passed} passed, {failed} failed, {skipped} skipped");
}

#[test]
fn conformance_suite_passes_in_memory_mode_on_one_cpu() {
    run_suite("memory", true, EVERY_GROUP);
}

#[test]
fn conformance_suite_passes_in_acid_mode() {
    run_suite("acid", false, EVERY_GROUP);
}

#[test]
fn conformance_suite_passes_in_file_durable_mode() {
    run_suite("file-durable", false, EVERY_GROUP);
}

/// The whole suite over HTTP/2: a TLS server (a certificate made here) and a client that
/// offers `h2` on every connection; the entry file checks the server counted them.
#[test]
fn conformance_suite_passes_over_http2() {
    let _one_at_a_time = suite_lock();
    let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("certificate");
    let dir = DataDir::new("conformance-http2");
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, generated.cert.pem()).unwrap();
    std::fs::write(&key_path, generated.signing_key.serialize_pem()).unwrap();
    let (cert, key) = (cert_path.display().to_string(), key_path.display().to_string());
    let server = Server::start(&[
        ("DS_SERVER__LONG_POLL_TIMEOUT_SECS", "2"),
        ("RUST_LOG", "warn,ds_server=info"),
        ("DS_TLS__CERT_PATH", &cert),
        ("DS_TLS__KEY_PATH", &key),
    ]);
    let url = format!("https://localhost:{}", server.addr.port());
    let passed = vitest(
        "http2",
        OVER_HTTP2,
        EVERY_GROUP,
        &[("CONFORMANCE_TEST_URL", url), ("CONFORMANCE_TLS_CA", cert)],
    );
    assert!(passed, "conformance suite failed over HTTP/2; server log:\n{}", server.log());
}
