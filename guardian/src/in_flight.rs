//! One request in flight: counted while it runs, however it ends, and a
//! panic in its handling caught (the connection's side of a bug).

use std::sync::atomic::{AtomicUsize, Ordering};

/// One request counted in flight from [`Counted::raise`] until it is
/// dropped, however the request ends (a panic included): a stopping
/// guardian waits for it, and never for one that is gone.
pub(crate) struct Counted<'a>(&'a AtomicUsize);

impl<'a> Counted<'a> {
    pub(crate) fn raise(in_flight: &'a AtomicUsize) -> Counted<'a> {
        in_flight.fetch_add(1, Ordering::SeqCst);
        Counted(in_flight)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs one request's `handle`, and turns a panic (a bug) into `None`: the
/// connection is then closed without a reply, which a client reads as a
/// lost reply (the outcome unknown: a release's journal is recovered at the
/// next start), while the guardian and its other connections go on. The
/// session's admission barrier and every lock the request held are
/// released on the way out (they are guards; locks are taken past a
/// poisoning).
pub(crate) fn caught<T>(handle: impl FnOnce() -> T) -> Option<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(handle)) {
        Ok(v) => Some(v),
        Err(_) => {
            tracing::error!("a request panicked (a bug); its connection is closed without a reply");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request that panics gets no reply and is no longer in flight: a
    /// stop does not wait for it for ever, and the thread serving it lives.
    #[test]
    fn a_request_that_panics_is_no_longer_in_flight_and_gets_no_reply() {
        let in_flight = AtomicUsize::new(0);
        let answered = {
            let _counted = Counted::raise(&in_flight);
            assert_eq!(in_flight.load(Ordering::SeqCst), 1);
            caught(|| -> (Vec<u8>, bool) { panic!("a bug in a request's handling") })
        };
        assert!(answered.is_none());
        assert_eq!(in_flight.load(Ordering::SeqCst), 0);
        let fine = {
            let _counted = Counted::raise(&in_flight);
            caught(|| (b"{}\n".to_vec(), false))
        };
        assert_eq!(fine, Some((b"{}\n".to_vec(), false)));
        assert_eq!(in_flight.load(Ordering::SeqCst), 0);
    }
}
