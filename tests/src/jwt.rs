//! Minting JSON Web Tokens (RS256) with the committed test-only keys, for proxy tests.
//!
//! The keys under `deploy/test-keys/` exist only for tests: their private halves are public
//! knowledge. [`mint`] signs any header and claims, so tests can make valid tokens and every
//! kind of invalid one (expired, wrong issuer or audience, foreign key, `alg: none`).

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{RsaKeyPair, RSA_PKCS1_SHA256};

/// The issuer the test proxy accepts.
pub const TEST_ISSUER: &str = "https://issuer.ds.test";
/// The audience the test proxy accepts.
pub const TEST_AUDIENCE: &str = "ds-test";
/// The key the test proxy trusts (private half; its public PEM twin sits beside it).
pub const TRUSTED_KEY: &str = "test-only-jwt-signing-key.pem";
/// A key the test proxy does not trust.
pub const UNTRUSTED_KEY: &str = "test-only-untrusted-signing-key.pem";
/// The public key the proxy verifies with.
pub const TRUSTED_PUBLIC_KEY: &str = "test-only-jwt-public-key.pem";

/// A file under `deploy/test-keys/`.
pub fn test_key(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/test-keys").join(name)
}

/// Seconds since the Unix epoch.
pub fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_secs() as i64
}

/// Claims a valid token carries, for `subject`, valid for an hour.
pub fn valid_claims(subject: &str) -> serde_json::Value {
    serde_json::json!({
        "iss": TEST_ISSUER,
        "aud": TEST_AUDIENCE,
        "sub": subject,
        "iat": now_secs(),
        "exp": now_secs() + 3600,
    })
}

/// A token with `claims`, signed RS256 with the test key `key_name`.
pub fn mint(claims: &serde_json::Value, key_name: &str) -> String {
    let header = serde_json::json!({ "alg": "RS256", "typ": "JWT", "kid": "ds-test-only-1" });
    let signing_input = format!("{}.{}", encode_json(&header), encode_json(claims));
    let key = signing_key(key_name);
    let mut signature = vec![0; key.public().modulus_len()];
    key.sign(&RSA_PKCS1_SHA256, &SystemRandom::new(), signing_input.as_bytes(), &mut signature)
        .expect("RSA signing");
    format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature))
}

/// An unsigned token (`alg: none`) with `claims`.
pub fn unsigned(claims: &serde_json::Value) -> String {
    let header = serde_json::json!({ "alg": "none", "typ": "JWT" });
    format!("{}.{}.", encode_json(&header), encode_json(claims))
}

fn encode_json(value: &serde_json::Value) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(value).expect("JSON serializes"))
}

/// The PKCS#8 key in a PEM file.
fn signing_key(key_name: &str) -> RsaKeyPair {
    let path = test_key(key_name);
    let pem = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let base64: String = pem.lines().filter(|line| !line.starts_with("-----")).collect();
    let der = STANDARD.decode(base64).expect("PEM body is base64");
    RsaKeyPair::from_pkcs8(&der).expect("a PKCS#8 RSA key")
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{UnparsedPublicKey, RSA_PKCS1_2048_8192_SHA256};

    #[test]
    fn minted_tokens_verify_with_the_signing_key_only() {
        let token = mint(&valid_claims("alice"), TRUSTED_KEY);
        let (signing_input, signature) = token.rsplit_once('.').unwrap();
        let signature = URL_SAFE_NO_PAD.decode(signature).unwrap();
        let verify = |key_name: &str| {
            let key = signing_key(key_name);
            UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, key.public().as_ref())
                .verify(signing_input.as_bytes(), &signature)
                .is_ok()
        };
        assert!(verify(TRUSTED_KEY));
        assert!(!verify(UNTRUSTED_KEY));
        let claims = token.split('.').nth(1).unwrap();
        let claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).unwrap()).unwrap();
        assert_eq!(claims["sub"], "alice");
    }
}
