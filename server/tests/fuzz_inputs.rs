//! The request-head fuzz target's inputs, run in the normal test suite: its seeds
//! (`fuzz/seeds/request_head/`) and every input a fuzz run found a failure with
//! (`fuzz/regressions/request_head/`, kept once fixed) go through the entry point the target
//! runs (`ds_server::fuzz::request_head`), without nightly or libFuzzer.

use std::path::Path;

#[test]
fn request_head_inputs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut inputs = Vec::new();
    for kind in ["seeds", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(kind).join("request_head")) else { continue };
        inputs.extend(entries.map(|entry| entry.expect("a directory entry").path()));
    }
    assert!(!inputs.is_empty(), "request_head has seeds (python3 fuzz/make_seeds.py writes them)");
    for input in inputs {
        ds_server::fuzz::request_head(&std::fs::read(&input).expect("a fuzz input"));
    }
}
