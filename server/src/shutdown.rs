//! The server-wide shutdown signal: set once, seen by the accept loop and by live readers.
//!
//! Live reads (long-poll waits, SSE bodies) end when it fires so clients reconnect elsewhere
//! or later, resuming from their offsets; nothing is lost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

#[derive(Default)]
pub struct Shutdown {
    triggered: AtomicBool,
    notify: Arc<Notify>,
}

impl Shutdown {
    /// Fires the signal (idempotent). The server calls it through `App::begin_shutdown`,
    /// which also wakes the SSE bodies: they do not wait on this signal themselves.
    pub fn trigger(&self) {
        self.triggered.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    pub fn is_triggered(&self) -> bool {
        self.triggered.load(Ordering::Acquire)
    }

    /// A future that completes once the signal fires, even if it already has.
    pub async fn wait(&self) {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.is_triggered() {
            return;
        }
        notified.await;
    }
}
