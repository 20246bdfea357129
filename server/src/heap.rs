//! The process's heap policy (glibc's malloc), set once at the start of `main`, before any
//! thread exists.
//!
//! glibc moves its thresholds as a process runs: freeing one large mapped block raises the
//! size above which blocks are mapped (up to 32 MiB) and the free space a heap keeps at its
//! top (up to 64 MiB). Recovery decodes each shard's snapshots on threads of its own, each
//! thread with its own heap (arena); once the first large block was freed, every later one
//! came from those heaps, and when they were all freed the space stayed at the heaps' tops,
//! resident, where `malloc_trim` does not look. A server restarted over a million streams
//! kept about 230 MB that way (688 MB resident against 463 MB with the thresholds fixed).
//! Fixed thresholds: blocks of [`MMAP_THRESHOLD_BYTES`] and more are mapped on their own and
//! unmapped when freed; a heap gives back free space at its top past [`TRIM_THRESHOLD_BYTES`].
//! Small blocks, which is what requests allocate, are served as before.
//!
//! An operator who sets glibc's malloc tunables (`GLIBC_TUNABLES=glibc.malloc.…`) keeps them.

/// Blocks this large or larger get a mapping of their own.
const MMAP_THRESHOLD_BYTES: i32 = 1 << 20;
/// Free space at a heap's top beyond this is given back.
const TRIM_THRESHOLD_BYTES: i32 = 16 << 20;

/// Fixes the heap's thresholds, unless the environment sets malloc tunables. Call it first
/// in `main`.
pub fn fix_thresholds() {
    let tuned_by_operator =
        std::env::var("GLIBC_TUNABLES").is_ok_and(|tunables| tunables.contains("glibc.malloc."));
    if tuned_by_operator {
        return;
    }
    set_thresholds();
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_thresholds() {
    // SAFETY: mallopt only changes the allocator's parameters; called before any thread.
    let set = unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
    };
    if !set {
        eprintln!("ds-server: glibc refused the heap thresholds; keeping its own");
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_thresholds() {}
