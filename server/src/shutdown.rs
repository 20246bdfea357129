//! The server-wide shutdown signal: set once, seen by the accept loop and by live readers;
//! and the process signals that fire it ([`StopSignals`]).
//!
//! Live reads (long-poll waits, SSE bodies) end when it fires so clients reconnect elsewhere
//! or later, resuming from their offsets; nothing is lost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::Notify;

#[derive(Default)]
pub(crate) struct Shutdown {
    triggered: AtomicBool,
    notify: Arc<Notify>,
}

impl Shutdown {
    /// Fires the signal (idempotent). The server calls it through `App::begin_shutdown`,
    /// which also wakes the SSE bodies: they do not wait on this signal themselves.
    pub(crate) fn trigger(&self) {
        self.triggered.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    pub(crate) fn is_triggered(&self) -> bool {
        self.triggered.load(Ordering::Acquire)
    }

    /// A future that completes once the signal fires, even if it already has.
    pub(crate) async fn wait(&self) {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.is_triggered() {
            return;
        }
        notified.await;
    }
}

/// SIGINT and SIGTERM, watched from the first moment of a run, so that one that comes while
/// the engine starts (a recovery can take seconds) is kept. Watched only later, a SIGINT sent
/// then was lost where the process had inherited it as ignored (a server started in the
/// background by a shell script), and a SIGTERM killed the process outright.
pub(crate) struct StopSignals {
    interrupt: Option<Signal>,
    terminate: Option<Signal>,
}

impl StopSignals {
    /// Starts watching; must be called inside the runtime.
    pub(crate) fn watch() -> StopSignals {
        let watch = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(watched) => Some(watched),
            Err(error) => {
                tracing::warn!(%error, "cannot watch {name}");
                None
            }
        };
        StopSignals {
            interrupt: watch(SignalKind::interrupt(), "SIGINT"),
            terminate: watch(SignalKind::terminate(), "SIGTERM"),
        }
    }

    /// Waits for the next of them (at once if one came already): its name and number.
    pub(crate) async fn next(&mut self) -> (&'static str, libc::c_int) {
        async fn received(watched: &mut Option<Signal>) {
            match watched {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        }
        tokio::select! {
            () = received(&mut self.interrupt) => ("SIGINT", libc::SIGINT),
            () = received(&mut self.terminate) => ("SIGTERM", libc::SIGTERM),
        }
    }
}

/// Ends the process at once by `signal`'s default action, as if it had never been watched.
pub(crate) fn die_by(signal: libc::c_int) -> ! {
    // SAFETY: restoring a signal's default action and raising it are plain system calls;
    // no other code relies on the handler being installed once the process ends.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
    // Only if the signal could not end the process (it is blocked on this thread).
    std::process::abort()
}
