//! One HTTP behaviour, two fronts: the same generated request sequences go to a server whose
//! plain connections start in the bare front (ds's own HTTP/1.1) and to one that gives every
//! connection to hyper (`DS_SERVER__BARE_FRONT=false`), and every answer must be the same —
//! status, the headers that carry meaning, body.
//!
//! The requests are seeded: creates, appends, catch-up reads, HEADs, deletes and preflights
//! on a few streams, with the protocol's headers drawn from good and bad values, bodies
//! plain, JSON, malformed, empty and past the bare front's 64 KiB, framed by length, chunked,
//! or wrongly; malformed heads (a bad request line, a header hyper refuses, conflicting
//! lengths, a transfer coding that is not chunked, HTTP/1.0); and up to three requests
//! written at once (pipelined). A malformed head is answered by whichever front read it (the
//! bare front, or the gate in front of hyper), so each answers it the same way. Both servers
//! run in memory mode from empty, so their streams go through the same states.
//! `DS_TWO_FRONTS_SEED` replays a seed, `DS_TWO_FRONTS_REQUESTS` sets the count.

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use ds_tests::client::read_response;
use ds_tests::rng::Rng;
use ds_tests::{Response, Server};

const REQUESTS_DEFAULT: u64 = 1500;
const NAMES: [&str; 4] = ["a", "b", "j", "x/y"];
/// The headers whose values both fronts must agree on (`date` and the rest that differ by
/// the moment are left out).
const COMPARED_HEADERS: [&str; 13] = [
    "content-type",
    "stream-next-offset",
    "stream-up-to-date",
    "stream-closed",
    "etag",
    "location",
    "cache-control",
    "x-content-type-options",
    "allow",
    "retry-after",
    "stream-ttl",
    "stream-expires-at",
    "producer-epoch",
];

#[test]
fn both_fronts_answer_every_request_alike() {
    let seed = setting("DS_TWO_FRONTS_SEED", 20261202);
    let requests = setting("DS_TWO_FRONTS_REQUESTS", REQUESTS_DEFAULT);
    let bare = Server::start_in("memory", &[("DS_SERVER__BARE_FRONT", "true")]);
    let hyper = Server::start_in("memory", &[("DS_SERVER__BARE_FRONT", "false")]);
    let mut rng = Rng::new(seed);
    let mut fronts = [Front::new(bare.addr), Front::new(hyper.addr)];
    let mut sent = 0;
    let mut statuses = std::collections::BTreeMap::new();
    while sent < requests {
        let batch: Vec<Request> = (0..1 + rng.below(3)).map(|_| request(&mut rng)).collect();
        let answers = fronts.each_mut().map(|front| front.exchange(&batch));
        for answer in &answers[0] {
            *statuses.entry(answer.as_ref().map_or(0, |answer| answer.status)).or_insert(0) += 1;
        }
        for (index, (with_bare, with_hyper)) in answers[0].iter().zip(&answers[1]).enumerate() {
            let shown = batch[index].shown();
            assert_eq!(
                summary(with_bare),
                summary(with_hyper),
                "DS_TWO_FRONTS_SEED={seed}, request {}: {shown}\nbare front log:\n{}\nhyper log:\n{}",
                sent + index as u64,
                bare.log(),
                hyper.log()
            );
        }
        sent += batch.len() as u64;
    }
    eprintln!("two fronts: {sent} requests answered alike (seed {seed}), by status (0: none): {statuses:?}");
}

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

/// What must be the same of an answer: its status, the headers that carry meaning, its body.
type Summary = (u16, Vec<(String, String)>, Vec<u8>);

/// The summary of an answer (`None`: no answer at all, the connection closed).
fn summary(answer: &Option<Response>) -> Option<Summary> {
    let answer = answer.as_ref()?;
    let headers = answer
        .headers
        .iter()
        .filter(|(name, _)| COMPARED_HEADERS.contains(&name.as_str()))
        .cloned()
        .collect();
    Some((answer.status, headers, answer.body.clone()))
}

/// One request as written, and how its answer is read.
struct Request {
    bytes: Vec<u8>,
    head_request: bool,
    /// Bytes after its body that the server reads as a next request, or a head the server
    /// refuses: nothing after it is sent on its connection.
    ends_connection: bool,
}

impl Request {
    fn shown(&self) -> String {
        String::from_utf8_lossy(&self.bytes[..self.bytes.len().min(400)]).into_owned()
    }
}

/// One server's side: a keep-alive connection, opened again when the last one ended.
struct Front {
    addr: SocketAddr,
    connection: Option<(TcpStream, BufReader<TcpStream>)>,
}

impl Front {
    fn new(addr: SocketAddr) -> Front {
        Front { addr, connection: None }
    }

    /// Writes the batch at once (pipelined) and reads an answer for each, in order; a
    /// request whose answer never came is `None`.
    fn exchange(&mut self, batch: &[Request]) -> Vec<Option<Response>> {
        let (stream, reader) = self.connection.get_or_insert_with(|| {
            let stream = TcpStream::connect(self.addr).expect("connect");
            stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
            let reader = BufReader::new(stream.try_clone().expect("clone"));
            (stream, reader)
        });
        let bytes: Vec<u8> = batch.iter().flat_map(|request| request.bytes.clone()).collect();
        let written = stream.write_all(&bytes).is_ok();
        let mut answers = Vec::new();
        let mut open = written;
        for request in batch {
            let answer = if open { read_response(reader, request.head_request).ok() } else { None };
            let closes = answer.as_ref().is_none_or(|answer| {
                answer.header("connection").is_some_and(|value| value.eq_ignore_ascii_case("close"))
            });
            open &= !closes && !request.ends_connection;
            answers.push(answer);
        }
        if !open || batch.iter().any(|request| request.ends_connection) {
            self.connection = None;
        }
        answers
    }
}

/// One generated request.
fn request(rng: &mut Rng) -> Request {
    if rng.below(8) == 0 {
        return malformed(rng);
    }
    let method = *rng.pick(&["PUT", "POST", "POST", "GET", "GET", "HEAD", "DELETE", "OPTIONS"]);
    let name = *rng.pick(&NAMES);
    let json = name == "j";
    let query = match (method, rng.below(4)) {
        ("GET", 0) => "?offset=-1",
        ("GET", 1) => "?offset=0000000000000001_0000000000000003",
        ("GET", 2) => "?offset=banana",
        _ => "",
    };
    let mut head = format!("{method} /v1/stream/{name}{query} HTTP/1.1\r\nHost: h\r\n");
    for _ in 0..rng.below(4) {
        let (header, values) = *rng.pick(&HEADER_VALUES);
        head.push_str(&format!("{header}: {}\r\n", rng.pick(values)));
    }
    if method == "PUT" || method == "POST" {
        let content_type = if json { "application/json" } else { "text/plain" };
        head.push_str(&format!("Content-Type: {content_type}\r\n"));
    }
    let body = match method {
        "PUT" | "POST" => body(rng, json),
        _ if rng.below(10) == 0 => b"stray".to_vec(),
        _ => Vec::new(),
    };
    let (framing, framed, ends_connection) = frame(rng, &body);
    let mut bytes = format!("{head}{framing}\r\n").into_bytes();
    bytes.extend_from_slice(&framed);
    Request { bytes, head_request: method == "HEAD", ends_connection }
}

/// Protocol headers, each with good values and bad ones.
const HEADER_VALUES: [(&str, &[&str]); 8] = [
    ("Producer-Id", &["w1", "w2", ""]),
    ("Producer-Epoch", &["0", "1", "-1", "x"]),
    ("Producer-Seq", &["0", "1", "2", "99999999999999999999"]),
    ("Stream-Seq", &["0001", "0002", "0000"]),
    ("Stream-Closed", &["true", "false"]),
    ("Stream-TTL", &["3600", "0", "abc"]),
    ("If-None-Match", &["\"-1:0000000000000001_0000000000000003\"", "*"]),
    ("Origin", &["https://example.com"]),
];

fn body(rng: &mut Rng, json: bool) -> Vec<u8> {
    let plain: [&[u8]; 4] = [b"", b"hello", b"[1,2]", b"\xff\xfe"];
    let json_bodies: [&[u8]; 5] = [b"{\"a\":1}", b"[{\"b\":2},3]", b"[]", b"[1,", b"\"s\""];
    match rng.below(10) {
        0 => vec![b'z'; 70_000],
        1..=5 if json => rng.pick(&json_bodies).to_vec(),
        _ => rng.pick(&plain).to_vec(),
    }
}

/// The framing headers and the body as sent; whether bytes are left after the request.
fn frame(rng: &mut Rng, body: &[u8]) -> (String, Vec<u8>, bool) {
    match rng.below(12) {
        0..=8 => (format!("Content-Length: {}\r\n", body.len()), body.to_vec(), false),
        9 | 10 => {
            let mut framed = Vec::new();
            for piece in body.chunks(1 + rng.below(30_000) as usize) {
                framed.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                framed.extend_from_slice(piece);
                framed.extend_from_slice(b"\r\n");
            }
            framed.extend_from_slice(b"0\r\n\r\n");
            ("Transfer-Encoding: chunked\r\n".into(), framed, false)
        }
        _ => (format!("Content-Length: {}\r\n", body.len() + 7), [body, b"PADDING"].concat(), true),
    }
}

/// A head one of hyper's rules refuses, or one at the edge of them.
fn malformed(rng: &mut Rng) -> Request {
    let heads: [&[u8]; 9] = [
        b"NOT A REQUEST\r\n\r\n",
        b"GET /v1/stream/a HTTP/1.1\r\nBad Name: x\r\n\r\n",
        b"POST /v1/stream/a HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
        b"POST /v1/stream/a HTTP/1.1\r\nContent-Length: +5\r\n\r\nhello",
        b"POST /v1/stream/a HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"POST /v1/stream/a HTTP/1.1\r\nContent-Type: text/plain\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        b"GET /v1/stream/a HTTP/1.0\r\n\r\n",
        b"GET /v1/stream/a HTTP/2.0\r\n\r\n",
        b"GET /v1/stream/a\x01 HTTP/1.1\r\n\r\n",
    ];
    let bytes = rng.pick(&heads).to_vec();
    Request { bytes, head_request: false, ends_connection: true }
}
