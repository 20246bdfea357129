//! Starting HAProxy with the shipped configuration (`deploy/haproxy/`) for end-to-end tests.
//!
//! Tests that need it call [`Proxy::require`] first, which finds or installs `haproxy`
//! through `.ci/setup.sh` (see `prerequisites`) and fails the test, saying why, when it
//! cannot. The proxy listens on a loopback port picked here and runs in the foreground
//! (`-db`), killed when dropped.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::jwt;
use crate::prerequisites::tool;

/// How long HAProxy may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A running HAProxy, killed when dropped.
pub struct Proxy {
    child: Child,
    pub addr: SocketAddr,
}

/// A file under `deploy/haproxy/`.
pub fn config_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/haproxy").join(name)
}

impl Proxy {
    /// Fails the test, saying what to do, unless `haproxy` can be run (installed first by
    /// `.ci/setup.sh` where it is missing).
    pub fn require() {
        let found = tool("haproxy").arg("-v").stdout(Stdio::null()).status().is_ok_and(|s| s.success());
        assert!(
            found,
            "haproxy is not installed; the proxy and cluster tests need it (HAProxy 2.6, Debian: \
             apt-get install haproxy; `.ci/run` installs it)"
        );
    }

    /// Starts HAProxy with `haproxy.cfg` and the backend file `backend`, the test JWT
    /// settings, and `env` (the backend's node addresses).
    pub fn start(backend: &str, env: &[(&str, String)]) -> Proxy {
        let addr = free_port();
        let mut command = tool("haproxy");
        command
            .arg("-db")
            .arg("-f")
            .arg(config_file("haproxy.cfg"))
            .arg("-f")
            .arg(config_file(backend))
            .env("DS_PROXY_BIND", addr.to_string())
            .env("DS_JWT_PUBLIC_KEY", jwt::test_key(jwt::TRUSTED_PUBLIC_KEY))
            .env("DS_JWT_ISSUER", jwt::TEST_ISSUER)
            .env("DS_JWT_AUDIENCE", jwt::TEST_AUDIENCE)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = command.spawn().expect("haproxy starts");
        let mut proxy = Proxy { child, addr };
        proxy.wait_until_listening();
        proxy
    }

    pub fn client(&self) -> Client {
        Client::new(self.addr)
    }

    fn wait_until_listening(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        while TcpStream::connect(self.addr).is_err() {
            if let Some(status) = self.child.try_wait().expect("wait on haproxy") {
                panic!("haproxy exited at start ({status}); check it with: haproxy -c -f ...");
            }
            assert!(Instant::now() < deadline, "haproxy did not listen on {}", self.addr);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback address with a port that was free a moment ago (HAProxy cannot report the
/// port it got from port 0, so the test picks one).
fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address")
}
