//! `ds-server` as a command: its help, its configuration errors, its startup line, a data
//! directory it cannot take.

use std::process::Command;

use ds_tests::server::binary;
use ds_tests::Server;

/// Every variable of the spec (plus the listen host), with its default.
const VARIABLES: [(&str, Option<&str>); 20] = [
    ("DS_SERVER__HOST", Some("0.0.0.0")),
    ("DS_SERVER__PORT", Some("4437")),
    ("DS_SERVER__LONG_POLL_TIMEOUT_SECS", Some("30")),
    ("DS_SERVER__SSE_RECONNECT_INTERVAL_SECS", Some("60")),
    ("DS_HTTP__CORS_ORIGINS", Some("*")),
    ("DS_LIMITS__MAX_MEMORY_BYTES", Some("104857600")),
    ("DS_LIMITS__MAX_STREAM_BYTES", Some("10485760")),
    ("DS_LIMITS__MAX_READ_BYTES", Some("4194304")),
    ("DS_STORAGE__MODE", Some("memory")),
    ("DS_STORAGE__DATA_DIR", Some("./data/streams")),
    ("DS_STORAGE__ACID_SHARD_COUNT", Some("16")),
    ("DS_SERVER__MAX_CONNECTIONS", Some("10000")),
    ("DS_SERVER__WRITE_STALL_TIMEOUT_SECS", Some("30")),
    ("DS_SERVER__LOCAL_TCP_CONGESTION", Some("reno")),
    ("DS_TLS__CERT_PATH", None),
    ("DS_TLS__KEY_PATH", None),
    ("DS_CLUSTER__ETCD_ENDPOINTS", None),
    ("DS_CLUSTER__NODE_ID", None),
    ("DS_CLUSTER__ADVERTISE_URL", None),
    ("DS_CLUSTER__LEASE_TTL_SECS", Some("5")),
];

#[test]
fn help_lists_every_variable_with_its_default() {
    let output = Command::new(binary("ds-server")).arg("--help").env_clear().output().unwrap();
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
    for (variable, default) in VARIABLES {
        assert!(flat.contains(&format!("env: {variable}")), "{variable} missing from --help:\n{help}");
        if let Some(default) = default {
            assert!(flat.contains(&format!("default: {default}")), "default {default} missing:\n{help}");
        }
    }
}

#[test]
fn invalid_values_stop_startup_naming_the_variable() {
    let cases = [
        ("DS_STORAGE__ACID_SHARD_COUNT", "3"),
        ("DS_STORAGE__ACID_SHARD_COUNT", "1024"),
        ("DS_SERVER__PORT", "not-a-port"),
        ("DS_SERVER__LONG_POLL_TIMEOUT_SECS", "-1"),
        ("DS_STORAGE__MODE", "tape"),
        ("DS_HTTP__CORS_ORIGINS", "example.com"),
        ("DS_LIMITS__MAX_STREAM_BYTES", "lots"),
        ("DS_TLS__KEY_PATH", "/nonexistent/key.pem"),
        ("DS_SERVER__LOCAL_TCP_CONGESTION", "nosuchalgorithm"),
    ];
    for (variable, value) in cases {
        let output = Command::new(binary("ds-server")).env_clear().env(variable, value).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{variable}={value}: {stderr}");
        assert!(stderr.contains(variable), "{variable}={value} not named in: {stderr}");
    }
}

#[test]
fn startup_logs_where_it_listens_and_in_which_mode() {
    let server = Server::start(&[("DS_STORAGE__ACID_SHARD_COUNT", "4")]);
    let log = server.log();
    let line = log.lines().find(|l| l.contains("listening on")).expect("a listening line");
    assert!(line.contains(&format!("http://{}", server.addr)), "{line}");
    assert!(line.contains("mode memory") && line.contains("4 shards"), "{line}");
}

#[test]
fn a_data_directory_in_use_or_not_a_directory_stops_startup_saying_which() {
    let server = Server::start_in("acid", &[]);
    let dir = server.data_dir().expect("acid has a directory").display().to_string();
    let start = |dir: &str| {
        let output = Command::new(binary("ds-server"))
            .env_clear()
            .env("DS_SERVER__PORT", "0")
            .env("DS_STORAGE__MODE", "acid")
            .env("DS_STORAGE__DATA_DIR", dir)
            .output()
            .unwrap();
        (output.status.success(), String::from_utf8_lossy(&output.stderr).into_owned())
    };
    let (started, stderr) = start(&dir);
    assert!(!started && stderr.contains("is in use by another process"), "{stderr}");
    let file = format!("{dir}/MANIFEST");
    let (started, stderr) = start(&file);
    assert!(!started && stderr.contains("Not a directory") && !stderr.contains("in use"), "{stderr}");
}
