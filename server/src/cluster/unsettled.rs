//! Names whose delete this node began in the directory but has not settled there: the
//! entry may say `deleting` while the stream is still here.
//!
//! A delete marks its entry `deleting` before the local delete, and afterwards removes the
//! entry (the stream gone) or marks it `live` again (the stream still here). When etcd does
//! not answer one of those steps, the entry's state is unknown; until it is known again,
//! the name's appends are refused (a `deleting` entry that took appends and was finished
//! later would lose them), and a task settles the entry in the background.
//! The set is empty almost always: its check on an append is one atomic load.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The names, and how many there are (read without the lock).
#[derive(Default)]
pub(crate) struct Unsettled {
    names: Mutex<HashSet<String>>,
    count: AtomicUsize,
}

impl Unsettled {
    /// Holds back the appends of `name` from now on.
    pub(crate) fn hold(&self, name: &str) {
        let mut names = self.names.lock().expect("unsettled lock");
        names.insert(name.to_string());
        self.count.store(names.len(), Ordering::Release);
    }

    /// Lets the appends of `name` through again.
    pub(crate) fn release(&self, name: &str) {
        let mut names = self.names.lock().expect("unsettled lock");
        names.remove(name);
        self.count.store(names.len(), Ordering::Release);
    }

    /// Whether the appends of `name` are held back.
    pub(crate) fn holds(&self, name: &str) -> bool {
        self.count.load(Ordering::Acquire) > 0 && self.names.lock().expect("unsettled lock").contains(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_held_until_released() {
        let unsettled = Unsettled::default();
        assert!(!unsettled.holds("a"));
        unsettled.hold("a");
        assert!(unsettled.holds("a") && !unsettled.holds("b"));
        unsettled.release("a");
        assert!(!unsettled.holds("a"));
    }
}
