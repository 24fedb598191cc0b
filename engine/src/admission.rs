//! The per-session admission barrier a release runs under.
//!
//! A release is safe only if nothing of its session can start between the
//! owner's answers (who still runs, what is pending) and the end of the
//! release. Every action that can start something of a session — a command
//! submitted, a byte written to its terminal, a queued command started — and
//! every release of it is made while holding that session's [`Admission`].
//! [`crate::release()`] takes an [`AdmissionGuard`] as an argument, so a call
//! that does not hold a barrier does not compile.
//!
//! The compiler checks that *a* barrier is held, not that it is the
//! session's own: keep one [`Admission`] per session (next to the session's
//! directory identity, `winx_release_runtime::SessionKey` on Linux), and
//! never share one between sessions for convenience: that is correct but
//! serialises the sessions.
//!
//! The barrier is a [`std::sync::Mutex`]: a thread that panicked while
//! holding it does not poison it (the guard is taken over), since the
//! barrier protects no data of its own, only an ordering. An async host
//! takes it on a blocking thread (`spawn_blocking`) together with the work
//! it guards; see `runtime/examples/tokio_guardian.rs`.

use std::sync::{Mutex, MutexGuard};

/// One session's admission barrier (see the module docs).
#[derive(Debug, Default)]
pub struct Admission {
    lock: Mutex<()>,
}

/// Proof that the current thread holds a session's admission barrier, until
/// it is dropped.
///
/// Not `Send`: the barrier is released by the thread that took it.
#[derive(Debug)]
#[must_use = "the barrier is released as soon as the guard is dropped"]
pub struct AdmissionGuard<'a> {
    _held: MutexGuard<'a, ()>,
}

impl Admission {
    /// A new, free barrier.
    pub fn new() -> Admission {
        Admission::default()
    }

    /// Takes the barrier, waiting while another thread holds it.
    ///
    /// Blocking: do not call it on an async worker (take it inside
    /// `spawn_blocking` with the work it guards). Never fails: a holder that
    /// panicked left nothing half-done that the barrier protects.
    pub fn enter(&self) -> AdmissionGuard<'_> {
        AdmissionGuard { _held: self.lock.lock().unwrap_or_else(|e| e.into_inner()) }
    }

    /// Takes the barrier if it is free now; `None` while another thread
    /// holds it.
    // Only the barrier's own tests take it without waiting.
    #[cfg(test)]
    pub(crate) fn try_enter(&self) -> Option<AdmissionGuard<'_>> {
        use std::sync::TryLockError;
        match self.lock.try_lock() {
            Ok(g) => Some(AdmissionGuard { _held: g }),
            Err(TryLockError::Poisoned(e)) => Some(AdmissionGuard { _held: e.into_inner() }),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn one_holder_at_a_time() {
        let a = Arc::new(Admission::new());
        let held = a.enter();
        assert!(a.try_enter().is_none(), "a second holder while the first holds it");
        let entered = Arc::new(AtomicBool::new(false));
        let t = {
            let (a, entered) = (a.clone(), entered.clone());
            std::thread::spawn(move || {
                let _g = a.enter();
                entered.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!entered.load(Ordering::SeqCst), "enter() returned while the barrier was held");
        drop(held);
        t.join().unwrap();
        assert!(entered.load(Ordering::SeqCst));
        assert!(a.try_enter().is_some());
    }

    #[test]
    fn a_panicked_holder_does_not_poison_it() {
        let a = Arc::new(Admission::new());
        let b = a.clone();
        let _ = std::thread::spawn(move || {
            let _g = b.enter();
            panic!("holder panics");
        })
        .join();
        assert!(a.try_enter().is_some());
        drop(a.enter());
    }
}
