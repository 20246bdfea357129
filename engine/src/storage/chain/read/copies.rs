//! The process-wide budget of the bytes catch-up reads copy.
//!
//! A read copies the data of small records into one buffer (`COPY_BELOW_BYTES`): cheaper to
//! send than many small slices, but memory the answer holds until the client has read it —
//! up to a read's size, for as long as a client takes to read (a write may stall for
//! `DS_SERVER__WRITE_STALL_TIMEOUT_SECS`). So every read that copies charges the most it may
//! copy to one global count, capped at [`COPIES_BYTES_MAX`], and the charge is given back when
//! the last buffer holding it is dropped. A read that finds the budget spent copies nothing:
//! it hands out its small records as slices of their storage, like large ones — the same
//! answer, costing no memory of its own. So a crowd of clients that never read their answers
//! holds at most the budget, and no read ever waits or fails for it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use crate::limits::ByteBudget;

/// Most bytes all reads' copies hold at once: 16 reads of the default 4 MiB.
pub(crate) const COPIES_BYTES_MAX: u64 = 64 << 20;

/// The budget of every read's copies in the process (it counts no streams).
static COPIES: ByteBudget = ByteBudget::new(COPIES_BYTES_MAX, 0);

/// Reads that found the budget spent and sent their small records as slices, since the start.
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// Bytes reads' copies hold now, across the process (charged for the most each may copy).
pub(crate) fn copies_held_bytes() -> u64 {
    COPIES.used()
}

/// Reads that found the budget spent, since the start (their small records went out as
/// slices of the log, which costs more to send than one copy).
pub(crate) fn copies_refused() -> u64 {
    REFUSED.load(Ordering::Relaxed)
}

/// Bytes charged to a budget, given back when dropped.
struct Charge {
    budget: &'static ByteBudget,
    bytes: u64,
}

impl Charge {
    /// Charges `bytes`, or `None` when that would pass the budget's maximum.
    fn try_new(budget: &'static ByteBudget, bytes: u64) -> Option<Charge> {
        budget.try_charge(bytes).then(|| Charge { budget, bytes })
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

/// One read's copies: charged, at its first small record, for the most the read may copy.
pub(super) struct Copies {
    budget: &'static ByteBudget,
    bytes_max: u64,
    /// Bytes sealed so far (never more than `bytes_max`).
    sealed: u64,
    charge: Charged,
}

enum Charged {
    NotYet,
    Yes(Arc<Charge>),
    Refused,
}

/// A copied buffer and the charge it holds.
struct Piece {
    bytes: Bytes,
    _charge: Arc<Charge>,
}

impl AsRef<[u8]> for Piece {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Copies {
    /// The copies of a read that copies at most `bytes_max` bytes.
    pub(super) fn new(bytes_max: u64) -> Copies {
        Copies::charged_to(&COPIES, bytes_max)
    }

    fn charged_to(budget: &'static ByteBudget, bytes_max: u64) -> Copies {
        Copies { budget, bytes_max, sealed: 0, charge: Charged::NotYet }
    }

    /// Whether this read may copy (charging the budget the first time it is asked).
    pub(super) fn allowed(&mut self) -> bool {
        if matches!(self.charge, Charged::NotYet) {
            self.charge = match Charge::try_new(self.budget, self.bytes_max) {
                Some(charge) => Charged::Yes(Arc::new(charge)),
                None => {
                    REFUSED.fetch_add(1, Ordering::Relaxed);
                    Charged::Refused
                }
            };
        }
        matches!(self.charge, Charged::Yes(_))
    }

    /// `copied` (made while [`Copies::allowed`]), holding the read's charge until dropped.
    pub(super) fn seal(&mut self, copied: Bytes) -> Bytes {
        let Charged::Yes(charge) = &self.charge else {
            unreachable!("only a read allowed to copy has copies to seal");
        };
        self.sealed += copied.len() as u64;
        assert!(self.sealed <= self.bytes_max, "a read copies no more than it charged");
        Bytes::from_owner(Piece { bytes: copied, _charge: Arc::clone(charge) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_that_finds_the_budget_spent_copies_nothing_and_charges_are_given_back() {
        let budget: &'static ByteBudget = Box::leak(Box::new(ByteBudget::new(10_000, 0)));
        let mut first = Copies::charged_to(budget, 6_000);
        assert!(first.allowed());
        assert_eq!(budget.used(), 6_000, "charged for the most it may copy");
        let mut second = Copies::charged_to(budget, 6_000);
        assert!(!second.allowed(), "the budget cannot hold both");
        assert!(!second.allowed(), "a refusal stands for the whole read");
        let piece = first.seal(Bytes::from_static(b"copied"));
        assert_eq!(&piece[..], b"copied");
        drop(first);
        assert_eq!(budget.used(), 6_000, "the piece still holds the charge");
        drop(piece);
        assert_eq!(budget.used(), 0, "given back with the last piece");
        assert!(Copies::charged_to(budget, 10_000).allowed());
        assert_eq!(budget.used(), 0, "a read that copied nothing holds nothing");
    }

    #[test]
    #[should_panic(expected = "a read copies no more than it charged")]
    fn a_read_never_copies_more_than_it_charged() {
        let budget: &'static ByteBudget = Box::leak(Box::new(ByteBudget::new(100, 0)));
        let mut copies = Copies::charged_to(budget, 4);
        assert!(copies.allowed());
        let _piece = copies.seal(Bytes::from_static(b"too long"));
    }
}
