//! Keep-alive HTTP/1.1 connections to the server under test.
//!
//! One [`Connection`] is one TCP connection driven by hyper's client connection API; a
//! scenario worker owns one and sends requests on it one after another.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::target::Target;

/// A complete response.
pub struct Reply {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    /// The body (empty when it was only counted, [`Connection::send_counting`]).
    pub body: Bytes,
    /// Bytes the body had.
    pub body_bytes: u64,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

pub struct Connection {
    sender: SendRequest<Full<Bytes>>,
    authority: String,
    authorization: Option<String>,
}

impl Connection {
    pub async fn open(target: &Target) -> std::io::Result<Connection> {
        let stream = TcpStream::connect(target.addr).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) =
            http1::handshake(TokioIo::new(stream)).await.map_err(std::io::Error::other)?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let authorization = target.authorization.clone();
        Ok(Connection { sender, authority: target.authority.clone(), authorization })
    }

    /// Sends a request and starts the response; the body is left to the caller.
    pub async fn start(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Response<Incoming>, hyper::Error> {
        let mut request = Request::builder().method(method).uri(path).header("host", &self.authority);
        if let Some(authorization) = &self.authorization {
            request = request.header("authorization", authorization);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Full::new(body)).expect("valid request parts");
        self.sender.ready().await?;
        self.sender.send_request(request).await
    }

    /// Sends a request and reads the whole response.
    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Reply, hyper::Error> {
        let response = self.start(method, path, headers, body).await?;
        let status = response.status().as_u16();
        let (parts, body) = response.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok(Reply { status, headers: parts.headers, body_bytes: body.len() as u64, body })
    }

    /// Sends a request and reads the whole response, counting its body's bytes as they
    /// arrive instead of keeping them: a reader that only measures pays no copy or
    /// allocation per answer, however large the server makes its answers.
    pub async fn send_counting(&mut self, method: Method, path: &str) -> Result<Reply, hyper::Error> {
        let response = self.start(method, path, &[], Bytes::new()).await?;
        let status = response.status().as_u16();
        let (parts, mut body) = response.into_parts();
        let mut body_bytes = 0u64;
        while let Some(frame) = body.frame().await {
            if let Some(data) = frame?.data_ref() {
                body_bytes += data.len() as u64;
            }
        }
        Ok(Reply { status, headers: parts.headers, body: Bytes::new(), body_bytes })
    }
}
