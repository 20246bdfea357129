//! Fuzz target: `ds_server::fuzz::request_head` on arbitrary bytes (see fuzz/README.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| ds_server::fuzz::request_head(bytes));
