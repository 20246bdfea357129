//! The scenarios, one module each, and what their set-up shares.
//!
//! - `append`: closed-loop appends over keep-alive connections.
//! - `read`: catch-up reads of a pre-filled stream, following `Stream-Next-Offset`.
//! - `fanout`: many SSE subscribers on one stream, delivery latency and losses.
//! - `longpoll`: long-polling readers following a writer, wake latency and losses.
//! - `idle`: connections that appended once and wait: server memory per idle producer.
//! - `streams`: stream creation rate and server memory per stream.
//! - `fork`: fork creation rate against plain creation, and catch-up of a fork against its
//!   source.
//! - `mixed`: writers, catch-up readers and live readers at once.
//! - `healthz`: the generator's own ceiling against a trivial endpoint.

pub mod append;
pub mod fanout;
pub mod fork;
pub mod healthz;
pub mod idle;
pub mod longpoll;
pub mod mixed;
pub mod read;
pub mod streams;

use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;

use crate::http::Connection;
use crate::run::{Clock, Live, Tally};
use crate::target::Target;

/// A suffix that keeps one run's stream names apart from another's.
pub fn unique_suffix() -> String {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{nanos:x}")
}

/// Creates stream `path` (201 expected).
pub async fn create(connection: &mut Connection, path: &str, content_type: &str) -> Result<(), String> {
    let reply = connection
        .send(Method::PUT, path, &[("content-type", content_type)], Bytes::new())
        .await
        .map_err(|e| format!("create {path}: {e}"))?;
    match reply.status {
        201 => Ok(()),
        status => Err(format!("create {path}: status {status}")),
    }
}

/// Appends `body` to `path` until `total` bytes are stored.
pub async fn fill(
    connection: &mut Connection,
    path: &str,
    content_type: &str,
    body: Bytes,
    total: u64,
) -> Result<(), String> {
    let mut stored = 0;
    while stored < total {
        let reply = connection
            .send(Method::POST, path, &[("content-type", content_type)], body.clone())
            .await
            .map_err(|e| format!("fill {path}: {e}"))?;
        if reply.status != 204 {
            return Err(format!("fill {path}: status {}", reply.status));
        }
        stored += body.len() as u64;
    }
    Ok(())
}

/// A payload of `bytes` bytes (at least its header) that carries the time it was sent, in
/// microseconds since `base`: `"{micros} xxx…"`.
pub fn timed_payload(base: Instant, bytes: usize) -> Bytes {
    let mut payload = format!("{} ", base.elapsed().as_micros());
    if payload.len() < bytes {
        payload.extend(std::iter::repeat_n('x', bytes - payload.len()));
    }
    Bytes::from(payload)
}

/// The send time a [`timed_payload`] carries, if `text` starts with one.
pub fn sent_micros(text: &str) -> Option<u64> {
    text.split(' ').next()?.parse().ok()
}

/// The field after an event's send time (fan-out, long-poll): sent in the warm-up (counted
/// for losses, not timed) or in the measured phase. Events flow through the warm-up so the
/// first deliveries after the readers connected, slower on both ends, fall outside the
/// measured phase.
pub const PHASE_WARMUP: &str = "w";
pub const PHASE_MEASURED: &str = "m";

/// The phase field for an event sent now.
pub fn phase_now(clock: &Clock) -> &'static str {
    if Instant::now() < clock.measure_from {
        PHASE_WARMUP
    } else {
        PHASE_MEASURED
    }
}

/// An event's send time and phase, as [`sent_micros`] and [`is_measured`] read them.
pub fn phased_time(base: Instant, phase: &str) -> String {
    format!("{} {phase}", base.elapsed().as_micros())
}

/// Whether an event's text (send time, then phase) was sent in the measured phase.
pub fn is_measured(text: &str) -> bool {
    text.split(' ').nth(1) == Some(PHASE_MEASURED)
}

/// Opens a connection, retrying briefly (a worker whose connection broke keeps going).
pub async fn reconnect(target: &Target) -> Option<Connection> {
    for _ in 0..50 {
        if let Ok(connection) = Connection::open(target).await {
            return Some(connection);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// After a request failed: counts it and replaces the connection (an error when the server
/// stays unreachable).
pub async fn recover(
    tally: &mut Tally,
    clock: &Clock,
    live: &Live,
    connection: &mut Connection,
    target: &Target,
) -> Result<(), String> {
    tally.failed(clock, live);
    *connection = reconnect(target).await.ok_or("the server went away")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timed_payloads_carry_their_send_time_and_size() {
        let base = Instant::now() - Duration::from_millis(5);
        let payload = timed_payload(base, 64);
        assert_eq!(payload.len(), 64);
        let sent = sent_micros(std::str::from_utf8(&payload).unwrap()).unwrap();
        assert!(sent >= 5_000, "{sent}");
        assert_eq!(sent_micros("garbage"), None);
    }

    #[test]
    fn only_events_of_the_measured_phase_are_timed() {
        assert!(is_measured(&format!("1234 {PHASE_MEASURED}")));
        assert!(is_measured(&format!("1234 {PHASE_MEASURED} xxxx")));
        assert!(!is_measured(&format!("1234 {PHASE_WARMUP} xxxx")));
        assert!(!is_measured("1234"), "an event without a phase is not timed");
        let warming = Clock {
            start: Instant::now(),
            measure_from: Instant::now() + Duration::from_secs(60),
            end: Instant::now() + Duration::from_secs(70),
        };
        assert_eq!(phase_now(&warming), PHASE_WARMUP);
        let measuring = Clock { measure_from: Instant::now(), ..warming };
        assert_eq!(phase_now(&measuring), PHASE_MEASURED);
    }
}
