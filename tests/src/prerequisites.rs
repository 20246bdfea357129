//! The tools the tests run besides the built binaries (HAProxy, Node.js and npm, and the
//! public Python client), found or installed by the project's own `.ci/setup.sh`, so
//! `cargo test --workspace` works on a fresh machine.
//!
//! The script runs once per test process: it installs HAProxy where it is missing (Debian's
//! package, as root or with `sudo -n`) and downloads a recent enough Node.js into
//! `.ci/.cache/` when the system's is missing or older, then prints the `PATH` to run them
//! with. Commands that start those tools take [`tools_path`] as their `PATH`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The `PATH` under which `haproxy`, `node`, `npm` and `npx` are found, after `.ci/setup.sh`
/// installed what was missing. Panics, with the script's message, when it cannot.
pub fn tools_path() -> &'static OsString {
    static PATH: OnceLock<OsString> = OnceLock::new();
    PATH.get_or_init(|| {
        OsString::from(setup("--print-path", "the test tools (HAProxy 2.6, Node.js 20.19+ or 22.12+)"))
    })
}

/// A command for `program` (one of the tools) with [`tools_path`] as its `PATH`.
pub fn tool(program: &str) -> Command {
    let mut command = Command::new(program);
    command.env("PATH", tools_path());
    command
}

/// The python of a virtual environment holding the public Python client pinned in
/// `tests/clients/python/requirements.txt`, made by `.ci/setup.sh --python-clients` (once per
/// test process). Panics, with the script's message, when it cannot.
pub fn python_clients() -> &'static PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        PathBuf::from(setup("--python-clients", "the Python client (Python 3.10+, venv, PyPI)"))
    })
}

/// Runs `.ci/setup.sh FLAG` from the project's root; the last line it printed. Panics when
/// it fails, naming `what` it could not provide (its own message is on stderr above).
fn setup(flag: &str, what: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let output = Command::new("bash")
        .args([".ci/setup.sh", flag])
        .current_dir(&root)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("bash runs .ci/setup.sh");
    assert!(output.status.success(), ".ci/setup.sh could not provide {what}; see its message above");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().unwrap_or_default().trim().to_owned();
    assert!(!last.is_empty(), ".ci/setup.sh {flag} printed nothing");
    last
}
