//! Faults in read maps, contained: a page of a mapped file that cannot be read — the file was
//! cut short under the running process, or the device failed to read the page — raises
//! SIGBUS at the load, which by default kills the whole process for one bad page.
//!
//! Every map the engine reads stored data through is registered here ([`guard`]). The
//! SIGBUS handler looks the faulting address up among the registered maps; inside one, it
//! puts a page of zeros over the faulting page (an anonymous `MAP_FIXED` map) and counts it
//! ([`faults`]), and the load completes with zeros. Zeros never pass a record's checksum, so
//! the reader finds the record damaged and the stream is handled like any other damage:
//! its intact bytes are served, the rest refused, the server goes on. A SIGBUS anywhere
//! else gets the action that was there before (Rust's own handler, then the default).
//!
//! The handler is async-signal-safe: it reads atomics and makes one `mmap` system call.
//! The registry is a fixed table of [`SLOTS`] address ranges; a map that finds no free slot
//! is left unguarded (counted in [`unguarded`]), as every map was before.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Once, OnceLock};

/// Maps guarded at once (a slot is 24 bytes: 384 KiB of static memory in all).
pub(crate) const SLOTS: usize = 16_384;

struct Slot {
    /// First address of the map; 0 when the slot is free.
    start: AtomicUsize,
    /// Bytes mapped; 0 while the slot is being claimed or freed.
    len: AtomicUsize,
    /// A page of this map was replaced since it was guarded.
    faulted: AtomicBool,
}

static REGISTRY: [Slot; SLOTS] = [const {
    Slot { start: AtomicUsize::new(0), len: AtomicUsize::new(0), faulted: AtomicBool::new(false) }
}; SLOTS];
/// Where the next claim starts looking (claims and releases are rare; this keeps them short).
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);
static PAGE_BYTES: AtomicUsize = AtomicUsize::new(4096);
static FAULTS: AtomicU64 = AtomicU64::new(0);
static UNGUARDED: AtomicU64 = AtomicU64::new(0);
static INSTALL: Once = Once::new();
/// The SIGBUS action before ours, put back for a fault that is not in a guarded map.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

/// Pages of guarded maps replaced by zeros since the process started.
pub(crate) fn faults() -> u64 {
    FAULTS.load(Ordering::Relaxed)
}

/// Maps left unguarded because the registry was full.
pub(crate) fn unguarded() -> u64 {
    UNGUARDED.load(Ordering::Relaxed)
}

/// A guarded range; unguarded when dropped (drop it before the map is unmapped).
pub(crate) struct Guard {
    slot: Option<usize>,
}

/// Guards `len` bytes mapped at `start` until the returned guard is dropped.
pub(crate) fn guard(start: *const u8, len: usize) -> Guard {
    INSTALL.call_once(install);
    if len == 0 {
        return Guard { slot: None };
    }
    let first = NEXT_SLOT.load(Ordering::Relaxed);
    for step in 0..SLOTS {
        let index = (first + step) % SLOTS;
        let slot = &REGISTRY[index];
        let claimed = slot.start.compare_exchange(0, start as usize, Ordering::AcqRel, Ordering::Relaxed);
        if claimed.is_ok() {
            slot.faulted.store(false, Ordering::Relaxed);
            slot.len.store(len, Ordering::Release);
            NEXT_SLOT.store(index + 1, Ordering::Relaxed);
            return Guard { slot: Some(index) };
        }
    }
    UNGUARDED.fetch_add(1, Ordering::Relaxed);
    Guard { slot: None }
}

impl Guard {
    /// Whether a page of the guarded map was replaced by zeros: what it shows may differ
    /// from the file from then on (a writer should move on to another file).
    pub(crate) fn faulted(&self) -> bool {
        self.slot.is_some_and(|index| REGISTRY[index].faulted.load(Ordering::Acquire))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(index) = self.slot {
            let slot = &REGISTRY[index];
            slot.len.store(0, Ordering::Release);
            slot.start.store(0, Ordering::Release);
        }
    }
}

fn install() {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if let Ok(page) = usize::try_from(page) {
        if page.is_power_of_two() {
            PAGE_BYTES.store(page, Ordering::Relaxed);
        }
    }
    // SAFETY: zeroed sigactions are valid values to fill in; the handler has the
    // SA_SIGINFO signature.
    unsafe {
        let mut previous: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut previous) != 0 {
            return;
        }
        // Set before the handler can run, so it always finds the action to hand back to.
        let _ = PREVIOUS.set(previous);
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigbus as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
    }
}

/// The slot of the guarded map holding `address`, if any.
fn guarded(address: usize) -> Option<&'static Slot> {
    REGISTRY.iter().find(|slot| {
        let start = slot.start.load(Ordering::Acquire);
        let len = slot.len.load(Ordering::Acquire);
        start != 0 && address >= start && address - start < len
    })
}

extern "C" fn on_sigbus(_signal: libc::c_int, info: *mut libc::siginfo_t, _context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers; si_addr is the
    // faulting address for SIGBUS.
    let address = unsafe { (*info).si_addr() } as usize;
    if let Some(slot) = guarded(address) {
        let page = address & !(PAGE_BYTES.load(Ordering::Relaxed) - 1);
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED;
        // SAFETY: the page lies inside a live map this process made for reading only;
        // replacing it with zeros changes what readers see (and checksums refuse), never
        // memory anything else owns.
        let mapped = unsafe {
            libc::mmap(
                page as *mut libc::c_void,
                PAGE_BYTES.load(Ordering::Relaxed),
                libc::PROT_READ,
                flags,
                -1,
                0,
            )
        };
        if mapped != libc::MAP_FAILED {
            slot.faulted.store(true, Ordering::Release);
            FAULTS.fetch_add(1, Ordering::Relaxed);
            return;
        }
    }
    // Not ours (or the page could not be replaced): the action before ours takes the
    // fault when the load runs again.
    // SAFETY: PREVIOUS was set before this handler was installed and is never written
    // again; sigaction and signal are async-signal-safe.
    unsafe {
        match PREVIOUS.get() {
            Some(previous) => libc::sigaction(libc::SIGBUS, previous, std::ptr::null_mut()),
            None => {
                libc::signal(libc::SIGBUS, libc::SIG_DFL);
                0
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;

    #[test]
    fn a_page_cut_from_a_guarded_map_reads_as_zeros_and_is_counted() {
        let path = std::env::temp_dir().join(format!("ds-fault-guard-{}", std::process::id()));
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        let page = PAGE_BYTES.load(Ordering::Relaxed).max(4096);
        file.set_len(3 * page as u64).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&file, &vec![7u8; 3 * page], 0).unwrap();
        // SAFETY: the test owns the file; cutting it under the map is the point.
        let map = unsafe { memmap2::MmapOptions::new().len(3 * page).map(&file).unwrap() };
        let guard = guard(map.as_ptr(), map.len());
        let before = faults();
        assert!(!guard.faulted());
        file.set_len(page as u64).unwrap();
        assert_eq!(map[0], 7, "the page still in the file reads as written");
        assert_eq!(map[2 * page + 5], 0, "a cut page reads as zeros instead of killing the process");
        assert_eq!(map[2 * page + 6], 0);
        assert_eq!(faults() - before, 1, "one page replaced");
        assert_eq!(map[page], 0);
        assert_eq!(faults() - before, 2);
        assert!(guard.faulted(), "the map knows it no longer shows the file");
        drop(guard);
        drop(map);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn guards_are_released_and_reused() {
        let before = unguarded();
        let guards: Vec<Guard> = (1..=100usize).map(|i| guard((i << 20) as *const u8, 4096)).collect();
        assert!(guarded(5 << 20).is_some() && guarded((5 << 20) + 4095).is_some());
        assert!(guarded((5 << 20) + 4096).is_none());
        drop(guards);
        assert!(guarded(5 << 20).is_none());
        assert_eq!(unguarded(), before);
    }
}
