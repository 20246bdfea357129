//! Configuration: every `DS_*` variable, each also a `ds-server` flag.
//!
//! clap reads flags and environment variables as text (so `--help` lists each with its
//! variable and default); [`Args::into_config`] then checks every value and turns it into a
//! typed [`Config`]. An invalid value stops startup with a message naming the variable.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use ds_engine::{segment_bytes_for, SEGMENT_OVERHEAD_BYTES};
use ds_engine::{EngineConfig, StorageMode};
use ds_engine::{Limits, APPEND_BYTES_MAX_DEFAULT};

use crate::congestion;
use crate::http::cors::CorsPolicy;

/// Command-line flags and environment variables of `ds-server`.
#[derive(Parser, Debug, Clone)]
#[command(name = "ds-server", version, about = "Durable Streams server", max_term_width = 100)]
pub struct Args {
    /// Address to listen on
    #[arg(long, env = "DS_SERVER__HOST", default_value = "0.0.0.0")]
    pub host: String,
    /// Port to listen on
    #[arg(long, env = "DS_SERVER__PORT", default_value = "4437")]
    pub port: String,
    /// Seconds a long-poll read waits for new data before answering 204
    #[arg(long, env = "DS_SERVER__LONG_POLL_TIMEOUT_SECS", default_value = "30")]
    pub long_poll_timeout_secs: String,
    /// Seconds an idle SSE connection stays open (0 keeps it open)
    #[arg(long, env = "DS_SERVER__SSE_RECONNECT_INTERVAL_SECS", default_value = "60")]
    pub sse_reconnect_interval_secs: String,
    /// Allowed CORS origins, comma-separated, or *
    #[arg(long, env = "DS_HTTP__CORS_ORIGINS", default_value = "*")]
    pub cors_origins: String,
    /// Most bytes all streams may cost together: their data, plus 512 per stream, 64 per
    /// append and 96 per producer, with their names, ids and Stream-Seq (413 past it)
    #[arg(long, env = "DS_LIMITS__MAX_MEMORY_BYTES", default_value = "104857600")]
    pub max_memory_bytes: String,
    /// Most streams that may exist at once (507 for a create past it)
    #[arg(long, env = "DS_LIMITS__MAX_STREAMS", default_value = "1000000")]
    pub max_streams: String,
    /// Most request body bytes held in memory across all connections at once (503 with
    /// Retry-After for a body that would pass it)
    #[arg(long, env = "DS_LIMITS__MAX_BODY_BUFFER_BYTES", default_value = "268435456")]
    pub max_body_buffer_bytes: String,
    /// Seconds a request body may go without a byte arriving before it is cut (408)
    #[arg(long, env = "DS_SERVER__BODY_TIMEOUT_SECS", default_value = "30")]
    pub body_timeout_secs: String,
    /// Most bytes stored in one stream (413 past it)
    #[arg(long, env = "DS_LIMITS__MAX_STREAM_BYTES", default_value = "10485760")]
    pub max_stream_bytes: String,
    /// Most bytes one append (or a create's initial data) may carry: the request body limit
    /// and the largest log record (413 past it) [default: 10 MiB, or the stream limit if lower]
    #[arg(long, env = "DS_LIMITS__MAX_APPEND_BYTES")]
    pub max_append_bytes: Option<String>,
    /// Most stored bytes one catch-up or long-poll response carries
    #[arg(long, env = "DS_LIMITS__MAX_READ_BYTES", default_value = "4194304")]
    pub max_read_bytes: String,
    /// Storage mode: memory, file-fast, file-durable, acid (alias wal)
    #[arg(long, env = "DS_STORAGE__MODE", default_value = "memory")]
    pub storage_mode: String,
    /// Root directory of the persistent modes
    #[arg(long, env = "DS_STORAGE__DATA_DIR", default_value = "./data/streams")]
    pub data_dir: PathBuf,
    /// Number of shards (power of two, 1 to 256)
    #[arg(long, env = "DS_STORAGE__ACID_SHARD_COUNT", default_value = "16")]
    pub acid_shard_count: String,
    /// Size of each acid WAL segment in bytes [default: 32 MiB, or enough for the largest record]
    #[arg(long, env = "DS_STORAGE__SEGMENT_BYTES")]
    pub segment_bytes: Option<String>,
    /// Shards on one file system share each device flush where the file system makes one
    /// flush cover them all (ext4 without data=journal, XFS); `false`: each shard's commit
    /// flushes its own log
    #[arg(long, env = "DS_STORAGE__SHARED_FLUSH", default_value = "true")]
    pub shared_flush: String,
    /// Most client connections served at once; more get a fast 503 with Retry-After
    #[arg(long, env = "DS_SERVER__MAX_CONNECTIONS", default_value = "10000")]
    pub max_connections: String,
    /// Seconds a response write may stay blocked (the client reads nothing) before the
    /// connection is closed; bounds what a slow live reader holds (it resumes from its offset)
    #[arg(long, env = "DS_SERVER__WRITE_STALL_TIMEOUT_SECS", default_value = "30")]
    pub write_stall_timeout_secs: String,
    /// Seconds a connection may wait with no request open before it is closed; a request
    /// head must also arrive within it
    #[arg(long, env = "DS_SERVER__IDLE_TIMEOUT_SECS", default_value = "30")]
    pub idle_timeout_secs: String,
    /// Serve requests without a body on plain TCP with ds's own lean HTTP/1.1 reader and
    /// writer, handing a connection to hyper at its first request with a body (`false`:
    /// hyper serves every request)
    #[arg(long, env = "DS_SERVER__BARE_FRONT", default_value = "true")]
    pub bare_front: String,
    /// Serve HTTP/2: with prior knowledge on plain TCP, by ALPN `h2` on TLS (`false`:
    /// HTTP/1.1 only)
    #[arg(long, env = "DS_SERVER__HTTP2", default_value = "true")]
    pub http2: String,
    /// TCP congestion control of connections from this host (loopback, or this host's own
    /// address): one that does not pace packets, as nothing lies between the two ends;
    /// `system` keeps the system's (remote connections always do)
    #[arg(long, env = "DS_SERVER__LOCAL_TCP_CONGESTION", default_value = congestion::DEFAULT)]
    pub local_tcp_congestion: String,
    /// PEM certificate chain; with --tls-key-path, serve HTTPS
    #[arg(long, env = "DS_TLS__CERT_PATH")]
    pub tls_cert_path: Option<PathBuf>,
    /// PEM private key; with --tls-cert-path, serve HTTPS
    #[arg(long, env = "DS_TLS__KEY_PATH")]
    pub tls_key_path: Option<PathBuf>,
    /// etcd endpoints (comma-separated http://host:port): run as one node of a cluster whose
    /// directory of streams is in etcd (unset: a single node)
    #[arg(long, env = "DS_CLUSTER__ETCD_ENDPOINTS")]
    pub etcd_endpoints: Option<String>,
    /// This node's id in the cluster (letters, digits, '-', '_'; stored in the data directory
    /// at first start)
    #[arg(long, env = "DS_CLUSTER__NODE_ID")]
    pub node_id: Option<String>,
    /// How the other nodes reach this one (http://host:port)
    #[arg(long, env = "DS_CLUSTER__ADVERTISE_URL")]
    pub advertise_url: Option<String>,
    /// Seconds a node stays in the directory after its last keep-alive (a stopped node's
    /// streams answer 503 after at most this long)
    #[arg(long, env = "DS_CLUSTER__LEASE_TTL_SECS", default_value = "5")]
    pub lease_ttl_secs: String,
    /// Take over this node id from the data directory that ran it before (lost for good):
    /// that directory's streams leave the cluster's directory (404, free to create again)
    #[arg(long, env = "DS_CLUSTER__ADOPT_NODE_ID", default_value = "false")]
    pub adopt_node_id: String,
}

/// How this node joins a cluster.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub etcd_endpoints: Vec<String>,
    pub node_id: String,
    /// `host:port` of this node, as the other nodes connect to it.
    pub advertise: String,
    pub lease_ttl_secs: u64,
    /// This data directory takes over the id from the one that ran it before.
    pub adopt_node_id: bool,
}

/// A checked configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub host: IpAddr,
    pub port: u16,
    pub long_poll_timeout: Duration,
    /// `None`: SSE connections are never closed for idleness.
    pub sse_idle_close: Option<Duration>,
    pub cors: CorsPolicy,
    pub read_bytes_max: usize,
    pub connections_max: usize,
    pub write_stall_timeout: Duration,
    /// How long a connection may wait with no request open (and a request head may take).
    pub idle_timeout: Duration,
    /// Requests without a body on plain TCP are served by the bare front.
    pub bare_front: bool,
    /// Clients may speak HTTP/2.
    pub http2: bool,
    /// The TCP congestion control of connections from this host (`None`: the system's).
    pub local_tcp_congestion: Option<Box<str>>,
    /// Request body bytes held across all connections at once.
    pub body_buffer_bytes_max: u64,
    /// How long a request body may go without a byte arriving.
    pub body_timeout: Duration,
    /// Certificate chain and key files: serve HTTPS.
    pub tls: Option<TlsFiles>,
    /// `None`: a single node.
    pub cluster: Option<ClusterConfig>,
    pub engine: EngineConfig,
}

/// Where the PEM certificate chain and private key are (both checked at startup).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert_path: PathBuf,
    pub key_path: PathBuf,
}

/// A configuration value that cannot be used; the message names the variable.
#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// Longest long-poll wait, in seconds.
const LONG_POLL_SECS_MAX: u64 = 3600;
/// Longest SSE idle interval, in seconds.
const SSE_IDLE_SECS_MAX: u64 = 86_400;
/// Most concurrent connections one process may be configured for.
const CONNECTIONS_MAX: u64 = 1_000_000;
/// Longest write stall allowed, in seconds.
const WRITE_STALL_SECS_MAX: u64 = 3600;
/// Longest idle connection allowed, in seconds.
const IDLE_SECS_MAX: u64 = 3600;
/// Largest append one may configure: a request body held in memory, one log record.
const APPEND_BYTES_MAX_LIMIT: u64 = 1 << 30;

impl Args {
    pub fn into_config(self) -> Result<Config, ConfigError> {
        let tls = self.tls_files()?;
        let host = self.host.parse().map_err(|_| invalid("DS_SERVER__HOST", &self.host, "an IP address"))?;
        let port = number("DS_SERVER__PORT", &self.port, 0, u64::from(u16::MAX))? as u16;
        let long_poll =
            number("DS_SERVER__LONG_POLL_TIMEOUT_SECS", &self.long_poll_timeout_secs, 1, LONG_POLL_SECS_MAX)?;
        let sse_idle = number(
            "DS_SERVER__SSE_RECONNECT_INTERVAL_SECS",
            &self.sse_reconnect_interval_secs,
            0,
            SSE_IDLE_SECS_MAX,
        )?;
        let cors = CorsPolicy::parse(&self.cors_origins)
            .map_err(|why| ConfigError(format!("DS_HTTP__CORS_ORIGINS: {why}")))?;
        let body_buffer_bytes_max =
            number("DS_LIMITS__MAX_BODY_BUFFER_BYTES", &self.max_body_buffer_bytes, 1024, u64::MAX)?;
        let body_timeout_secs = number("DS_SERVER__BODY_TIMEOUT_SECS", &self.body_timeout_secs, 1, 3600)?;
        let read_bytes_max =
            number("DS_LIMITS__MAX_READ_BYTES", &self.max_read_bytes, 1024, 64 << 20)? as usize;
        let connections_max =
            number("DS_SERVER__MAX_CONNECTIONS", &self.max_connections, 1, CONNECTIONS_MAX)? as usize;
        let write_stall_secs = number(
            "DS_SERVER__WRITE_STALL_TIMEOUT_SECS",
            &self.write_stall_timeout_secs,
            1,
            WRITE_STALL_SECS_MAX,
        )?;
        let idle_secs = number("DS_SERVER__IDLE_TIMEOUT_SECS", &self.idle_timeout_secs, 1, IDLE_SECS_MAX)?;
        let bare_front = boolean("DS_SERVER__BARE_FRONT", &self.bare_front)?;
        let http2 = boolean("DS_SERVER__HTTP2", &self.http2)?;
        let local_tcp_congestion = congestion::parse(&self.local_tcp_congestion)
            .map_err(|why| ConfigError(format!("DS_SERVER__LOCAL_TCP_CONGESTION: {why}")))?;
        let engine = self.engine_config()?;
        let cluster = self.cluster_config()?;
        Ok(Config {
            host,
            port,
            long_poll_timeout: Duration::from_secs(long_poll),
            sse_idle_close: (sse_idle > 0).then(|| Duration::from_secs(sse_idle)),
            cors,
            read_bytes_max,
            connections_max,
            write_stall_timeout: Duration::from_secs(write_stall_secs),
            idle_timeout: Duration::from_secs(idle_secs),
            bare_front,
            http2,
            local_tcp_congestion,
            body_buffer_bytes_max,
            body_timeout: Duration::from_secs(body_timeout_secs),
            tls,
            cluster,
            engine,
        })
    }

    /// The cluster part: all three settings, or no endpoints at all.
    fn cluster_config(&self) -> Result<Option<ClusterConfig>, ConfigError> {
        let Some(endpoints) = self.etcd_endpoints.as_deref().filter(|text| !text.trim().is_empty()) else {
            return Ok(None);
        };
        let etcd_endpoints: Vec<String> =
            endpoints.split(',').map(|e| e.trim().to_string()).filter(|e| !e.is_empty()).collect();
        let node_id = self.node_id.clone().unwrap_or_default();
        let id_ok = !node_id.is_empty()
            && node_id.len() <= 64
            && node_id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !id_ok {
            return Err(invalid("DS_CLUSTER__NODE_ID", &node_id, "1 to 64 letters, digits, '-' or '_'"));
        }
        let url = self.advertise_url.clone().unwrap_or_default();
        let advertise = url.strip_prefix("http://").unwrap_or("").trim_end_matches('/').to_string();
        if advertise.is_empty() || advertise.contains('/') || !advertise.contains(':') {
            return Err(invalid("DS_CLUSTER__ADVERTISE_URL", &url, "http://host:port"));
        }
        let lease_ttl_secs = number("DS_CLUSTER__LEASE_TTL_SECS", &self.lease_ttl_secs, 2, 600)?;
        let adopt_node_id = boolean("DS_CLUSTER__ADOPT_NODE_ID", &self.adopt_node_id)?;
        Ok(Some(ClusterConfig { etcd_endpoints, node_id, advertise, lease_ttl_secs, adopt_node_id }))
    }

    /// The certificate chain and key files: both or neither.
    fn tls_files(&self) -> Result<Option<TlsFiles>, ConfigError> {
        match (&self.tls_cert_path, &self.tls_key_path) {
            (Some(cert_path), Some(key_path)) => {
                Ok(Some(TlsFiles { cert_path: cert_path.clone(), key_path: key_path.clone() }))
            }
            (None, None) => Ok(None),
            (Some(_), None) => {
                Err(ConfigError("DS_TLS__CERT_PATH is set but DS_TLS__KEY_PATH is not; set both".into()))
            }
            (None, Some(_)) => {
                Err(ConfigError("DS_TLS__KEY_PATH is set but DS_TLS__CERT_PATH is not; set both".into()))
            }
        }
    }

    /// The engine's part: limits, storage mode, data directory, shards, segments.
    fn engine_config(&self) -> Result<EngineConfig, ConfigError> {
        let total_bytes_max = number("DS_LIMITS__MAX_MEMORY_BYTES", &self.max_memory_bytes, 1, u64::MAX)?;
        let streams_max = number("DS_LIMITS__MAX_STREAMS", &self.max_streams, 1, u64::MAX)?;
        let stream_bytes_max = number("DS_LIMITS__MAX_STREAM_BYTES", &self.max_stream_bytes, 1, u64::MAX)?;
        let append_bytes_max = self.append_bytes_max(stream_bytes_max)?;
        let mode = StorageMode::parse(&self.storage_mode).ok_or_else(|| {
            invalid("DS_STORAGE__MODE", &self.storage_mode, "memory, file-fast, file-durable or acid")
        })?;
        let shard_count = number("DS_STORAGE__ACID_SHARD_COUNT", &self.acid_shard_count, 1, 256)? as u32;
        if !shard_count.is_power_of_two() {
            return Err(invalid(
                "DS_STORAGE__ACID_SHARD_COUNT",
                &self.acid_shard_count,
                "a power of two from 1 to 256",
            ));
        }
        Ok(EngineConfig {
            mode,
            data_dir: self.data_dir.clone(),
            shard_count,
            limits: Limits { total_bytes_max, stream_bytes_max, append_bytes_max, streams_max },
            segment_bytes: self.segment_bytes(append_bytes_max)?,
            shared_flush: boolean("DS_STORAGE__SHARED_FLUSH", &self.shared_flush)?,
            ..EngineConfig::default()
        })
    }

    /// The largest append: as set (at most the stream limit), or the default under it.
    fn append_bytes_max(&self, stream_bytes_max: u64) -> Result<u64, ConfigError> {
        let Some(text) = &self.max_append_bytes else {
            return Ok(APPEND_BYTES_MAX_DEFAULT.min(stream_bytes_max));
        };
        let append_bytes_max = number("DS_LIMITS__MAX_APPEND_BYTES", text, 1, APPEND_BYTES_MAX_LIMIT)?;
        if append_bytes_max > stream_bytes_max {
            return Err(ConfigError(format!(
                "DS_LIMITS__MAX_APPEND_BYTES: {append_bytes_max} is more than a stream may hold \
                 (DS_LIMITS__MAX_STREAM_BYTES is {stream_bytes_max})"
            )));
        }
        Ok(append_bytes_max)
    }

    /// The acid segment size: as set (at least the largest record), or the default for the
    /// largest append.
    fn segment_bytes(&self, append_bytes_max: u64) -> Result<u64, ConfigError> {
        let Some(text) = &self.segment_bytes else {
            return Ok(segment_bytes_for(append_bytes_max));
        };
        let needed = append_bytes_max + SEGMENT_OVERHEAD_BYTES;
        let segment_bytes = number("DS_STORAGE__SEGMENT_BYTES", text, 1, (1 << 32) - 1)?;
        if segment_bytes < needed {
            return Err(ConfigError(format!(
                "DS_STORAGE__SEGMENT_BYTES: {segment_bytes} cannot hold the largest record \
                 (DS_LIMITS__MAX_APPEND_BYTES plus {SEGMENT_OVERHEAD_BYTES}); use at least {needed}"
            )));
        }
        Ok(segment_bytes)
    }
}

fn invalid(variable: &str, value: &str, expected: &str) -> ConfigError {
    ConfigError(format!("{variable}: invalid value {value:?}, expected {expected}"))
}

/// `true` or `false`.
fn boolean(variable: &str, value: &str) -> Result<bool, ConfigError> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(invalid(variable, value, "true or false")),
    }
}

/// A decimal integer from `min` to `max`.
fn number(variable: &str, value: &str, min: u64, max: u64) -> Result<u64, ConfigError> {
    let expected = || invalid(variable, value, &format!("an integer from {min} to {max}"));
    let digits_only = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
    let parsed: u64 = digits_only.then(|| value.parse().ok()).flatten().ok_or_else(expected)?;
    if parsed < min || parsed > max {
        return Err(expected());
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Result<Config, ConfigError> {
        let mut argv = vec!["ds-server"];
        argv.extend_from_slice(extra);
        Args::try_parse_from(argv).expect("flags parse").into_config()
    }

    #[test]
    fn defaults_follow_the_spec() {
        let config = args(&[]).unwrap();
        assert_eq!(config.port, 4437);
        assert_eq!(config.host.to_string(), "0.0.0.0");
        assert_eq!(config.long_poll_timeout, Duration::from_secs(30));
        assert_eq!(config.sse_idle_close, Some(Duration::from_secs(60)));
        assert_eq!(config.engine.mode, StorageMode::Memory);
        assert_eq!(config.engine.shard_count, 16);
        assert_eq!(config.engine.limits, Limits::default());
        assert_eq!(config.read_bytes_max, 4 << 20);
        assert_eq!(config.connections_max, 10_000);
        assert_eq!(config.write_stall_timeout, Duration::from_secs(30));
        assert_eq!(config.idle_timeout, Duration::from_secs(30));
        assert!(config.tls.is_none());
    }

    #[test]
    fn invalid_values_name_their_variable() {
        let cases: [(&[&str], &str); 11] = [
            (&["--port", "http"], "DS_SERVER__PORT"),
            (&["--port", "70000"], "DS_SERVER__PORT"),
            (&["--acid-shard-count", "12"], "DS_STORAGE__ACID_SHARD_COUNT"),
            (&["--acid-shard-count", "512"], "DS_STORAGE__ACID_SHARD_COUNT"),
            (&["--storage-mode", "disk"], "DS_STORAGE__MODE"),
            (&["--long-poll-timeout-secs", "0"], "DS_SERVER__LONG_POLL_TIMEOUT_SECS"),
            (&["--max-memory-bytes=-5"], "DS_LIMITS__MAX_MEMORY_BYTES"),
            (&["--tls-cert-path", "/tmp/cert.pem"], "DS_TLS__KEY_PATH"),
            (&["--tls-key-path", "/tmp/key.pem"], "DS_TLS__CERT_PATH"),
            (&["--max-connections", "0"], "DS_SERVER__MAX_CONNECTIONS"),
            (&["--write-stall-timeout-secs", "x"], "DS_SERVER__WRITE_STALL_TIMEOUT_SECS"),
        ];
        for (flags, variable) in cases {
            let error = args(flags).expect_err("invalid");
            assert!(error.0.contains(variable), "{flags:?}: {error}");
        }
    }

    #[test]
    fn the_largest_append_is_apart_from_the_stream_limit() {
        let config = args(&["--max-stream-bytes", "1000"]).unwrap();
        assert_eq!(config.engine.limits.append_bytes_max, 1000, "the default stays under the stream limit");
        let huge = (1u64 << 40).to_string();
        let config = args(&["--max-stream-bytes", &huge, "--storage-mode", "acid"]).unwrap();
        assert_eq!(config.engine.limits.stream_bytes_max, 1 << 40, "streams span segments");
        assert_eq!(config.engine.limits.append_bytes_max, 10 << 20);
        assert_eq!(config.engine.segment_bytes, 32 << 20, "segments follow the largest append");
        assert!(config.engine.validate().is_ok());
        let config = args(&["--max-append-bytes", "67108864", "--max-stream-bytes", &huge]).unwrap();
        assert_eq!(config.engine.segment_bytes, 128 << 20);
        let error = args(&["--max-append-bytes", "2000", "--max-stream-bytes", "1000"]).unwrap_err();
        assert!(error.0.contains("DS_LIMITS__MAX_APPEND_BYTES"), "{error}");
        let error = args(&["--max-append-bytes", "2147483648", "--max-stream-bytes", &huge]).unwrap_err();
        assert!(error.0.contains("DS_LIMITS__MAX_APPEND_BYTES"), "{error}");
    }

    #[test]
    fn zero_turns_sse_idle_close_off() {
        let config = args(&["--sse-reconnect-interval-secs", "0", "--storage-mode", "wal"]).unwrap();
        assert_eq!(config.sse_idle_close, None);
        assert_eq!(config.engine.mode, StorageMode::Acid);
    }

    #[test]
    fn cluster_settings_come_together_or_not_at_all() {
        assert!(args(&[]).unwrap().cluster.is_none());
        let etcd = ["--etcd-endpoints", "http://127.0.0.1:2379, http://127.0.0.2:2379"];
        let node = ["--node-id", "n-1", "--advertise-url", "http://10.0.0.1:4437/"];
        let cluster = args(&[&etcd[..], &node[..]].concat()).unwrap().cluster.unwrap();
        assert_eq!(cluster.etcd_endpoints, ["http://127.0.0.1:2379", "http://127.0.0.2:2379"]);
        assert_eq!((cluster.node_id.as_str(), cluster.advertise.as_str()), ("n-1", "10.0.0.1:4437"));
        for (bad, variable) in [
            (["--node-id", "a b", "--advertise-url", "http://h:1"], "DS_CLUSTER__NODE_ID"),
            (["--node-id", "n", "--advertise-url", "h:1"], "DS_CLUSTER__ADVERTISE_URL"),
        ] {
            let error = args(&[&etcd[..], &bad[..]].concat()).unwrap_err();
            assert!(error.0.contains(variable), "{}", error.0);
        }
    }
}
