//! A lean SSE response reader over its own TCP connection, for the fan-out scenario.
//!
//! hyper's client runs each connection as a task of its own and passes body chunks to the
//! reader through a channel: two task wakes per delivery. With a thousand subscribers on
//! one core that made the load generator cost more per delivery than the server under test,
//! so its own queue, not the server, set the measured tail latency. [`SseStream`] is one
//! task's worth of work: it writes the request, reads the response head, and decodes the
//! chunked body in place, handing out slices of its read buffer.
//!
//! On Linux it also asks the kernel to stamp each received packet (`SO_TIMESTAMPNS`) and
//! reads through `recvmsg`, so [`SseStream::arrived_at`] tells when the bytes reached the
//! socket, not when this process got round to reading them: with a thousand subscribers on
//! one core the generator reads the last of them milliseconds after the server sent them,
//! and that queue is the generator's, not the server's.

use std::time::SystemTime;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::target::Target;

/// Largest response head accepted.
const HEAD_BYTES_MAX: usize = 16 * 1024;
/// Read buffer: starts at this size, grows for long chunks up to [`BUFFER_BYTES_MAX`].
const BUFFER_BYTES: usize = 16 * 1024;
const BUFFER_BYTES_MAX: usize = 4 << 20;
/// Longest chunk-size line accepted (hex digits and any extensions).
const SIZE_LINE_BYTES_MAX: usize = 64;

/// Where the chunked decoder stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunking {
    SizeLine,
    /// This many data bytes of the current chunk are still to come.
    Data(usize),
    /// The CRLF after a chunk's data.
    DataEnd,
    Finished,
}

/// One SSE response being read.
pub struct SseStream {
    socket: TcpStream,
    buffer: Vec<u8>,
    /// Received bytes not yet decoded: `buffer[start..end]`.
    start: usize,
    end: usize,
    chunking: Chunking,
    /// Whether the kernel stamps received packets on this socket.
    stamped: bool,
    /// When the last bytes read reached the socket (the kernel's stamp of the last packet of
    /// that read), if stamped.
    arrived_at: Option<SystemTime>,
}

impl SseStream {
    /// Sends `GET path_and_query` and reads the head; errors unless it is a chunked 200.
    pub async fn open(target: &Target, path_and_query: &str) -> Result<SseStream, String> {
        let mut socket = TcpStream::connect(target.addr).await.map_err(|e| format!("connect: {e}"))?;
        socket.set_nodelay(true).map_err(|e| format!("TCP_NODELAY: {e}"))?;
        let stamped = receive_timestamps::enable(&socket);
        let authorization = target
            .authorization
            .as_ref()
            .map_or(String::new(), |value| format!("authorization: {value}\r\n"));
        let request = format!(
            "GET {path_and_query} HTTP/1.1\r\nhost: {}\r\naccept: text/event-stream\r\n{authorization}\r\n",
            target.authority
        );
        socket.write_all(request.as_bytes()).await.map_err(|e| format!("send request: {e}"))?;
        let mut stream = SseStream {
            socket,
            buffer: vec![0; BUFFER_BYTES],
            start: 0,
            end: 0,
            chunking: Chunking::SizeLine,
            stamped,
            arrived_at: None,
        };
        let head_end = loop {
            if let Some(at) = find(&stream.buffer[..stream.end], b"\r\n\r\n") {
                break at + 4;
            }
            if stream.end >= HEAD_BYTES_MAX || !stream.fill().await? {
                return Err("no complete response head".into());
            }
        };
        check_head(&stream.buffer[..head_end])?;
        stream.start = head_end;
        Ok(stream)
    }

    /// The next piece of the body; `None` once it ended (or the connection did).
    pub async fn next(&mut self) -> Result<Option<&[u8]>, String> {
        Ok(self.next_arrived().await?.map(|(piece, _)| piece))
    }

    /// The next piece of the body and when its bytes reached the socket, by the kernel's
    /// clock (`CLOCK_REALTIME`; `None` where the kernel does not stamp them). Bytes of
    /// several packets taken in one read carry the last one's time, so it errs late, never
    /// early.
    pub async fn next_arrived(&mut self) -> Result<Option<(&[u8], Option<SystemTime>)>, String> {
        loop {
            match self.decode()? {
                Decoded::Data(from, to) => return Ok(Some((&self.buffer[from..to], self.arrived_at))),
                Decoded::End => return Ok(None),
                Decoded::NeedMore => {
                    if !self.fill().await? {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// One step of chunked decoding over the undecoded bytes.
    fn decode(&mut self) -> Result<Decoded, String> {
        loop {
            let pending = &self.buffer[self.start..self.end];
            match self.chunking {
                Chunking::Finished => return Ok(Decoded::End),
                Chunking::SizeLine => {
                    let Some(at) = find(pending, b"\r\n") else {
                        if pending.len() > SIZE_LINE_BYTES_MAX {
                            return Err("chunk size line too long".into());
                        }
                        return Ok(Decoded::NeedMore);
                    };
                    let size = parse_chunk_size(&pending[..at])?;
                    self.start += at + 2;
                    self.chunking = if size == 0 { Chunking::Finished } else { Chunking::Data(size) };
                }
                Chunking::Data(left) => {
                    if pending.is_empty() {
                        return Ok(Decoded::NeedMore);
                    }
                    let taken = left.min(pending.len());
                    let from = self.start;
                    self.start += taken;
                    self.chunking =
                        if taken == left { Chunking::DataEnd } else { Chunking::Data(left - taken) };
                    return Ok(Decoded::Data(from, self.start));
                }
                Chunking::DataEnd => {
                    if pending.len() < 2 {
                        return Ok(Decoded::NeedMore);
                    }
                    if &pending[..2] != b"\r\n" {
                        return Err("chunk data not followed by CRLF".into());
                    }
                    self.start += 2;
                    self.chunking = Chunking::SizeLine;
                }
            }
        }
    }

    /// Reads more bytes after the undecoded ones; false at the end of the connection.
    async fn fill(&mut self) -> Result<bool, String> {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        } else if self.end == self.buffer.len() {
            if self.start > 0 {
                self.buffer.copy_within(self.start..self.end, 0);
                (self.start, self.end) = (0, self.end - self.start);
            } else if self.buffer.len() < BUFFER_BYTES_MAX {
                self.buffer.resize(self.buffer.len() * 2, 0);
            } else {
                return Err("a response line fills the whole read buffer".into());
            }
        }
        let read = if self.stamped {
            receive_timestamps::read(&self.socket, &mut self.buffer[self.end..], &mut self.arrived_at).await
        } else {
            self.socket.read(&mut self.buffer[self.end..]).await
        };
        match read {
            Ok(0) => Ok(false),
            Ok(read) => {
                self.end += read;
                Ok(true)
            }
            Err(error) => Err(format!("read: {error}")),
        }
    }
}

/// Reads that also return the kernel's receive time of the data (Linux `SO_TIMESTAMPNS`).
mod receive_timestamps {
    use std::io;
    use std::time::{Duration, SystemTime};

    use tokio::io::Interest;
    use tokio::net::TcpStream;

    /// Asks the kernel to stamp packets received on `socket`; false where it cannot.
    #[cfg(target_os = "linux")]
    pub(super) fn enable(socket: &TcpStream) -> bool {
        use std::os::fd::AsRawFd;
        let on: libc::c_int = 1;
        // SAFETY: setsockopt on an open socket, with a pointer to a live int and its size.
        let result = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                std::ptr::from_ref(&on).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        result == 0
    }

    #[cfg(not(target_os = "linux"))]
    pub fn enable(_socket: &TcpStream) -> bool {
        false
    }

    /// Reads into `buffer` as `read` would; where the kernel sent a stamp with the data,
    /// sets `arrived_at` to it.
    pub(super) async fn read(
        socket: &TcpStream,
        buffer: &mut [u8],
        arrived_at: &mut Option<SystemTime>,
    ) -> io::Result<usize> {
        loop {
            socket.readable().await?;
            match socket.try_io(Interest::READABLE, || receive(socket, buffer)) {
                Ok((read, stamp)) => {
                    if stamp.is_some() {
                        *arrived_at = stamp;
                    }
                    return Ok(read);
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
                Err(error) => return Err(error),
            }
        }
    }

    /// One `recvmsg`: the bytes read and the stamp that came with them, if any.
    #[cfg(target_os = "linux")]
    fn receive(socket: &TcpStream, buffer: &mut [u8]) -> io::Result<(usize, Option<SystemTime>)> {
        use std::os::fd::AsRawFd;
        // Room for one control message holding a timespec, aligned for cmsghdr.
        let mut control = [0u64; 8];
        let mut iov = libc::iovec { iov_base: buffer.as_mut_ptr().cast(), iov_len: buffer.len() };
        // SAFETY: an all-zero msghdr is valid; the fields set below point at live buffers
        // of the stated lengths.
        let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
        message.msg_iov = &mut iov;
        message.msg_iovlen = 1;
        message.msg_control = control.as_mut_ptr().cast();
        message.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: recvmsg on an open socket with the message above; it writes at most the
        // given lengths into `buffer` and `control`.
        let read = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut message, libc::MSG_DONTWAIT) };
        if read < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((read as usize, stamp_of(&message)))
    }

    #[cfg(not(target_os = "linux"))]
    fn receive(socket: &TcpStream, buffer: &mut [u8]) -> io::Result<(usize, Option<SystemTime>)> {
        socket.try_read(buffer).map(|read| (read, None))
    }

    /// The `SCM_TIMESTAMPNS` control message of a received message, as a time.
    #[cfg(target_os = "linux")]
    fn stamp_of(message: &libc::msghdr) -> Option<SystemTime> {
        // SAFETY: the CMSG macros walk the control buffer recvmsg filled, within the length
        // it set; a timestamp message's data is one timespec (read unaligned).
        unsafe {
            let mut header = libc::CMSG_FIRSTHDR(message);
            while !header.is_null() {
                if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_TIMESTAMPNS {
                    let time = std::ptr::read_unaligned(libc::CMSG_DATA(header).cast::<libc::timespec>());
                    let since_epoch = Duration::new(time.tv_sec as u64, time.tv_nsec as u32);
                    return SystemTime::UNIX_EPOCH.checked_add(since_epoch);
                }
                header = libc::CMSG_NXTHDR(message, header);
            }
        }
        None
    }
}

enum Decoded {
    Data(usize, usize),
    NeedMore,
    End,
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

/// A 200 with a chunked body, or why not.
fn check_head(head: &[u8]) -> Result<(), String> {
    let text = std::str::from_utf8(head).map_err(|_| "response head is not UTF-8".to_string())?;
    let mut lines = text.split("\r\n");
    let status = lines.next().and_then(|line| line.split(' ').nth(1)).unwrap_or("");
    if status != "200" {
        return Err(format!("subscribe: status {status}"));
    }
    let chunked = lines.any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            name.eq_ignore_ascii_case("transfer-encoding") && value.trim().eq_ignore_ascii_case("chunked")
        })
    });
    if !chunked {
        return Err("the SSE response is not chunked".into());
    }
    Ok(())
}

fn parse_chunk_size(line: &[u8]) -> Result<usize, String> {
    let digits = line.split(|b| *b == b';').next().unwrap_or(line);
    let text = std::str::from_utf8(digits).map_err(|_| "chunk size is not text".to_string())?;
    usize::from_str_radix(text.trim(), 16).map_err(|_| format!("bad chunk size {text:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A server that answers any request with `response`, sent in `pieces` writes.
    async fn serve_once(response: &'static [u8], pieces: usize) -> Target {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 1024];
            let _ = socket.read(&mut request).await.unwrap();
            for piece in response.chunks(response.len().div_ceil(pieces)) {
                socket.write_all(piece).await.unwrap();
                socket.flush().await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
        });
        Target::parse(&format!("http://{addr}"), "/").unwrap()
    }

    const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
        5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n";

    #[tokio::test]
    async fn decodes_chunks_however_the_bytes_arrive() {
        for pieces in [1, 3, 17, RESPONSE.len()] {
            let target = serve_once(RESPONSE, pieces).await;
            let mut stream = SseStream::open(&target, "/s").await.unwrap();
            let mut body = Vec::new();
            while let Some(piece) = stream.next().await.unwrap() {
                body.extend_from_slice(piece);
            }
            assert_eq!(body, b"hello, world", "in {pieces} pieces");
        }
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn stamps_each_piece_with_when_it_reached_the_socket() {
        let before = SystemTime::now();
        let target = serve_once(RESPONSE, 3).await;
        let mut stream = SseStream::open(&target, "/s").await.unwrap();
        let (mut body, mut stamps) = (Vec::new(), Vec::new());
        while let Some((piece, arrived_at)) = stream.next_arrived().await.unwrap() {
            body.extend_from_slice(piece);
            stamps.push(arrived_at.expect("the kernel stamps loopback packets"));
        }
        let after = SystemTime::now();
        assert_eq!(body, b"hello, world");
        assert!(stamps.iter().all(|at| before <= *at && *at <= after), "{before:?} {stamps:?} {after:?}");
        assert!(stamps.windows(2).all(|pair| pair[0] <= pair[1]), "in order of arrival: {stamps:?}");
        assert!(stamps.first() < stamps.last(), "pieces sent 2 ms apart carry their own times: {stamps:?}");
    }

    #[tokio::test]
    async fn refuses_other_statuses_and_broken_framing() {
        let target = serve_once(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n", 1).await;
        assert_eq!(SseStream::open(&target, "/s").await.err().unwrap(), "subscribe: status 404");
        let target = serve_once(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabcXY", 1).await;
        let mut stream = SseStream::open(&target, "/s").await.unwrap();
        assert_eq!(stream.next().await.unwrap(), Some(&b"abc"[..]));
        assert!(stream.next().await.is_err(), "data not followed by CRLF");
    }

    #[tokio::test]
    async fn sends_the_bearer_token_it_was_given() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = vec![0u8; 1024];
            let read = socket.read(&mut request).await.unwrap();
            socket.write_all(RESPONSE).await.unwrap();
            String::from_utf8(request[..read].to_vec()).unwrap()
        });
        let mut target = Target::parse(&format!("http://{addr}"), "/").unwrap();
        target.authorization = Some("Bearer t0ken".to_owned());
        let mut stream = SseStream::open(&target, "/s").await.unwrap();
        while stream.next().await.unwrap().is_some() {}
        let request = server.await.unwrap();
        assert!(request.contains("\r\nauthorization: Bearer t0ken\r\n"), "{request:?}");
        assert!(request.ends_with("\r\n\r\n"));
    }
}
