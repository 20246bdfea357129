//! Following a chunked body (RFC 9112 §7.1) as it passes, to know where it ends and the
//! next request's head begins: chunk sizes in hex (extensions skipped), chunk data, the
//! last chunk and its trailer lines. Only the framing is read; hyper decodes the body. A
//! body that breaks the framing is no longer followed: hyper fails it and ends the
//! connection.

/// Where a chunked body is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Chunks {
    /// In a chunk-size line: the size so far, and whether the extensions began.
    Size {
        size: u64,
        digits: bool,
        extension: bool,
    },
    /// After a chunk-size line's CR.
    SizeLf {
        size: u64,
    },
    /// In a chunk's data, with this many bytes left.
    Data(u64),
    /// After a chunk's data: its CRLF.
    DataCr,
    DataLf,
    /// In the trailer section, at the start of a line (`true`) or inside one.
    Trailer {
        line_start: bool,
    },
    /// After the CR of the empty line that ends the trailer section.
    EndLf,
    /// The body ended: the next byte is the next request's.
    Done,
    /// The framing broke: not followed any further.
    Broken,
}

impl Chunks {
    /// The start of a chunked body.
    pub(crate) fn start() -> Chunks {
        Chunks::Size { size: 0, digits: false, extension: false }
    }

    /// Follows `bytes` of the body; how many of them belong to it (all, unless it ends
    /// inside them).
    pub(crate) fn follow(&mut self, bytes: &[u8]) -> usize {
        let mut at = 0;
        while at < bytes.len() {
            match *self {
                Chunks::Done => return at,
                Chunks::Broken => return bytes.len(),
                Chunks::Data(left) => {
                    let taken = left.min((bytes.len() - at) as u64);
                    at += taken as usize;
                    *self = if taken == left { Chunks::DataCr } else { Chunks::Data(left - taken) };
                }
                state => {
                    *self = state.step(bytes[at]);
                    at += 1;
                }
            }
        }
        at
    }

    /// The state after one framing byte.
    fn step(self, byte: u8) -> Chunks {
        match (self, byte) {
            (Chunks::Size { size, extension: false, .. }, b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F') => {
                let digit = u64::from((byte as char).to_digit(16).expect("a hex digit"));
                match size.checked_mul(16).and_then(|size| size.checked_add(digit)) {
                    Some(size) => Chunks::Size { size, digits: true, extension: false },
                    None => Chunks::Broken,
                }
            }
            (Chunks::Size { digits: true, size, .. }, b'\r') => Chunks::SizeLf { size },
            (Chunks::Size { digits: true, size, .. }, b'\n') | (Chunks::SizeLf { size }, b'\n') => match size
            {
                0 => Chunks::Trailer { line_start: true },
                size => Chunks::Data(size),
            },
            (Chunks::Size { digits: true, size, .. }, b';' | b' ' | b'\t') => {
                Chunks::Size { size, digits: true, extension: true }
            }
            (Chunks::Size { extension: true, .. }, _) => self,
            (Chunks::DataCr, b'\r') => Chunks::DataLf,
            (Chunks::DataCr | Chunks::DataLf, b'\n') => Chunks::start(),
            (Chunks::Trailer { line_start: true }, b'\r') => Chunks::EndLf,
            (Chunks::Trailer { line_start: true }, b'\n') | (Chunks::EndLf, b'\n') => Chunks::Done,
            (Chunks::Trailer { .. }, b'\n') => Chunks::Trailer { line_start: true },
            (Chunks::Trailer { .. }, _) => Chunks::Trailer { line_start: false },
            _ => Chunks::Broken,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_ends_after_its_last_chunk_and_trailers_in_any_pieces() {
        let body = b"5;name=v\r\nhello\r\nA\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\nGET /";
        let end = body.len() - 5;
        for cut in 0..body.len() {
            let mut chunks = Chunks::start();
            let first = chunks.follow(&body[..cut]);
            let second = chunks.follow(&body[cut..]);
            assert_eq!((first + second, chunks), (end, Chunks::Done), "cut at {cut}");
        }
        let mut bare = Chunks::start();
        assert_eq!(bare.follow(b"0\r\n\r\nnext"), 5);
        assert_eq!(bare, Chunks::Done);
    }

    #[test]
    fn broken_framing_is_no_longer_followed() {
        for body in [&b"x\r\n"[..], b"\r\n", b"5\r\nhelloXX", b"fffffffffffffffff\r\n"] {
            let mut chunks = Chunks::start();
            assert_eq!(chunks.follow(body), body.len(), "{body:?}");
            assert_eq!(chunks, Chunks::Broken, "{body:?}");
        }
    }
}
