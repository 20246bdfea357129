//! The storage modes: where streams live and when an append counts as done.

use std::fmt;

/// Where streams live and when an append counts as done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageMode {
    /// In memory only; nothing survives a restart.
    Memory,
    /// One log file per stream; acknowledged once written to the page cache.
    FileFast,
    /// One log file per stream; acknowledged once fdatasync'ed.
    FileDurable,
    /// One write-ahead log per shard; every op committed atomically and durably.
    Acid,
}

impl StorageMode {
    /// Parses a mode name (`wal` is an alias of `acid`).
    pub fn parse(text: &str) -> Option<StorageMode> {
        match text {
            "memory" => Some(StorageMode::Memory),
            "file-fast" => Some(StorageMode::FileFast),
            "file-durable" => Some(StorageMode::FileDurable),
            "acid" | "wal" => Some(StorageMode::Acid),
            _ => None,
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            StorageMode::Memory => "memory",
            StorageMode::FileFast => "file-fast",
            StorageMode::FileDurable => "file-durable",
            StorageMode::Acid => "acid",
        }
    }
}

impl fmt::Display for StorageMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_with_the_acid_alias() {
        assert_eq!(StorageMode::parse("wal"), Some(StorageMode::Acid));
        assert_eq!(StorageMode::parse("acid"), Some(StorageMode::Acid));
        assert_eq!(StorageMode::parse("file-fast"), Some(StorageMode::FileFast));
        assert_eq!(StorageMode::parse("Memory"), None);
    }
}
