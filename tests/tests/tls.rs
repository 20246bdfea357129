//! Direct TLS: `ds-server` with `DS_TLS__CERT_PATH` and `DS_TLS__KEY_PATH` serves HTTPS
//! (TLS 1.3 and 1.2), HTTP/2 to a client that offers it by ALPN, and bad TLS settings stop
//! startup with a message naming the problem.
//! Certificates are generated here (rcgen); no private key for TLS is committed.

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use ds_tests::client::read_response;
use ds_tests::data_dir::DataDir;
use ds_tests::http2::Http2;
use ds_tests::server::binary;
use ds_tests::{Response, Server};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned, SupportedProtocolVersion};

/// A self-signed certificate for localhost, written as PEM files.
struct TestCert {
    _dir: DataDir,
    cert_path: PathBuf,
    key_path: PathBuf,
    der: CertificateDer<'static>,
}

fn test_cert(label: &str) -> TestCert {
    let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("certificate");
    let dir = DataDir::new(label);
    let cert_path = dir.path().join("cert.pem");
    let key_path = dir.path().join("key.pem");
    std::fs::write(&cert_path, generated.cert.pem()).unwrap();
    std::fs::write(&key_path, generated.signing_key.serialize_pem()).unwrap();
    TestCert { _dir: dir, cert_path, key_path, der: generated.cert.der().clone() }
}

fn tls_env(cert: &TestCert) -> Vec<(&'static str, String)> {
    vec![
        ("DS_TLS__CERT_PATH", cert.cert_path.display().to_string()),
        ("DS_TLS__KEY_PATH", cert.key_path.display().to_string()),
    ]
}

fn start_tls(cert: &TestCert) -> Server {
    let env = tls_env(cert);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Server::start(&env)
}

/// One HTTPS request trusting only `cert`, restricted to `version`; the answer and the
/// version negotiated.
fn https(
    addr: SocketAddr,
    cert: &TestCert,
    version: &'static SupportedProtocolVersion,
    request: &str,
) -> (Response, rustls::ProtocolVersion) {
    let mut roots = RootCertStore::empty();
    roots.add(cert.der.clone()).unwrap();
    let config = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").unwrap();
    let connection = ClientConnection::new(Arc::new(config), name).unwrap();
    let socket = TcpStream::connect(addr).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut stream = StreamOwned::new(connection, socket);
    stream.write_all(request.as_bytes()).unwrap();
    stream.flush().unwrap();
    let mut reader = BufReader::new(stream);
    let response = read_response(&mut reader, false).expect("an HTTPS response");
    let negotiated = reader.get_ref().conn.protocol_version().expect("handshake done");
    (response, negotiated)
}

#[test]
fn serves_https_over_tls_1_3_and_1_2() {
    let cert = test_cert("tls-serve");
    let server = start_tls(&cert);
    assert!(server.log().contains("listening on https://"), "{}", server.log());
    let put = "PUT /v1/stream/secure HTTP/1.1\r\nHost: localhost\r\nContent-Type: text/plain\r\n\
               Content-Length: 5\r\nConnection: close\r\n\r\nhello";
    let (created, version) = https(server.addr, &cert, &rustls::version::TLS13, put);
    assert_eq!(created.status, 201, "{}", created.text());
    assert_eq!(version, rustls::ProtocolVersion::TLSv1_3);
    assert!(created.header("location").is_some_and(|l| l.starts_with("https://")), "{:?}", created.headers);

    let get = "GET /v1/stream/secure?offset=-1 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    let (read, version) = https(server.addr, &cert, &rustls::version::TLS12, get);
    assert_eq!((read.status, read.text().as_str()), (200, "hello"));
    assert_eq!(version, rustls::ProtocolVersion::TLSv1_2);
}

#[test]
fn plain_http_to_the_tls_port_gets_no_http_answer() {
    let cert = test_cert("tls-plain");
    let server = start_tls(&cert);
    let answer = server.client().try_send("GET", "/healthz", &[], b"");
    assert!(answer.is_err(), "a plaintext request is not served: {answer:?}");
    assert_eq!(
        https(
            server.addr,
            &cert,
            &rustls::version::TLS13,
            "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .0
        .status,
        200
    );
}

/// A TLS connection offering ALPN `h2` and `http/1.1`; the protocol the server chose.
async fn connect_offering_h2(
    addr: SocketAddr,
    cert: &TestCert,
) -> (tokio_rustls::client::TlsStream<tokio::net::TcpStream>, Option<Vec<u8>>) {
    let mut roots = RootCertStore::empty();
    roots.add(cert.der.clone()).unwrap();
    let mut config = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    let stream =
        connector.connect(ServerName::try_from("localhost").unwrap(), socket).await.expect("a handshake");
    let chosen = stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
    (stream, chosen)
}

#[test]
fn a_client_offering_h2_gets_http2_over_tls() {
    let cert = test_cert("tls-h2");
    let server = start_tls(&cert);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let (stream, chosen) = connect_offering_h2(server.addr, &cert).await;
        assert_eq!(chosen.as_deref(), Some(&b"h2"[..]), "ALPN chose HTTP/2");
        let origin = format!("https://localhost:{}", server.addr.port());
        let mut h2 = Http2::connect(stream, &origin).await.expect("an HTTP/2 handshake");
        let created = h2.send("PUT", "/v1/stream/h2s", &[("content-type", "text/plain")], b"").await;
        assert_eq!(created.status, 201, "{}", created.text());
        assert_eq!(created.header("location"), Some(format!("{origin}/v1/stream/h2s").as_str()));
        assert_eq!(
            h2.send("POST", "/v1/stream/h2s", &[("content-type", "text/plain")], b"sealed").await.status,
            204
        );
        let read = h2.send("GET", "/v1/stream/h2s?offset=-1", &[], b"").await;
        assert_eq!((read.status, read.text().as_str()), (200, "sealed"));
    });

    let env = [tls_env(&cert), vec![("DS_SERVER__HTTP2", "false".to_string())]].concat();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let http1_only = Server::start(&env);
    let chosen = runtime.block_on(connect_offering_h2(http1_only.addr, &cert)).1;
    assert_eq!(chosen.as_deref(), Some(&b"http/1.1"[..]), "with HTTP/2 off, ALPN chooses HTTP/1.1");
}

/// Runs `ds-server` with `env`, expecting it to refuse to start; returns its stderr.
fn refused_start(env: &[(&str, String)]) -> String {
    let output = Command::new(binary("ds-server"))
        .env_clear()
        .env("DS_SERVER__HOST", "127.0.0.1")
        .env("DS_SERVER__PORT", "0")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "ds-server must not start: {stderr}");
    stderr
}

#[test]
fn bad_tls_settings_stop_startup_naming_the_problem() {
    let cert = test_cert("tls-bad-a");
    let other = test_cert("tls-bad-b");

    let mismatched = [
        ("DS_TLS__CERT_PATH", cert.cert_path.display().to_string()),
        ("DS_TLS__KEY_PATH", other.key_path.display().to_string()),
    ];
    let stderr = refused_start(&mismatched);
    assert!(stderr.contains("does not match the certificate"), "{stderr}");

    let missing = [
        ("DS_TLS__CERT_PATH", "/nonexistent/cert.pem".to_string()),
        ("DS_TLS__KEY_PATH", cert.key_path.display().to_string()),
    ];
    let stderr = refused_start(&missing);
    assert!(stderr.contains("DS_TLS__CERT_PATH /nonexistent/cert.pem: cannot read"), "{stderr}");

    let swapped = [
        ("DS_TLS__CERT_PATH", cert.key_path.display().to_string()),
        ("DS_TLS__KEY_PATH", cert.key_path.display().to_string()),
    ];
    let stderr = refused_start(&swapped);
    assert!(stderr.contains("DS_TLS__CERT_PATH") && stderr.contains("no CERTIFICATE"), "{stderr}");

    let no_key = [
        ("DS_TLS__CERT_PATH", cert.cert_path.display().to_string()),
        ("DS_TLS__KEY_PATH", cert.cert_path.display().to_string()),
    ];
    let stderr = refused_start(&no_key);
    assert!(stderr.contains("DS_TLS__KEY_PATH") && stderr.contains("no usable PRIVATE KEY"), "{stderr}");

    let half = [("DS_TLS__CERT_PATH", cert.cert_path.display().to_string())];
    let stderr = refused_start(&half);
    assert!(
        stderr.contains("DS_TLS__KEY_PATH is set but") || stderr.contains("DS_TLS__CERT_PATH is set but"),
        "{stderr}"
    );
}
