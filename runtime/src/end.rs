//! An execution's state changes as a descriptor an async host can poll.
//!
//! [`Execution::wait_until`](super::Execution::wait_until) blocks a thread.
//! An async host instead asks [`Execution::end_signal`](super::Execution::end_signal)
//! for an [`EndSignal`]: an `eventfd(2)` that becomes readable whenever the
//! execution's state changes (and at once if it is already final). It
//! registers it with its reactor (tokio's `AsyncFd`, mio, `epoll`), and on
//! each readiness calls [`EndSignal::clear`] and reads
//! [`Execution::state`](super::Execution::state) (a lock, never a wait).
//! Each call makes a descriptor of its own, so any number of waiters can
//! watch one execution; a dropped signal is forgotten at the next change.
//!
//! # References
//! - [`eventfd(2)`](https://man7.org/linux/man-pages/man2/eventfd.2.html)

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

use rustix::event::{eventfd, EventfdFlags};

use winx_release_kernel::sys::lock;

/// A descriptor that is readable once the execution's state has changed
/// since the last [`EndSignal::clear`] (non-blocking, close-on-exec).
///
/// It owns its descriptor: [`AsRawFd::as_raw_fd`] returns the same open
/// descriptor for the signal's whole life (what tokio's
/// `AsyncFd::register` asks of its caller).
#[derive(Debug, Clone)]
pub struct EndSignal {
    fd: Arc<OwnedFd>,
}

impl EndSignal {
    /// Consumes what made the descriptor readable; never blocks. Returns
    /// whether there was anything.
    ///
    /// # Errors
    /// A read error other than `EAGAIN`.
    pub fn clear(&self) -> io::Result<bool> {
        let mut buf = [0u8; 8];
        match rustix::io::read(&*self.fd, &mut buf) {
            Ok(_) => Ok(true),
            Err(rustix::io::Errno::AGAIN) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

impl AsFd for EndSignal {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for EndSignal {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// The signals handed out for one execution.
#[derive(Debug, Default)]
pub(crate) struct EndSignals {
    fds: Mutex<Vec<Arc<OwnedFd>>>,
}

impl EndSignals {
    /// A new signal, readable at once when `ready_now`.
    pub(crate) fn add(&self, ready_now: bool) -> io::Result<EndSignal> {
        let fd = Arc::new(eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?);
        if ready_now {
            poke(&fd);
        }
        lock(&self.fds).push(fd.clone());
        Ok(EndSignal { fd })
    }

    /// Makes every live signal readable and forgets the dropped ones.
    pub(crate) fn notify(&self) {
        let mut fds = lock(&self.fds);
        fds.retain(|fd| Arc::strong_count(fd) > 1);
        for fd in fds.iter() {
            poke(fd);
        }
    }
}

fn poke(fd: &OwnedFd) {
    // Adds 1 to the counter; EAGAIN (the counter at its maximum) already
    // means readable.
    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(s: &EndSignal) -> bool {
        let mut fds = [rustix::event::PollFd::new(s, rustix::event::PollFlags::IN)];
        rustix::event::poll(&mut fds, Some(&rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 })).unwrap() == 1
    }

    #[test]
    fn a_change_makes_every_live_signal_readable_once() {
        let ends = EndSignals::default();
        let (a, b) = (ends.add(false).unwrap(), ends.add(false).unwrap());
        assert!(!readable(&a) && !readable(&b));
        assert!(!a.clear().unwrap(), "nothing to clear yet");
        ends.notify();
        assert!(readable(&a) && readable(&b));
        assert!(a.clear().unwrap());
        assert!(!readable(&a), "cleared");
        assert!(readable(&b), "one waiter's clear is not another's");
        // A dropped signal is forgotten at the next change.
        drop(b);
        ends.notify();
        assert_eq!(lock(&ends.fds).len(), 1);
        assert!(readable(&a));
    }

    #[test]
    fn a_signal_of_a_final_state_is_readable_at_once() {
        let ends = EndSignals::default();
        let s = ends.add(true).unwrap();
        assert!(readable(&s));
        assert!(s.clear().unwrap());
        assert!(!readable(&s));
    }
}
