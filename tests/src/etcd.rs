//! A one-member etcd for cluster tests: data in a temporary directory, client and peer URLs
//! on free loopback ports, stopped (and started again on the same data) at will, killed
//! and its directory removed when dropped.
//!
//! `etcd` is found or installed by `.ci/setup.sh` (see `prerequisites`); [`Etcd::require`]
//! fails the test, saying why, without it.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::data_dir::DataDir;
use crate::prerequisites::tool;

/// How long etcd may take to answer its health check.
const START_TIMEOUT: Duration = Duration::from_secs(20);

pub struct Etcd {
    child: Option<Child>,
    pub client_addr: SocketAddr,
    peer_addr: SocketAddr,
    dir: DataDir,
}

impl Etcd {
    /// Fails the test, saying what to do, unless `etcd` can be run.
    pub fn require() {
        let found = tool("etcd").arg("--version").stdout(Stdio::null()).status().is_ok_and(|s| s.success());
        assert!(
            found,
            "etcd is not installed; the cluster tests need it (etcd 3.4+, Debian: apt-get install \
             etcd-server; `.ci/run` installs it)"
        );
    }

    pub fn start() -> Etcd {
        Etcd::require();
        let mut etcd =
            Etcd { child: None, client_addr: free_port(), peer_addr: free_port(), dir: DataDir::new("etcd") };
        etcd.start_again();
        etcd
    }

    /// The endpoint to give `DS_CLUSTER__ETCD_ENDPOINTS`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.client_addr)
    }

    /// Starts etcd on its data after [`Etcd::stop`].
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "etcd is running");
        let client_url = format!("http://{}", self.client_addr);
        let peer_url = format!("http://{}", self.peer_addr);
        let child = tool("etcd")
            .args(["--name", "ds-test", "--data-dir"])
            .arg(self.dir.path().join("member-data"))
            .args(["--listen-client-urls", &client_url, "--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("ds-test={peer_url}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd starts");
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let healthy = TcpStream::connect(self.client_addr).is_ok()
                && Client::new(self.client_addr).get("/health").text().contains("true");
            if healthy {
                return;
            }
            if let Some(status) = self.child.as_mut().and_then(|child| child.try_wait().ok().flatten()) {
                panic!("etcd exited at start ({status})");
            }
            assert!(Instant::now() < deadline, "etcd did not become healthy on {}", self.client_addr);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills etcd and starts it again with no data, as a restore from nothing leaves it: a
    /// new cluster id, the revisions from 1 again.
    pub fn start_empty(&mut self) {
        self.stop();
        std::fs::remove_dir_all(self.dir.path().join("member-data")).expect("remove etcd's data");
        self.start_again();
    }

    /// How many range (read) requests etcd has served.
    pub fn range_requests(&self) -> u64 {
        let metrics = Client::new(self.client_addr).get("/metrics").text();
        metrics
            .lines()
            .filter(|line| {
                line.starts_with("grpc_server_started_total") && line.contains("grpc_method=\"Range\"")
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|count| count as u64)
            .sum()
    }

    /// Kills etcd (its data stays for [`Etcd::start_again`]).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A loopback address with a port that was free a moment ago.
pub fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address")
}
