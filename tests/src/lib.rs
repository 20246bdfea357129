//! Helpers for black-box tests of the built binaries.
//!
//! - `server`: starts `ds-server` on a free loopback port with chosen `DS_*` variables and
//!   stops it (SIGTERM or kill) when the test is done.
//! - `client`: a small blocking HTTP/1.1 client that also reads SSE bodies incrementally;
//!   `http2`: an HTTP/2 client (async, on tokio) for the HTTP/2 tests.
//! - `data_dir`: temporary data directories for servers of the disk modes; `scratch`: small
//!   file systems of their own (a tmpfs, an ext4 image) for tests that make a disk fail.
//! - `haproxy` and `jwt`: the shipped proxy configuration, started for end-to-end tests, and
//!   tokens minted with the committed test-only keys.
//! - `etcd`: a one-member etcd for the cluster tests, stopped and started at will;
//!   `cluster`: nodes sharing it, and the directory's entries read and written by hand;
//!   `relay`: a TCP relay that can black-hole requests, as a member that stopped answering.
//! - `rng`: a seeded generator, so a randomized test replays from its seed.
//! - `prerequisites`: HAProxy, etcd, Node.js and the public Python client, found or installed
//!   by `.ci/setup.sh`.
//!
//! The tests themselves live in `tests/tests/`: protocol behaviour, configuration, the
//! public conformance suite, and sessions of the public clients (`tests/clients/`).

pub mod client;
pub mod cluster;
pub mod data_dir;
pub mod etcd;
pub mod haproxy;
pub mod http2;
pub mod jwt;
pub mod prerequisites;
pub mod relay;
pub mod rng;
pub mod scratch;
pub mod server;

pub use client::{Client, Response, StreamingResponse};
pub use server::Server;
