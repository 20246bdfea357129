//! Fuzz target: `ds_engine::testing::fuzz::json_body` on arbitrary bytes (see fuzz/README.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| ds_engine::testing::fuzz::json_body(bytes));
