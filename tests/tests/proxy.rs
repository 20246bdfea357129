//! The shipped HAProxy configuration in front of `ds-server`, end to end: tokens are
//! checked by the proxy, the verified subject reaches the service (and its access log),
//! a client's own `X-JWT-Sub` never does, `/healthz` is open, and live reads pass promptly.
//!
//! `haproxy` is found or installed by `.ci/setup.sh`; the tests fail, saying why, without it.

use std::time::{Duration, Instant};

use ds_tests::haproxy::Proxy;
use ds_tests::jwt::{mint, now_secs, unsigned, valid_claims, TRUSTED_KEY, UNTRUSTED_KEY};
use ds_tests::{Client, Server};

fn start() -> (Server, Proxy) {
    Proxy::require();
    let server = Server::start(&[]);
    let proxy = Proxy::start("backend-single.cfg", &[("DS_NODE", server.addr.to_string())]);
    (server, proxy)
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// Access log lines of the server that mention `path`, once `count` of them are there (a
/// worker writes its access lines when its turn ends, which can be just after the client
/// has its answer); what is there after 10 s otherwise.
fn access_lines_once(server: &Server, path: &str, count: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let lines = access_lines(server, path);
        if lines.len() >= count || std::time::Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Access log lines of the server that mention `path`.
fn access_lines(server: &Server, path: &str) -> Vec<String> {
    let needle = format!("path={path} ");
    server
        .log()
        .lines()
        .filter(|line| line.contains("ds::access") && line.contains(&needle))
        .map(String::from)
        .collect()
}

#[test]
fn a_valid_token_is_served_and_its_subject_reaches_the_service() {
    let (server, proxy) = start();
    let client = proxy.client();
    let token = bearer(&mint(&valid_claims("alice"), TRUSTED_KEY));
    let path = "/v1/stream/proxy-valid";
    let created = client.send("PUT", path, &[("Authorization", &token), ("Content-Type", "text/plain")], b"");
    assert_eq!(created.status, 201, "{}", created.text());
    let spoofed =
        [("Authorization", token.as_str()), ("Content-Type", "text/plain"), ("X-JWT-Sub", "mallory")];
    assert_eq!(client.send("POST", path, &spoofed, b"hello").status, 204);
    let read = client.send("GET", &format!("{path}?offset=-1"), &[("Authorization", &token)], b"");
    assert_eq!((read.status, read.text().as_str()), (200, "hello"));

    let lines = access_lines_once(&server, path, 3);
    assert_eq!(lines.len(), 3, "one access line per request: {lines:#?}");
    assert!(lines.iter().all(|line| line.contains("subject=alice")), "{lines:#?}");
    assert!(!server.log().contains("mallory"), "a client's own X-JWT-Sub never reaches the service");
}

#[test]
fn invalid_or_missing_tokens_get_401_from_the_proxy() {
    let (server, proxy) = start();
    let client = proxy.client();
    let claims_with = |key: &str, value: serde_json::Value| {
        let mut claims = valid_claims("eve");
        claims[key] = value;
        claims
    };
    let mut no_subject = valid_claims("eve");
    no_subject.as_object_mut().unwrap().remove("sub");
    let mut no_expiry = valid_claims("eve");
    no_expiry.as_object_mut().unwrap().remove("exp");
    let cases: Vec<(&str, Option<String>, &str)> = vec![
        ("missing", None, "missing-token"),
        ("not a JWT", Some("not-a-token".into()), "unsupported-algorithm"),
        ("expired", Some(mint(&claims_with("exp", (now_secs() - 60).into()), TRUSTED_KEY)), "expired"),
        (
            "wrong issuer",
            Some(mint(&claims_with("iss", "https://evil.test".into()), TRUSTED_KEY)),
            "wrong-issuer",
        ),
        ("wrong audience", Some(mint(&claims_with("aud", "other".into()), TRUSTED_KEY)), "wrong-audience"),
        ("foreign key", Some(mint(&valid_claims("eve"), UNTRUSTED_KEY)), "bad-signature"),
        ("alg none", Some(unsigned(&valid_claims("eve"))), "unsupported-algorithm"),
        ("no subject", Some(mint(&no_subject, TRUSTED_KEY)), "missing-subject"),
        ("no expiry", Some(mint(&no_expiry, TRUSTED_KEY)), "missing-expiry"),
    ];
    let path = "/v1/stream/proxy-refused";
    for (what, token, reason) in cases {
        let authorization = token.map(|token| bearer(&token));
        let mut headers = vec![("Content-Type", "text/plain"), ("X-JWT-Sub", "alice")];
        if let Some(authorization) = &authorization {
            headers.push(("Authorization", authorization));
        }
        let response = client.send("PUT", path, &headers, b"");
        assert_eq!(response.status, 401, "{what}: {}", response.text());
        assert_eq!(response.header("content-type"), Some("application/problem+json"), "{what}");
        assert!(response.header("www-authenticate").is_some_and(|v| v.starts_with("Bearer")), "{what}");
        assert_eq!(response.json()["detail"], reason, "{what}");
    }
    assert_eq!(Client::new(server.addr).head(path).status, 404, "nothing was created");
    // The direct HEAD's line comes after any line a refused request could have left.
    let lines = access_lines_once(&server, path, 1);
    assert_eq!(lines.len(), 1, "no refused request reached the service: {lines:#?}");
    assert!(lines[0].contains("method=HEAD"), "{lines:#?}");
}

#[test]
fn health_is_open_and_metrics_stay_internal() {
    let (server, proxy) = start();
    let health = proxy.client().get("/healthz");
    assert_eq!((health.status, health.text().as_str()), (200, "ok"));
    let token = bearer(&mint(&valid_claims("alice"), TRUSTED_KEY));
    assert_eq!(proxy.client().send("GET", "/metrics", &[("Authorization", &token)], b"").status, 404);
    assert_eq!(Client::new(server.addr).get("/metrics").status, 200, "scraped on the node itself");
}

#[test]
fn live_reads_pass_through_promptly() {
    let (_server, proxy) = start();
    let token = bearer(&mint(&valid_claims("reader"), TRUSTED_KEY));
    let auth = [("Authorization", token.as_str())];
    let client = proxy.client();
    let path = "/v1/stream/proxy-live";
    assert_eq!(client.send("PUT", path, &[auth[0], ("Content-Type", "text/plain")], b"").status, 201);

    let mut events = client.open_stream(&format!("{path}?offset=-1&live=sse"), &auth);
    assert_eq!(events.status, 200);
    events.read_until("\"upToDate\":true", Duration::from_secs(5));
    let mut delays = Vec::new();
    for index in 0..10 {
        let message = format!("event-{index}");
        let sent = Instant::now();
        assert_eq!(
            client.send("POST", path, &[auth[0], ("Content-Type", "text/plain")], message.as_bytes()).status,
            204
        );
        let text = events.read_until(&format!("data:{message}\n"), Duration::from_secs(5));
        assert!(text.contains(&format!("data:{message}\n")), "event {index} arrived: {text}");
        delays.push(sent.elapsed());
    }
    delays.sort();
    eprintln!("SSE through the proxy: POST-to-event median {:?}, max {:?}", delays[5], delays[9]);
    // Without `option http-no-delay` every event waits ~200 ms in the proxy, and with it
    // hardly at all (docs/performance/code-choices.md); the bound sits between the two with
    // room for a loaded machine.
    assert!(delays[5] < Duration::from_millis(100), "events arrive as they are written: {delays:?}");

    let tail = client.send("HEAD", path, &auth, b"").next_offset();
    let waiter = std::thread::spawn({
        let token = token.clone();
        let url = format!("{path}?offset={tail}&live=long-poll");
        move || client.send("GET", &url, &[("Authorization", token.as_str())], b"")
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        proxy.client().send("POST", path, &[auth[0], ("Content-Type", "text/plain")], b"late").status,
        204
    );
    let woken = waiter.join().unwrap();
    assert_eq!((woken.status, woken.text().as_str()), (200, "late"));
}

#[test]
fn the_shipped_configuration_keeps_live_reads_open() {
    let config = std::fs::read_to_string(ds_tests::haproxy::config_file("haproxy.cfg")).unwrap();
    let settings: Vec<&str> = config.lines().map(str::trim).filter(|line| !line.starts_with('#')).collect();
    for needed in ["option http-no-delay", "timeout client 120s", "timeout server 120s"] {
        assert!(settings.contains(&needed), "haproxy.cfg has `{needed}`");
    }
    assert!(
        !config.contains("timeout queue") && !config.contains("timeout tarpit"),
        "no overall request limit"
    );
}
