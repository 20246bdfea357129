//! PUT /v1/stream/{name}: create a stream or a fork, or confirm an identical one exists.
//!
//! 201 with `Location` when created, 200 when a stream with the same content type, TTL,
//! expiry, closed state and fork origin exists, 409 when one exists with anything else. An
//! optional body becomes the first messages (for JSON streams `[]` means none).
//!
//! With `Stream-Forked-From: /v1/stream/{source}` the stream is a fork: it starts with the
//! source's messages up to `Stream-Fork-Offset` (default: the source's tail) plus
//! `Stream-Fork-Sub-Offset` units (messages in JSON mode, bytes otherwise). Its content type,
//! when omitted, is the source's; its TTL and expiry, when both are omitted, too.

use ds_engine::ContentType;
use ds_engine::{CreateRequest, ForkRequest, Offset, StartAt, StreamConfig, StreamName};
use hyper::header::{CONTENT_TYPE, LOCATION};
use hyper::{Request, Response, StatusCode};

use super::{op_problem, payload_of};
use crate::app::App;
use crate::http::headers::{self, STREAM_CLOSED, STREAM_NEXT_OFFSET};
use crate::http::problem::Problem;
use crate::http::request_body::{self, RequestBody};
use crate::http::response::{response, set, Body};
use crate::metrics::Metrics;

pub(crate) async fn create(
    app: &App,
    name: StreamName,
    request: Request<RequestBody>,
) -> Result<Response<Body>, Problem> {
    let (parts, body) = request.into_parts();
    let head = judge_head(&parts.headers).and_then(|(config, closed)| {
        let fork = judge_fork(&parts.headers)?;
        Ok((inherit_content_type(app, config, fork.as_ref(), &parts.headers)?, closed, fork))
    });
    let (config, closed, fork) = match head {
        Ok(head) => head,
        Err(problem) => return Err(request_body::refuse_unread(body, &parts.headers, problem).await),
    };
    let (body, _held) = request_body::read(body, &parts.headers, &app.body).await?;
    let body_bytes = body.len() as u64;
    let initial = payload_of(&config.content_type, body, true)?;
    let create = CreateRequest { name, config, initial, closed };
    let outcome = match fork {
        None => app.engine.create(create).await,
        Some(fork) => {
            let inherit_expiry = create.config.ttl_secs.is_none() && create.config.expires_at_ms.is_none();
            let ForkHead { source, offset, sub_offset } = fork;
            app.engine.fork(ForkRequest { create, inherit_expiry, source, offset, sub_offset }).await
        }
    }
    .map_err(op_problem)?;

    if outcome.created {
        Metrics::add(&app.metrics.append_bytes, body_bytes);
    }
    let status = if outcome.created { StatusCode::CREATED } else { StatusCode::OK };
    let mut reply = response(status, Body::Empty);
    let headers = reply.headers_mut();
    set(headers, CONTENT_TYPE, outcome.content_type.as_str());
    headers.insert(STREAM_NEXT_OFFSET, headers::offset_value(outcome.tail));
    if outcome.closed {
        headers.insert(STREAM_CLOSED, headers::TRUE);
    }
    if outcome.created {
        let host = headers::authority(&parts.headers, &parts.uri).filter(|h| is_authority(h));
        let location = format!("{}://{}{}", app.scheme, host.unwrap_or("localhost"), parts.uri.path());
        set(headers, LOCATION, &location);
    }
    Ok(reply)
}

/// The stream's configuration and closed flag, as the headers give them.
fn judge_head(headers: &hyper::HeaderMap) -> Result<(StreamConfig, bool), Problem> {
    let content_type = headers::content_type(headers)?.unwrap_or_else(ContentType::default_type);
    let ttl_secs = headers::ttl_secs(headers)?;
    let expires_at_ms = headers::expires_at_ms(headers)?;
    if ttl_secs.is_some() && expires_at_ms.is_some() {
        return Err(Problem::bad_request("ttl-and-expiry", "give Stream-TTL or Stream-Expires-At, not both"));
    }
    let closed = headers::stream_closed(headers)?;
    Ok((StreamConfig { content_type, ttl_secs, expires_at_ms }, closed))
}

/// What the fork headers ask for.
pub(crate) struct ForkHead {
    source: StreamName,
    offset: Option<Offset>,
    sub_offset: u64,
}

/// The fork headers, if the request is for a fork; 400 for any of them malformed, or given
/// without what they refine.
pub(crate) fn judge_fork(headers: &hyper::HeaderMap) -> Result<Option<ForkHead>, Problem> {
    let text = |name: hyper::header::HeaderName| {
        headers.get(&name).map(|value: &hyper::header::HeaderValue| {
            value.to_str().map_err(|_| Problem::bad_request("invalid-fork", format!("{name} is not text")))
        })
    };
    let source = text(headers::STREAM_FORKED_FROM).transpose()?;
    let offset = text(headers::STREAM_FORK_OFFSET).transpose()?;
    let sub_offset = text(headers::STREAM_FORK_SUB_OFFSET).transpose()?;
    let Some(source) = source else {
        return match offset.is_some() || sub_offset.is_some() {
            true => Err(Problem::bad_request("invalid-fork", "fork offsets need Stream-Forked-From")),
            false => Ok(None),
        };
    };
    let source = source
        .strip_prefix(super::STREAM_PREFIX)
        .ok_or_else(|| {
            Problem::bad_request("invalid-fork", "Stream-Forked-From must be a path under /v1/stream/")
        })
        .and_then(|raw| {
            StreamName::from_path(raw)
                .map_err(|error| Problem::bad_request("invalid-fork", error.to_string()))
        })?;
    let sub_offset = sub_offset.map(parse_sub_offset).transpose()?.unwrap_or(0);
    if sub_offset > 0 && offset.is_none() {
        return Err(Problem::bad_request("invalid-fork", "Stream-Fork-Sub-Offset needs Stream-Fork-Offset"));
    }
    let offset = offset.map(parse_fork_offset).transpose()?.flatten();
    Ok(Some(ForkHead { source, offset, sub_offset }))
}

/// `Stream-Fork-Offset`: an offset, or a read's sentinels — `-1` the source's start, `now`
/// its tail (`None`: as when the header is absent).
fn parse_fork_offset(text: &str) -> Result<Option<Offset>, Problem> {
    match StartAt::parse(text) {
        Ok(StartAt::Beginning) => Ok(Some(Offset::ZERO)),
        Ok(StartAt::Tail) => Ok(None),
        Ok(StartAt::At(offset)) => Ok(Some(offset)),
        Err(error) => Err(Problem::bad_request("invalid-fork", format!("Stream-Fork-Offset: {error}"))),
    }
}

/// A non-negative decimal integer without sign or leading zeros, at most 2^53 - 1.
fn parse_sub_offset(text: &str) -> Result<u64, Problem> {
    let canonical = !text.is_empty()
        && text.len() <= 16
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    let value = canonical.then(|| text.parse::<u64>().ok()).flatten().filter(|n| *n < 1 << 53);
    value.ok_or_else(|| {
        Problem::bad_request("invalid-fork", "Stream-Fork-Sub-Offset must be a non-negative integer")
    })
}

/// A fork's content type when the request names none: its source's (a missing source is
/// left to the engine's 404).
fn inherit_content_type(
    app: &App,
    mut config: StreamConfig,
    fork: Option<&ForkHead>,
    headers: &hyper::HeaderMap,
) -> Result<StreamConfig, Problem> {
    let Some(fork) = fork else {
        return Ok(config);
    };
    if headers.get(CONTENT_TYPE).is_none() {
        if let Some(source) = app.engine.open(&fork.source) {
            config.content_type = source.config().content_type.clone();
        }
    }
    Ok(config)
}

/// Whether `host` is a plain `host[:port]` (a name, an IPv4 or a bracketed IPv6 address):
/// anything else in `Host` never reaches `Location`, where it could point a client
/// elsewhere (`evil.example/phish?`).
fn is_authority(host: &str) -> bool {
    let (name, port) = match host.rsplit_once(':') {
        Some((name, _)) if !name.ends_with(']') && name.contains(':') => (host, None),
        Some((name, port)) => (name, Some(port)),
        None => (host, None),
    };
    let port_ok = port
        .is_none_or(|port| !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit()));
    let name_ok = match name.strip_prefix('[').and_then(|inner| inner.strip_suffix(']')) {
        Some(address) => {
            !address.is_empty() && address.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        }
        None => {
            !name.is_empty()
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
        }
    };
    port_ok && name_ok
}

#[cfg(test)]
mod tests {
    use super::is_authority;

    #[test]
    fn only_plain_authorities_reach_location() {
        for good in
            ["localhost", "example.com:8080", "10.0.0.1:4437", "[::1]:4437", "[fe80::1]", "a_b.example"]
        {
            assert!(is_authority(good), "{good}");
        }
        for bad in ["evil.example/phish?", "a@b", "x:y", "example.com:", "[::1", "", "a b", "host:123456"] {
            assert!(!is_authority(bad), "{bad}");
        }
    }
}
