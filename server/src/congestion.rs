//! The TCP congestion control of connections from this host.
//!
//! A connection whose peer is on this host (a loopback address, or the very address it
//! reached the server on) crosses no network: there is no path to probe and no queue to
//! keep short. It still gets the system's congestion control, and where that one paces its
//! packets (BBR, a common default) the kernel arms a timer for the packets of a large answer
//! and sends them from the timer. On a virtual machine every timer is an exit to the
//! hypervisor. Catch-up answers on loopback are then much faster with a non-pacing algorithm
//! on the server's end. Appends and SSE fan-out (small answers) are the same either way
//! (docs/performance/code-choices.md). So local connections get
//! `DS_SERVER__LOCAL_TCP_CONGESTION` (default [`DEFAULT`], which every Linux kernel has and
//! lets any process choose) and remote ones keep the system's choice; [`SYSTEM`] leaves
//! local ones alone too. This module owns that choice and nothing else about sockets.

use std::io;
use std::net::SocketAddr;

use socket2::{Domain, SockRef, Socket, Type};
use tokio::net::TcpStream;

/// The algorithm local connections get unless configured otherwise.
pub(crate) const DEFAULT: &str = "reno";
/// The setting that keeps the system's algorithm for local connections too.
pub(crate) const SYSTEM: &str = "system";
/// Longest algorithm name the kernel takes (`TCP_CA_NAME_MAX` is 16 with its NUL).
const NAME_BYTES_MAX: usize = 15;

/// Whether a connection from `peer`, accepted on `local`, stays on this host.
pub(crate) fn is_local(peer: SocketAddr, local: SocketAddr) -> bool {
    let peer = peer.ip().to_canonical();
    peer.is_loopback() || peer == local.ip().to_canonical()
}

/// The algorithm local connections get from `setting` (`None`: the system's), checked on a
/// socket of its own so that an algorithm this host refuses stops startup, not connections.
pub(crate) fn parse(setting: &str) -> Result<Option<Box<str>>, String> {
    if setting == SYSTEM {
        return Ok(None);
    }
    let well_formed = !setting.is_empty()
        && setting.len() <= NAME_BYTES_MAX
        && setting.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !well_formed {
        return Err(format!("'{setting}' is not a congestion control name (or `{SYSTEM}`)"));
    }
    check(setting).map_err(|error| {
        format!(
            "this host refuses '{setting}' ({error}); see net.ipv4.tcp_allowed_congestion_control, \
             or use `{SYSTEM}`"
        )
    })?;
    Ok(Some(setting.into()))
}

/// Whether this process may give a TCP socket `algorithm`.
fn check(algorithm: &str) -> io::Result<()> {
    let probe = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    probe.set_tcp_congestion(algorithm.as_bytes())
}

/// Gives `socket` (accepted from `peer`) `algorithm` when its peer is on this host. A
/// refusal (checked at startup, so unexpected) leaves the system's algorithm in place.
pub(crate) fn apply(socket: &TcpStream, peer: SocketAddr, algorithm: &str) {
    let Ok(local) = socket.local_addr() else { return };
    if !is_local(peer, local) {
        return;
    }
    if let Err(error) = SockRef::from(socket).set_tcp_congestion(algorithm.as_bytes()) {
        tracing::debug!(%error, %peer, algorithm, "cannot set the congestion control of a local connection");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn only_peers_on_this_host_are_local() {
        assert!(is_local(at("127.0.0.1:5000"), at("127.0.0.1:4437")));
        assert!(is_local(at("127.9.9.9:5000"), at("0.0.0.0:4437")));
        assert!(is_local(at("[::1]:5000"), at("[::1]:4437")));
        assert!(is_local(at("[::ffff:127.0.0.1]:5000"), at("[::]:4437")), "a mapped loopback");
        assert!(is_local(at("10.1.2.3:5000"), at("10.1.2.3:4437")), "this host by its own address");
        assert!(!is_local(at("10.1.2.4:5000"), at("10.1.2.3:4437")));
        assert!(!is_local(at("[2001:db8::1]:5000"), at("[2001:db8::2]:4437")));
    }

    #[test]
    fn settings_are_checked_against_the_host() {
        assert_eq!(parse(SYSTEM).unwrap(), None);
        assert_eq!(parse(DEFAULT).unwrap().as_deref(), Some(DEFAULT));
        assert!(parse("").is_err());
        assert!(parse("no such algorithm").is_err());
        assert!(parse("nosuchalgorithm").is_err(), "a well-formed name the kernel does not have");
    }

    #[tokio::test]
    async fn a_local_connection_gets_the_algorithm() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (accepted, peer) = listener.accept().await.unwrap();
        apply(&accepted, peer, DEFAULT);
        let name = SockRef::from(&accepted).tcp_congestion().unwrap();
        assert_eq!(name.split(|b| *b == 0).next().unwrap(), DEFAULT.as_bytes());
        drop(client);
    }
}
