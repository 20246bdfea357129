//! The public clients against the built `ds-server`, in each storage mode: one session of
//! the TypeScript client (`tests/clients/node/session.mjs`, `@durable-streams/client` pinned
//! in its package-lock.json) and one of the Python client (`tests/clients/python/session.py`,
//! `durable-streams` pinned in its requirements.txt). Each session is what an application
//! does: writes, reads back, JSON, live reads in both modes seeing a later append, producers,
//! closing, the client's own errors; it exits non-zero at the first check that fails.
//!
//! The TypeScript session also runs behind the shipped HAProxy configuration with a minted
//! token on every request, as deployed: its live reads and producers through the proxy.
//!
//! The conformance suite checks the protocol message by message; these check that the
//! clients people use agree with the server end to end. `npm ci` and `.ci/setup.sh
//! --python-clients` install the pinned clients first (once per test run).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use ds_tests::haproxy::Proxy;
use ds_tests::jwt::{mint, valid_claims, TRUSTED_KEY};
use ds_tests::prerequisites::{python_clients, tool};
use ds_tests::Server;

const MODES: [&str; 3] = ["memory", "acid", "file-durable"];

fn clients_dir(client: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients").join(client)
}

/// The pinned TypeScript client, installed once.
fn node_client_installed() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let status = tool("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(clients_dir("node"))
            .status()
            .expect("npm is installed (by .ci/setup.sh)");
        assert!(status.success(), "npm ci failed in {}", clients_dir("node").display());
    });
}

/// The TypeScript session, to be given the base URL.
fn node_session() -> Command {
    let mut command = tool("node");
    command.arg("session.mjs").current_dir(clients_dir("node"));
    command
}

/// Runs `session` (given the server's base URL last) against a server in each mode.
fn session_in_every_mode(client: &str, session: impl Fn() -> Command) {
    for mode in MODES {
        let server = Server::start_in(mode, &[]);
        let output = session().arg(server.base_url()).output().expect("the client session starts");
        assert_passed(&output, &format!("{client} session in {mode} mode"), &server);
    }
}

/// Fails the test with the session's output and the server's log unless the session passed.
fn assert_passed(output: &Output, session: &str, server: &Server) {
    assert!(
        output.status.success(),
        "{session} failed\nstdout:\n{}\nstderr:\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        server.log()
    );
}

#[test]
fn the_typescript_client_works_in_every_mode() {
    node_client_installed();
    session_in_every_mode("TypeScript", node_session);
}

#[test]
fn the_typescript_client_works_behind_the_proxy() {
    node_client_installed();
    Proxy::require();
    let server = Server::start_in("acid", &[]);
    let proxy = Proxy::start("backend-single.cfg", &[("DS_NODE", server.addr.to_string())]);
    let token = mint(&valid_claims("client-session"), TRUSTED_KEY);
    let output = node_session()
        .arg(format!("http://{}", proxy.addr))
        .env("DS_BEARER", token)
        .current_dir(clients_dir("node"))
        .output()
        .expect("the client session starts");
    assert_passed(&output, "TypeScript session behind the proxy", &server);
    assert!(server.log().contains("subject=client-session"), "the token's subject reached the server");
}

#[test]
fn the_python_client_works_in_every_mode() {
    let python = python_clients();
    session_in_every_mode("Python", || {
        let mut command = Command::new(python);
        command.arg("session.py").current_dir(clients_dir("python"));
        command
    });
}
