//! Direct TLS termination: the certificate chain and key are loaded and checked once at
//! startup; each connection's handshake then goes through the [`TlsAcceptor`].
//!
//! rustls with the ring provider, TLS 1.3 and 1.2, ALPN `h2` (unless `DS_SERVER__HTTP2` is
//! off) and `http/1.1`, no client certificates
//! (mutual TLS is the proxy's business). A file that cannot be read, holds no PEM item of the
//! right kind, or a key that does not belong to the certificate stops startup with a
//! message naming the variable and the file.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

use crate::config::TlsFiles;

/// Why TLS could not be set up; the message names the variable and file.
#[derive(Debug)]
pub struct TlsError(pub String);

impl std::fmt::Display for TlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}

/// The ALPN name of HTTP/2 (a connection that negotiated it goes to `super::http2`).
pub(crate) const ALPN_HTTP2: &[u8] = b"h2";

/// Loads and checks the files, and builds the acceptor; `http2`: offer HTTP/2 by ALPN.
pub(crate) fn acceptor(files: &TlsFiles, http2: bool) -> Result<TlsAcceptor, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = load_chain(&files.cert_path)?;
    let key = load_key(&files.key_path)?;
    let certified = certified_key(chain, key, &provider, files)?;
    let mut config = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|error| TlsError(format!("TLS protocol setup failed: {error}")))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(SingleCertAndKey::from(certified)));
    config.alpn_protocols = match http2 {
        true => vec![ALPN_HTTP2.to_vec(), b"http/1.1".to_vec()],
        false => vec![b"http/1.1".to_vec()],
    };
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn load_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read("DS_TLS__CERT_PATH", path)?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TlsError(format!("DS_TLS__CERT_PATH {}: not valid PEM: {error}", path.display())))?;
    if chain.is_empty() {
        return Err(TlsError(format!("DS_TLS__CERT_PATH {}: no CERTIFICATE in the file", path.display())));
    }
    Ok(chain)
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read("DS_TLS__KEY_PATH", path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|error| {
        TlsError(format!("DS_TLS__KEY_PATH {}: no usable PRIVATE KEY in the file ({error})", path.display()))
    })
}

/// The chain with its signing key, refused when the key is not the certificate's.
fn certified_key(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    provider: &CryptoProvider,
    files: &TlsFiles,
) -> Result<CertifiedKey, TlsError> {
    let key_path = files.key_path.display();
    let signing_key = provider.key_provider.load_private_key(key).map_err(|error| {
        TlsError(format!("DS_TLS__KEY_PATH {key_path}: unsupported private key: {error}"))
    })?;
    let certified = CertifiedKey::new(chain, signing_key);
    certified.keys_match().map_err(|error| {
        TlsError(format!(
            "DS_TLS__KEY_PATH {key_path} does not match the certificate in DS_TLS__CERT_PATH {} ({error})",
            files.cert_path.display()
        ))
    })?;
    Ok(certified)
}

fn read(variable: &str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path)
        .map_err(|error| TlsError(format!("{variable} {}: cannot read: {error}", path.display())))
}
