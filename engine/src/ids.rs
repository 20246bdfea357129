//! Newtypes for the numbers a mix-up would corrupt data with, so the compiler tells them
//! apart: where a record is in its log ([`Location`]), which stream incarnation a record
//! or state belongs to ([`StreamId`]), a record's place in its log's sequence ([`Lsn`]) and
//! in its stream's chain ([`ChainIndex`]).
//! Each converts to and from its raw `u64` only where it is encoded or decoded (records,
//! checkpoints, segment names) and where its mode composes it (`storage::wal::location`,
//! `storage::files::location`).

use std::fmt;

/// Where a record starts in its storage: a segment ordinal and position in acid, a file's
/// collision suffix and position in the file modes. Opaque outside those two; ordered as the
/// records are within one log.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Location(u64);

impl Location {
    /// The location `bytes` further along the same log (just after a record of that size).
    pub fn plus(self, bytes: u64) -> Location {
        Location(self.0 + bytes)
    }
}

/// One incarnation of a stream in its shard: a stream created again under the same name
/// gets a new one.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId(u64);

/// A record's sequence number in its log: a shard's WAL numbers its records from 1 without
/// gaps across segments (a segment's header and name carry its first); a stream file numbers
/// its records from 0 (the create record), so there it is also the record's chain index.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(u64);

impl Lsn {
    /// The first record of a shard's WAL.
    pub const FIRST: Lsn = Lsn(1);

    /// The record after this one.
    pub fn next(self) -> Lsn {
        Lsn(self.0 + 1)
    }

    /// The record `count` after this one (saturating: only compared, never written).
    pub fn plus(self, count: u64) -> Lsn {
        Lsn(self.0.saturating_add(count))
    }

    /// The record before this one (`None` before the first of a log).
    pub fn previous(self) -> Option<Lsn> {
        self.0.checked_sub(1).map(Lsn)
    }
}

/// A record's index in its stream's chain: the create is record 0, each append or close the
/// next. Not an offset (those count messages and bytes) and not a sequence number of a log
/// (a shard's log interleaves many chains).
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChainIndex(u64);

impl ChainIndex {
    /// The create record's.
    pub const CREATE: ChainIndex = ChainIndex(0);

    /// The record after this one.
    pub fn next(self) -> ChainIndex {
        ChainIndex(self.0 + 1)
    }

    /// The record `records` after this one.
    pub fn forward(self, records: u64) -> ChainIndex {
        ChainIndex(self.0 + records)
    }

    /// The record `records` before this one (`None` before the create).
    pub fn back(self, records: u64) -> Option<ChainIndex> {
        self.0.checked_sub(records).map(ChainIndex)
    }

    /// How many records after `earlier` this one is (0 when it is not after it).
    pub fn records_after(self, earlier: ChainIndex) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    pub fn is_create(self) -> bool {
        self.0 == 0
    }

    /// Trailing zero bits of the index (how many jumps back a record stores, less one).
    pub fn trailing_zeros(self) -> u32 {
        self.0.trailing_zeros()
    }
}

macro_rules! raw_u64 {
    ($name:ident, $debug:literal) => {
        impl $name {
            pub const fn from_raw(raw: u64) -> $name {
                $name(raw)
            }

            pub const fn raw(self) -> u64 {
                self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, $debug, self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }

        impl fmt::LowerHex for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::LowerHex::fmt(&self.0, f)
            }
        }
    };
}

raw_u64!(Location, "Location({:#x})");
raw_u64!(StreamId, "StreamId({})");
raw_u64!(Lsn, "Lsn({})");
raw_u64!(ChainIndex, "ChainIndex({})");

impl StreamId {
    /// The first id a shard hands out.
    pub const FIRST: StreamId = StreamId(1);

    /// The id after this one (ids are handed out in order, per shard).
    pub fn next(self) -> StreamId {
        StreamId(self.0 + 1)
    }
}
