//! HTTP/1.1 requests from this node to the other processes of a cluster: etcd's JSON
//! gateway and the other ds nodes (forwarded requests).
//!
//! Connections are kept alive and reused per `host:port`: a connection goes back to its
//! pool only once the answer it carried was read to its end (see [`Pooled`]); one dropped
//! halfway is closed, so no answer's leftovers reach the next request. At most
//! [`IDLE_PER_PEER_MAX`] idle connections are kept per peer. The pool's lock is taken once
//! per forwarded request, never on a request this node serves itself.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// The body of a request this node sends.
pub(crate) type OutBody = BoxBody<Bytes, hyper::Error>;

/// Most idle connections kept to one peer.
const IDLE_PER_PEER_MAX: usize = 256;

/// Kept-alive connections to peers, by `host:port`.
#[derive(Default)]
pub(crate) struct Peers {
    idle: Mutex<HashMap<String, Vec<SendRequest<OutBody>>>>,
}

/// Why a request to a peer got no answer.
#[derive(Debug)]
pub(crate) enum PeerError {
    /// No byte of the request reached the peer: no connection could be made (refused,
    /// unreachable, or not within the timeout), or the connection closed before the
    /// request was written.
    NotSent(String),
    /// The connection failed after the request was (at least in part) written and before
    /// the answer's head arrived: the peer may have acted on it.
    Broken(hyper::Error),
}

impl std::fmt::Display for PeerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerError::NotSent(error) => write!(f, "not sent: {error}"),
            PeerError::Broken(error) => write!(f, "broken after the request was sent: {error}"),
        }
    }
}

impl Peers {
    /// Sends `request` to `authority` (`host:port`) and returns the answer's head; its body
    /// streams from the peer as it is read.
    ///
    /// A kept-alive connection the peer closed while idle is found out only when a request
    /// is handed to it; a request it gives back unsent goes once more on a new connection.
    pub(crate) async fn send(
        self: &Arc<Self>,
        authority: &str,
        mut request: Request<OutBody>,
        connect_timeout: Duration,
    ) -> Result<Response<Pooled>, PeerError> {
        let mut idle = self.idle_sender(authority);
        let (sender, response) = loop {
            let reused = idle.is_some();
            let mut sender = match idle.take() {
                Some(sender) => sender,
                None => connect(authority, connect_timeout).await?,
            };
            match sender.try_send_request(request).await {
                Ok(response) => break (sender, response),
                Err(mut failed) => match failed.take_message() {
                    Some(unsent) if reused => request = unsent,
                    Some(_) => return Err(PeerError::NotSent(failed.into_error().to_string())),
                    None => return Err(PeerError::Broken(failed.into_error())),
                },
            }
        };
        // An answer without a body (204, HEAD, length 0) frees its connection at once: its
        // body may never be polled.
        if response.body().is_end_stream() {
            self.give_back(authority.to_string(), sender);
            return Ok(response.map(|body| Pooled { body, home: None }));
        }
        let peers = Arc::clone(self);
        let key = authority.to_string();
        Ok(response.map(|body| Pooled { body, home: Some((sender, peers, key)) }))
    }

    fn idle_sender(&self, authority: &str) -> Option<SendRequest<OutBody>> {
        let mut idle = self.idle.lock().expect("peer pool lock");
        let senders = idle.get_mut(authority)?;
        while let Some(sender) = senders.pop() {
            if sender.is_ready() {
                return Some(sender);
            }
        }
        None
    }

    fn give_back(&self, authority: String, sender: SendRequest<OutBody>) {
        let mut idle = self.idle.lock().expect("peer pool lock");
        let senders = idle.entry(authority).or_default();
        if senders.len() < IDLE_PER_PEER_MAX {
            senders.push(sender);
        }
    }
}

async fn connect(authority: &str, timeout: Duration) -> Result<SendRequest<OutBody>, PeerError> {
    let connecting = TcpStream::connect(authority);
    let not_sent = |error: &dyn std::fmt::Display| PeerError::NotSent(format!("cannot connect: {error}"));
    let stream = match tokio::time::timeout(timeout, connecting).await {
        Ok(stream) => stream.map_err(|error| not_sent(&error))?,
        Err(_) => return Err(not_sent(&"no connection within the timeout")),
    };
    stream.set_nodelay(true).map_err(|error| not_sent(&error))?;
    let (sender, connection) =
        http1::handshake(TokioIo::new(stream)).await.map_err(|error| not_sent(&error))?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "connection to a peer ended");
        }
    });
    Ok(sender)
}

/// An answer's body from a peer; its connection returns to the pool when the body ends.
pub(crate) struct Pooled {
    body: Incoming,
    home: Option<(SendRequest<OutBody>, Arc<Peers>, String)>,
}

impl http_body::Body for Pooled {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            if let Some((sender, peers, key)) = self.home.take() {
                peers.give_back(key, sender);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
