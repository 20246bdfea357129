//! A temporary data directory for a test's server, removed when the test is done.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

pub struct DataDir {
    path: PathBuf,
}

impl DataDir {
    /// A new, empty directory under the system's temporary directory.
    pub fn new(label: &str) -> DataDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let unique =
            format!("ds-test-{label}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let path = std::env::temp_dir().join(unique);
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create a temporary data directory");
        DataDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
