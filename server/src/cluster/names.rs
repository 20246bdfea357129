//! A set of stream names held back from some requests, empty almost always: its check on
//! the hot path is one atomic load.
//!
//! The cluster keeps two. `unsettled`: names whose delete this node began in the directory
//! but has not settled there (the entry may say `deleting` while the stream is still here;
//! a `deleting` entry that took appends and was finished later would lose them), so their
//! appends wait. `disowned`: names this node holds whose directory entry went and was
//! claimed by another node before it could be put back (a split stream), so this node
//! serves none of their requests until an operator resolves it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The names, and how many there are (read without the lock).
#[derive(Default)]
pub(crate) struct NameSet {
    names: Mutex<HashSet<String>>,
    count: AtomicUsize,
}

impl NameSet {
    /// Holds `name` back from now on.
    pub(crate) fn hold(&self, name: &str) {
        let mut names = self.names.lock().expect("name set lock");
        names.insert(name.to_string());
        self.count.store(names.len(), Ordering::Release);
    }

    /// Lets `name` through again.
    pub(crate) fn release(&self, name: &str) {
        let mut names = self.names.lock().expect("name set lock");
        names.remove(name);
        self.count.store(names.len(), Ordering::Release);
    }

    /// Keeps held back only the names `keep` says to.
    pub(crate) fn retain(&self, keep: impl Fn(&str) -> bool) {
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut names = self.names.lock().expect("name set lock");
        names.retain(|name| keep(name));
        self.count.store(names.len(), Ordering::Release);
    }

    /// Whether `name` is held back.
    pub(crate) fn holds(&self, name: &str) -> bool {
        self.count.load(Ordering::Acquire) > 0 && self.names.lock().expect("name set lock").contains(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_held_until_released() {
        let unsettled = NameSet::default();
        assert!(!unsettled.holds("a"));
        unsettled.hold("a");
        assert!(unsettled.holds("a") && !unsettled.holds("b"));
        unsettled.release("a");
        assert!(!unsettled.holds("a"));
    }
}
