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
//! Three ways to take it:
//! - [`Admission::enter`]: waits on the calling thread; the guard borrows
//!   the barrier (a synchronous guardian);
//! - [`Admission::enter_owned`]: the same on an `Arc<Admission>`, the guard
//!   owning its share of the barrier (`'static`);
//! - [`Admission::enter_async`]: an async host's. The future waits without
//!   blocking a thread (it is woken when the holder drops its guard), and
//!   the guard it gives is `'static + Send`: it can be held across an
//!   `.await` and moved between a runtime's workers, so a host's async file
//!   write or release runs under it. The future is cancel-safe: dropped
//!   before it is ready, it took nothing.
//!
//! Every guard is `Send` and `Sync` and releases the barrier when dropped,
//! on whatever thread. A holder that panicked does not poison it: the
//! barrier protects no data of its own, only an ordering. It is fair to no
//! one: a waiter woken by a release may find the barrier taken again.
//!
//! The barrier needs no async runtime (its waits are a condition variable
//! for threads and wakers for futures), so the engine builds without tokio
//! and on every platform; see `docs/CHOICES.md`.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

/// One session's admission barrier (see the module docs).
#[derive(Debug, Default)]
pub struct Admission {
    state: Mutex<State>,
    /// Threads waiting in [`Admission::enter`].
    freed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    held: bool,
    /// Futures waiting in [`Admission::enter_async`], woken (all of them)
    /// when the barrier is released.
    wakers: Vec<Waker>,
}

/// Proof that the holder holds a session's admission barrier, until it is
/// dropped.
///
/// `Send` and `Sync`: an async host holds it across `.await` points (its
/// task may resume on another worker); it releases the barrier wherever it
/// is dropped. The guards of [`Admission::enter_owned`] and
/// [`Admission::enter_async`] are `AdmissionGuard<'static>`.
#[derive(Debug)]
#[must_use = "the barrier is released as soon as the guard is dropped"]
pub struct AdmissionGuard<'a> {
    held: Held<'a>,
}

#[derive(Debug)]
enum Held<'a> {
    Borrowed(&'a Admission),
    Owned(Arc<Admission>),
}

impl Admission {
    /// A new, free barrier.
    pub fn new() -> Admission {
        Admission::default()
    }

    /// The state, whoever panicked while holding its lock.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits on the calling thread until the barrier is free, and takes it.
    fn wait_and_take(&self) {
        let mut st = self.state();
        while st.held {
            st = self.freed.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st.held = true;
    }

    /// Takes the barrier if it is free now.
    fn try_take(&self) -> bool {
        let mut st = self.state();
        !std::mem::replace(&mut st.held, true)
    }

    /// Releases the barrier and wakes its waiters.
    fn free(&self) {
        let wakers = {
            let mut st = self.state();
            st.held = false;
            std::mem::take(&mut st.wakers)
        };
        self.freed.notify_one();
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Takes the barrier, waiting while another holder holds it.
    ///
    /// Blocking: do not call it on an async worker (an async host awaits
    /// [`Admission::enter_async`]). Never fails: a holder that panicked
    /// left nothing half-done that the barrier protects.
    pub fn enter(&self) -> AdmissionGuard<'_> {
        self.wait_and_take();
        AdmissionGuard { held: Held::Borrowed(self) }
    }

    /// Takes the barrier like [`Admission::enter`], the guard owning a share
    /// of it (`'static`: it can be stored or moved to another thread).
    pub fn enter_owned(self: &Arc<Self>) -> AdmissionGuard<'static> {
        self.wait_and_take();
        AdmissionGuard { held: Held::Owned(Arc::clone(self)) }
    }

    /// Takes the barrier from async code: the future is ready once the
    /// barrier is taken, and waits (woken by the holder's release) without
    /// blocking the thread that polls it. The guard is `'static + Send`:
    /// hold it across `.await`.
    ///
    /// Cancel-safe: a future dropped before it is ready took nothing.
    pub fn enter_async(self: &Arc<Self>) -> EnterAsync {
        EnterAsync { admission: Some(Arc::clone(self)) }
    }

    /// Takes the barrier if it is free now; `None` while another holds it.
    pub fn try_enter(&self) -> Option<AdmissionGuard<'_>> {
        // `then`, not `then_some`: a guard built and dropped would free the barrier.
        self.try_take().then(|| AdmissionGuard { held: Held::Borrowed(self) })
    }
}

impl Drop for AdmissionGuard<'_> {
    fn drop(&mut self) {
        match &self.held {
            Held::Borrowed(a) => a.free(),
            Held::Owned(a) => a.free(),
        }
    }
}

/// The future of [`Admission::enter_async`].
#[derive(Debug)]
#[must_use = "a future does nothing unless awaited"]
pub struct EnterAsync {
    /// `None` once it gave its guard.
    admission: Option<Arc<Admission>>,
}

impl Future for EnterAsync {
    type Output = AdmissionGuard<'static>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<AdmissionGuard<'static>> {
        let Some(admission) = self.admission.take() else {
            panic!("EnterAsync polled after it gave its guard");
        };
        {
            let mut st = admission.state();
            if st.held {
                // Registered under the lock the release takes: no wake-up
                // can be lost between this look and the registration.
                if !st.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                    st.wakers.push(cx.waker().clone());
                }
                drop(st);
                self.admission = Some(admission);
                return Poll::Pending;
            }
            st.held = true;
        }
        Poll::Ready(AdmissionGuard { held: Held::Owned(admission) })
    }
}

#[cfg(test)]
mod tests;
