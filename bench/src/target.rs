//! The server under test: where to connect and how stream URLs are spelled.

use std::net::{SocketAddr, ToSocketAddrs};

/// A server URL (`http://host:port`) and the path prefix its streams live under.
#[derive(Clone, Debug)]
pub struct Target {
    pub addr: SocketAddr,
    /// `host:port` as given, for the `Host` header.
    pub authority: String,
    /// Path prefix of streams, such as `/v1/stream/` (always ends with `/`).
    pub prefix: String,
    /// `Authorization` header value sent with every request (a proxy that wants a token).
    pub authorization: Option<String>,
}

impl Target {
    pub fn parse(url: &str, prefix: &str) -> Result<Target, String> {
        let authority = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("{url}: only http:// URLs are supported"))?
            .trim_end_matches('/')
            .to_string();
        if authority.contains('/') {
            return Err(format!("{url}: give the server's base URL; use --prefix for the stream path"));
        }
        let addr = authority
            .to_socket_addrs()
            .map_err(|e| format!("{url}: {e}"))?
            .next()
            .ok_or_else(|| format!("{url}: no address"))?;
        let mut prefix = prefix.to_string();
        if !prefix.starts_with('/') {
            prefix.insert(0, '/');
        }
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        Ok(Target { addr, authority, prefix, authorization: None })
    }

    /// The path of stream `name`.
    pub fn stream_path(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_url_and_normalises_the_prefix() {
        let target = Target::parse("http://127.0.0.1:4437/", "v1/stream").unwrap();
        assert_eq!(target.addr.port(), 4437);
        assert_eq!(target.stream_path("a"), "/v1/stream/a");
        assert_eq!(Target::parse("http://127.0.0.1:1", "/").unwrap().stream_path("b"), "/b");
        assert!(Target::parse("https://127.0.0.1:1", "/").is_err());
        assert!(Target::parse("http://127.0.0.1:1/v1/stream", "/").is_err());
    }
}
