//! Starting and stopping a `ds-server` process for a test.
//!
//! The server is started on port 0 of 127.0.0.1; its own log line
//! (`listening on http://ADDRESS`) tells the test which port it got, so tests never race
//! each other for ports.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::data_dir::DataDir;

/// How long a server may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A running `ds-server`, killed when dropped.
pub struct Server {
    child: Option<Child>,
    pub addr: SocketAddr,
    log: Arc<Mutex<String>>,
    /// What it was started with, to start it again on the same data.
    env: Vec<(String, String)>,
    data_dir: Option<Arc<DataDir>>,
    /// What the process is confined to.
    confinement: Confinement,
}

/// What a test server process may use.
#[derive(Clone, Copy, Debug, Default)]
struct Confinement {
    /// A single CPU (as the benchmarks do), which changes how it wakes its shards.
    one_cpu: bool,
    /// This many open files (soft and hard limit).
    open_files: Option<u64>,
}

/// Storage settings for a test server of `mode`: a small shard count and small segments, so
/// that starting one stays cheap.
pub const TEST_STORAGE: [(&str, &str); 2] =
    [("DS_STORAGE__ACID_SHARD_COUNT", "4"), ("DS_STORAGE__SEGMENT_BYTES", "12582912")];

/// Path of a workspace binary, built (once per test process) in this test's profile so a
/// test never runs a stale build.
pub fn binary(name: &str) -> PathBuf {
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let test_exe = std::env::current_exe().expect("test executable path");
    let profile_dir = test_exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>");
    let mut built = BUILT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if !built.iter().any(|b| b == name) {
        let mut cargo = Command::new(env!("CARGO"));
        cargo.args(["build", "--quiet", "-p", name, "--bin", name]);
        if profile_dir.file_name().is_some_and(|p| p == "release") {
            cargo.arg("--release");
        }
        let status = cargo.current_dir(env!("CARGO_MANIFEST_DIR")).status().expect("cargo runs");
        assert!(status.success(), "building {name} failed");
        built.push(name.to_string());
    }
    profile_dir.join(name)
}

impl Server {
    /// Starts `ds-server` with `env` on top of loopback defaults.
    pub fn start(env: &[(&str, &str)]) -> Server {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Server::spawn(env, None, Confinement::default())
    }

    /// Starts `ds-server` in storage `mode` (memory, acid, file-durable, file-fast) with a
    /// new temporary data directory, plus `env`.
    pub fn start_in(mode: &str, env: &[(&str, &str)]) -> Server {
        Server::start_with(mode, env, Confinement::default())
    }

    /// Like [`Server::start_in`], with the process allowed a single CPU.
    pub fn start_on_one_cpu(mode: &str, env: &[(&str, &str)]) -> Server {
        Server::start_with(mode, env, Confinement { one_cpu: true, open_files: None })
    }

    /// Like [`Server::start_in`], with the process allowed `open_files` open files.
    pub fn start_with_open_files(mode: &str, env: &[(&str, &str)], open_files: u64) -> Server {
        Server::start_with(mode, env, Confinement { one_cpu: false, open_files: Some(open_files) })
    }

    fn start_with(mode: &str, env: &[(&str, &str)], confinement: Confinement) -> Server {
        let mut all: Vec<(String, String)> = Vec::new();
        let mut data_dir = None;
        if mode != "memory" {
            let dir = Arc::new(DataDir::new(mode));
            all.push(("DS_STORAGE__MODE".into(), mode.into()));
            all.push(("DS_STORAGE__DATA_DIR".into(), dir.path().display().to_string()));
            all.extend(TEST_STORAGE.iter().map(|(k, v)| (k.to_string(), v.to_string())));
            data_dir = Some(dir);
        }
        all.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Server::spawn(all, data_dir, confinement)
    }

    /// Starts the server again on the same data, after it stopped.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop the server before starting it again");
        *self = Server::spawn(self.env.clone(), self.data_dir.clone(), self.confinement);
    }

    fn spawn(env: Vec<(String, String)>, data_dir: Option<Arc<DataDir>>, confinement: Confinement) -> Server {
        let mut command = Command::new(binary("ds-server"));
        if confinement.one_cpu {
            pin_to_one_cpu(&mut command);
        }
        if let Some(open_files) = confinement.open_files {
            limit_open_files(&mut command, open_files);
        }
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("RUST_LOG", "info")
            .env("DS_SERVER__HOST", "127.0.0.1")
            .env("DS_SERVER__PORT", "0")
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("ds-server starts");
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (address_tx, address_rx) = std::sync::mpsc::channel();
        let log_writer = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                {
                    let mut log = log_writer.lock().unwrap();
                    log.push_str(&line);
                    log.push('\n');
                }
                let address = line.split("listening on http://").nth(1);
                if let Some(address) = address.or_else(|| line.split("listening on https://").nth(1)) {
                    let address = address.split_whitespace().next().unwrap_or_default().to_string();
                    let _ = address_tx.send(address);
                }
            }
        });
        let address = address_rx.recv_timeout(START_TIMEOUT).unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("ds-server did not start listening; log:\n{}", log.lock().unwrap())
        });
        let addr = address.parse().expect("socket address");
        Server { child: Some(child), addr, log, env, data_dir, confinement }
    }

    pub fn client(&self) -> Client {
        Client::new(self.addr)
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Everything the server logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server still running").id()
    }

    /// The data directory of a server of a disk mode.
    pub fn data_dir(&self) -> Option<&std::path::Path> {
        self.data_dir.as_deref().map(DataDir::path)
    }

    /// The value of the metric `name` (its first series) in the server's `/metrics`.
    pub fn metric(&self, name: &str) -> u64 {
        let text = self.client().get("/metrics").text();
        let line = text.lines().find(|line| {
            line.strip_prefix(name).is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        });
        let value = line.and_then(|line| line.rsplit(' ').next()).and_then(|v| v.parse().ok());
        value.unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
    }

    /// Waits until the metric `name` is `wanted` (5 s at most, then fails).
    pub fn wait_for_metric(&self, name: &str, wanted: u64) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let value = self.metric(name);
            if value == wanted {
                return;
            }
            assert!(Instant::now() < deadline, "{name} stayed {value}, wanted {wanted}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Anonymous resident memory of the process in bytes: its heap and stacks, without the
    /// pages of files it maps.
    pub fn anonymous_resident_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("proc status");
        let line = status.lines().find(|line| line.starts_with("RssAnon:")).expect("RssAnon line");
        let kib: u64 = line.split_whitespace().nth(1).and_then(|kib| kib.parse().ok()).expect("RssAnon kB");
        kib * 1024
    }

    /// Kills the process at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("server still running");
        child.kill().expect("kill ds-server");
        child.wait().expect("wait for ds-server");
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("server still running");
        let status = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        assert!(status.is_ok_and(|s| s.success()), "kill -TERM works");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().expect("wait on server") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("ds-server did not stop after SIGTERM; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Starts `command` allowed `open_files` open files (soft and hard limit).
pub fn limit_open_files(command: &mut Command, open_files: u64) {
    use std::os::unix::process::CommandExt as _;
    let limit = libc::rlimit { rlim_cur: open_files, rlim_max: open_files };
    // SAFETY: the closure only makes one async-signal-safe system call in the child.
    unsafe {
        command.pre_exec(move || match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        });
    }
}

/// Makes `command`'s process run on the first CPU this process may use.
fn pin_to_one_cpu(command: &mut Command) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: sched_getaffinity fills the set it is given, of the size it is told.
    let got = unsafe { libc::sched_getaffinity(0, size, &mut allowed) };
    assert_eq!(got, 0, "sched_getaffinity: {}", std::io::Error::last_os_error());
    // SAFETY: CPU_ISSET only reads the set, at an index below CPU_SETSIZE.
    let cpu = (0..libc::CPU_SETSIZE as usize).find(|&cpu| unsafe { libc::CPU_ISSET(cpu, &allowed) });
    let cpu = cpu.expect("this process may use some CPU");
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET only writes the set, at an index below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut one) };
    // SAFETY: the closure only makes one async-signal-safe system call in the child.
    unsafe {
        command.pre_exec(move || match libc::sched_setaffinity(0, size, &one) {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        });
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
