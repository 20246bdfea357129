//! The fuzz targets' inputs, run in the normal test suite: every seed (`fuzz/seeds/`, from
//! the golden data directories and the tests' requests) and every input a fuzz run found
//! a failure with (`fuzz/regressions/`, kept once fixed) goes through the same entry point
//! its target runs (`ds_engine::testing::fuzz`), so a fixed finding stays fixed without
//! nightly or libFuzzer.

use std::path::{Path, PathBuf};

use ds_engine::testing::fuzz;

/// The inputs of `target`: its seeds and its regressions.
fn inputs(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut found = Vec::new();
    for kind in ["seeds", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(kind).join(target)) else { continue };
        found.extend(entries.map(|entry| entry.expect("a directory entry").path()));
    }
    found.sort();
    found
}

fn run(target: &str, entry: fn(&[u8])) {
    let inputs = inputs(target);
    assert!(!inputs.is_empty(), "{target} has seeds (python3 fuzz/make_seeds.py writes them)");
    for input in inputs {
        let bytes = std::fs::read(&input).expect("a fuzz input");
        entry(&bytes);
    }
}

#[test]
fn record_inputs() {
    run("records", fuzz::records);
}

#[test]
fn checkpoint_inputs() {
    run("checkpoint", fuzz::checkpoint);
}

#[test]
fn manifest_inputs() {
    run("manifest", fuzz::manifest);
}

#[test]
fn json_body_inputs() {
    run("json_body", fuzz::json_body);
}

#[test]
fn segment_inputs() {
    run("segment", fuzz::segment);
}
