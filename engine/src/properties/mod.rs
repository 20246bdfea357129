//! Property tests of every decoder of stored bytes and of the parsers of client input.
//!
//! Stored bytes: a record (header, meta, whole record, a scan over many), a stream file, a
//! checkpoint, the manifest, a renewals file and a segment header. For arbitrary bytes each
//! decoder returns without panicking and accepts only bytes whose checks pass; what the
//! encoders write decodes to exactly what was encoded, and no flipped byte or cut of it is
//! accepted (padding between records carries nothing and is not covered).
//!
//! Client input: offsets, content types, times and JSON bodies never panic a parser; an
//! accepted offset is in its one canonical form, and every message a JSON body is split into
//! is valid JSON on its own.
//!
//! Layout: `strategies` generates the values; `records`, `stream_files`, `state_files`
//! (checkpoints, the manifest, renewals, segment headers) and `client_input` hold the
//! properties.

mod client_input;
mod records;
mod state_files;
mod strategies;
mod stream_files;
