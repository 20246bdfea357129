//! The README's quick start runs as written: the block between `<!-- quick-start -->` and
//! `<!-- /quick-start -->` is run with bash against a fresh memory-mode server (its address
//! put in place of `http://localhost:4437`), and what it prints shows each step worked.

use std::path::Path;
use std::process::Command;

use ds_tests::Server;

const README_URL: &str = "http://localhost:4437";

/// The shell commands of the README's quick start.
fn quick_start() -> String {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
        .expect("README.md is readable");
    let start = readme.find("<!-- quick-start -->").expect("the README marks its quick start");
    let end = readme.find("<!-- /quick-start -->").expect("the README marks the quick start's end");
    let block = &readme[start..end];
    let lines: Vec<&str> = block.lines().skip(1).filter(|line| !line.starts_with("```")).collect();
    assert!(lines.len() > 20, "the quick start is a block of commands:\n{block}");
    lines.join("\n")
}

#[test]
fn the_readmes_quick_start_runs_as_written() {
    let script = quick_start();
    assert!(script.contains(README_URL), "the quick start talks to {README_URL}");
    let server = Server::start(&[]);
    let script = script.replace(README_URL, &server.base_url());
    let output = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .output()
        .expect("bash and curl are installed");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the quick start failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let expected = [
        "HTTP/1.1 201 Created",
        "\r\n\r\nhello world\nworld\n",
        "\n!\n",
        "HTTP/1.1 409 Conflict",
        "data:hello \n",
        "\"streamClosed\":true",
        "HTTP/1.1 200 OK\r\nstream-next-offset: 0000000000000002_0000000000000010\r\nproducer-epoch: 0",
        "HTTP/1.1 204 No Content\r\nstream-next-offset: 0000000000000002_0000000000000010\r\nproducer-epoch: 0",
        "\n[{\"a\":1},{\"b\":2}]\n",
        "stream-ttl: 3600",
        "HTTP/1.1 400 Bad Request",
        "HTTP/1.1 404 Not Found",
    ];
    for text in expected {
        assert!(stdout.contains(text), "the quick start's output lacks {text:?}:\n{stdout}");
    }
}
