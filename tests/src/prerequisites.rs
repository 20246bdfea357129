//! The tools the tests run besides the built binaries (HAProxy, Node.js and npm), found or
//! installed by the project's own `.ci/setup.sh`, so `cargo test --workspace` works on a
//! fresh machine.
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
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let output = Command::new("bash")
            .arg(".ci/setup.sh")
            .arg("--print-path")
            .current_dir(&root)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .expect("bash runs .ci/setup.sh");
        assert!(
            output.status.success(),
            ".ci/setup.sh could not provide the test tools (HAProxy 2.6, Node.js 20.19+ or \
             22.12+); see its message above"
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        let path = stdout.lines().last().unwrap_or_default().trim();
        assert!(!path.is_empty(), ".ci/setup.sh --print-path printed no PATH");
        OsString::from(path)
    })
}

/// A command for `program` (one of the tools) with [`tools_path`] as its `PATH`.
pub fn tool(program: &str) -> Command {
    let mut command = Command::new(program);
    command.env("PATH", tools_path());
    command
}
