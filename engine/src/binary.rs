//! Little-endian encoding helpers for the engine's own files (checkpoints, manifest, and the
//! small state files of entries: saved renewals and saved file ends).
//!
//! Records have a fixed header layout of their own (`record::codec`); these helpers are for
//! the variable-length structures around them. Decoding never panics: running out of bytes
//! or finding invalid UTF-8 is an error.

/// Appends fields to a buffer.
#[derive(Default)]
pub(crate) struct Encoder {
    pub bytes: Vec<u8>,
}

impl Encoder {
    pub(crate) fn u8(&mut self, value: u8) -> &mut Self {
        self.bytes.push(value);
        self
    }

    pub(crate) fn u32(&mut self, value: u32) -> &mut Self {
        self.bytes.extend_from_slice(&value.to_le_bytes());
        self
    }

    pub(crate) fn u64(&mut self, value: u64) -> &mut Self {
        self.bytes.extend_from_slice(&value.to_le_bytes());
        self
    }

    /// A string with a u32 length.
    pub(crate) fn text(&mut self, text: &str) -> &mut Self {
        self.u32(text.len() as u32);
        self.bytes.extend_from_slice(text.as_bytes());
        self
    }

    /// Bytes with a u32 length.
    pub(crate) fn blob(&mut self, blob: &[u8]) -> &mut Self {
        self.u32(blob.len() as u32);
        self.bytes.extend_from_slice(blob);
        self
    }

    pub(crate) fn option_u64(&mut self, value: Option<u64>) -> &mut Self {
        match value {
            Some(value) => self.u8(1).u64(value),
            None => self.u8(0),
        }
    }

    pub(crate) fn option_text(&mut self, value: Option<&str>) -> &mut Self {
        match value {
            Some(value) => self.u8(1).text(value),
            None => self.u8(0),
        }
    }
}

/// Why bytes do not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DecodeFailure;

impl std::fmt::Display for DecodeFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("truncated or malformed data")
    }
}

impl std::error::Error for DecodeFailure {}

/// The fields of a small state file laid out as `magic`, fields, crc32 of both: checked,
/// or why not (`kind` names the file in the error).
pub(crate) fn checked_fields<'a>(bytes: &'a [u8], magic: &[u8; 4], kind: &str) -> std::io::Result<&'a [u8]> {
    let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let Some((body, crc)) = bytes.split_last_chunk::<4>() else { return Err(invalid("too short".into())) };
    if crc32fast::hash(body) != u32::from_le_bytes(*crc) {
        return Err(invalid("checksum mismatch".into()));
    }
    body.strip_prefix(magic.as_slice()).ok_or_else(|| invalid(format!("not a {kind}")))
}

/// The bytes of a small state file of entries: `magic`, `version` (u32), the entry count
/// (u64), each entry's fields as `fields` writes them, and a crc32 of all that.
pub(crate) fn encode_entries<T>(
    magic: &[u8; 4],
    version: u32,
    entries: &[T],
    mut fields: impl FnMut(&mut Encoder, &T),
) -> Vec<u8> {
    let mut encoder = Encoder::default();
    encoder.bytes.extend_from_slice(magic);
    encoder.u32(version).u64(entries.len() as u64);
    entries.iter().for_each(|entry| fields(&mut encoder, entry));
    let crc = crc32fast::hash(&encoder.bytes);
    encoder.u32(crc);
    encoder.bytes
}

/// The entries of a file written by [`encode_entries`] with one of `versions`, each read by
/// `entry` (which is told the file's version); an error when the file fails its check, is
/// of another kind (`kind` names it), has another version, or its entries do not fill it
/// exactly.
pub(crate) fn decode_entries<T>(
    bytes: &[u8],
    magic: &[u8; 4],
    versions: std::ops::RangeInclusive<u32>,
    kind: &str,
    mut entry: impl FnMut(&mut Decoder<'_>, u32) -> Result<T, DecodeFailure>,
) -> std::io::Result<Vec<T>> {
    let mut decoder = Decoder::new(checked_fields(bytes, magic, kind)?);
    let mut entries = Vec::new();
    let mut decoded = || {
        let version = decoder.u32()?;
        if !versions.contains(&version) {
            return Err(DecodeFailure);
        }
        for _ in 0..decoder.u64()? {
            entries.push(entry(&mut decoder, version)?);
        }
        decoder.is_empty().then_some(()).ok_or(DecodeFailure)
    };
    decoded().map_err(|_| {
        let what = "unknown version, or entries that do not fill the file";
        std::io::Error::new(std::io::ErrorKind::InvalidData, what)
    })?;
    Ok(entries)
}

/// Reads fields from a buffer.
pub(crate) struct Decoder<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Decoder<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Decoder<'a> {
        Decoder { bytes, at: 0 }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.at == self.bytes.len()
    }

    fn take(&mut self, count: usize) -> Result<&'a [u8], DecodeFailure> {
        let end = self.at.checked_add(count).ok_or(DecodeFailure)?;
        let taken = self.bytes.get(self.at..end).ok_or(DecodeFailure)?;
        self.at = end;
        Ok(taken)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeFailure> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeFailure> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeFailure> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    pub(crate) fn text(&mut self) -> Result<String, DecodeFailure> {
        let len = self.u32()? as usize;
        String::from_utf8(self.take(len)?.to_vec()).map_err(|_| DecodeFailure)
    }

    pub(crate) fn blob(&mut self) -> Result<&'a [u8], DecodeFailure> {
        let len = self.u32()? as usize;
        self.take(len)
    }

    pub(crate) fn option_u64(&mut self) -> Result<Option<u64>, DecodeFailure> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.u64()?)),
            _ => Err(DecodeFailure),
        }
    }

    pub(crate) fn option_text(&mut self) -> Result<Option<String>, DecodeFailure> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.text()?)),
            _ => Err(DecodeFailure),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_truncation_fails() {
        let mut encoder = Encoder::default();
        encoder
            .u8(7)
            .u32(8)
            .u64(9)
            .text("héllo")
            .blob(&[1, 2])
            .option_u64(None)
            .option_u64(Some(3))
            .option_text(Some("x"));
        let mut decoder = Decoder::new(&encoder.bytes);
        assert_eq!(decoder.u8(), Ok(7));
        assert_eq!(decoder.u32(), Ok(8));
        assert_eq!(decoder.u64(), Ok(9));
        assert_eq!(decoder.text().as_deref(), Ok("héllo"));
        assert_eq!(decoder.blob(), Ok(&[1, 2][..]));
        assert_eq!(decoder.option_u64(), Ok(None));
        assert_eq!(decoder.option_u64(), Ok(Some(3)));
        assert_eq!(decoder.option_text(), Ok(Some("x".into())));
        assert!(decoder.is_empty());
        assert_eq!(Decoder::new(&encoder.bytes[..3]).u32(), Err(DecodeFailure));
        assert_eq!(Decoder::new(&[2]).option_u64(), Err(DecodeFailure));
        assert_eq!(Decoder::new(&[255, 255, 255, 255]).text(), Err(DecodeFailure));
    }
}
