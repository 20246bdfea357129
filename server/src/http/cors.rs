//! Cross-origin access: which origins may read responses, and the preflight answer.
//!
//! `DS_HTTP__CORS_ORIGINS` is `*` (any origin, the default) or a comma-separated list of
//! exact origins. Listed origins are echoed back with `Vary: Origin`; others get no
//! `Access-Control-Allow-Origin`, so browsers keep the response from their scripts.

use hyper::header::{
    HeaderMap, HeaderValue, ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS, VARY,
};

/// Headers a browser script may read from our responses.
pub(crate) const EXPOSED_HEADERS: &str =
    "Stream-Next-Offset, Stream-Cursor, Stream-Up-To-Date, Stream-Closed, \
     Stream-TTL, Stream-Expires-At, Stream-SSE-Data-Encoding, Producer-Epoch, Producer-Seq, \
     Producer-Expected-Seq, Producer-Received-Seq, ETag, Location, Content-Type, Retry-After";
/// Request headers a browser script may send: every protocol header a route acts on (forks'
/// included), and `Authorization` for the proxy in front.
pub(crate) const ALLOWED_HEADERS: &str =
    "Content-Type, If-None-Match, Last-Event-ID, Authorization, Stream-Seq, \
     Stream-TTL, Stream-Expires-At, Stream-Closed, Producer-Id, Producer-Epoch, Producer-Seq, \
     Stream-Forked-From, Stream-Fork-Offset, Stream-Fork-Sub-Offset";
/// Methods a browser script may use.
pub(crate) const ALLOWED_METHODS: &str = "GET, HEAD, PUT, POST, DELETE, OPTIONS";
/// How long browsers may cache a preflight answer, in seconds.
pub(crate) const PREFLIGHT_MAX_AGE_SECS: &str = "86400";

/// The allowed origins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CorsPolicy {
    AnyOrigin,
    Origins(Vec<String>),
}

impl CorsPolicy {
    /// Parses `*` or a comma-separated list of origins such as `https://app.example`.
    pub fn parse(text: &str) -> Result<CorsPolicy, String> {
        let text = text.trim();
        if text == "*" {
            return Ok(CorsPolicy::AnyOrigin);
        }
        let origins: Vec<String> =
            text.split(',').map(|o| o.trim().to_string()).filter(|o| !o.is_empty()).collect();
        if origins.is_empty() {
            return Err("expected * or a comma-separated list of origins".into());
        }
        for origin in &origins {
            let valid = (origin.starts_with("http://") || origin.starts_with("https://"))
                && HeaderValue::from_str(origin).is_ok()
                && !origin.ends_with('/');
            if !valid {
                return Err(format!("{origin:?} is not an origin like https://app.example"));
            }
        }
        Ok(CorsPolicy::Origins(origins))
    }

    /// Adds the CORS response headers for a request from `origin`. Requests without an
    /// `Origin` (not from a browser's cross-origin fetch) need none.
    pub fn apply(&self, origin: Option<&HeaderValue>, headers: &mut HeaderMap) {
        if let CorsPolicy::Origins(_) = self {
            headers.append(VARY, HeaderValue::from_static("Origin"));
        }
        let Some(origin) = origin else { return };
        match self {
            CorsPolicy::AnyOrigin => {
                headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
            }
            CorsPolicy::Origins(allowed) => {
                if !allowed.iter().any(|a| a.as_bytes() == origin.as_bytes()) {
                    return;
                }
                headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
            }
        }
        headers.insert(ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static(EXPOSED_HEADERS));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_origin_by_default() {
        let mut headers = HeaderMap::new();
        CorsPolicy::parse("*")
            .unwrap()
            .apply(Some(&HeaderValue::from_static("https://x.example")), &mut headers);
        assert_eq!(headers["access-control-allow-origin"], "*");
        assert!(headers.contains_key("access-control-expose-headers"));
        let mut headers = HeaderMap::new();
        CorsPolicy::AnyOrigin.apply(None, &mut headers);
        assert!(headers.is_empty(), "no Origin, no CORS headers");
    }

    #[test]
    fn listed_origins_are_echoed_and_others_are_not() {
        let policy = CorsPolicy::parse("https://a.example, http://b.example:8080").unwrap();
        let mut headers = HeaderMap::new();
        policy.apply(Some(&HeaderValue::from_static("http://b.example:8080")), &mut headers);
        assert_eq!(headers["access-control-allow-origin"], "http://b.example:8080");
        assert_eq!(headers["vary"], "Origin");
        let mut headers = HeaderMap::new();
        policy.apply(Some(&HeaderValue::from_static("https://evil.example")), &mut headers);
        assert!(!headers.contains_key("access-control-allow-origin"));
    }

    #[test]
    fn rejects_non_origins() {
        for bad in ["", " , ", "example.com", "https://a.example/", "ftp://x"] {
            assert!(CorsPolicy::parse(bad).is_err(), "{bad:?}");
        }
    }
}
