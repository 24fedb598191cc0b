//! Guardian connections kept between tool calls.
//!
//! A tool call that reaches the guardian used to open a connection and say
//! `hello` each time: on the guardian's side an `accept`, its peer checks
//! and a hand-off to a connection thread, on this side the socket
//! directory's trust check, `connect` and the peer check, and one round trip
//! for `hello` before the request itself (about 0.25 ms of a 4 ms release
//! here, benches/log stop 42). A call that ended with its reply read whole
//! gives its connection back, and the next call takes it when
//! [`GuardianClient::is_reusable`] says it is still open and quiet.
//!
//! What a kept connection keeps: the guardian at its other end, which is
//! the process that said `hello` on it (a connection cannot change
//! processes), and that `hello`. So a release on it is checked against the
//! same instance as at `Initialize`, as on a new connection; a guardian
//! that stopped has closed its connections (the check sees the hang-up and
//! the call connects anew, to whatever listens now). A guardian serves a
//! connection on a thread of its own for as long as it stays open, with no
//! bound on their number (`guardian/src/pool.rs`), so a kept connection
//! holds one of those threads, blocked in a read: at most [`KEPT`] per
//! frontend. While a connection of a frontend is open, the guardian counts
//! that frontend among the peers whose descriptors never make a target
//! `in_use` (it said `hello` and runs the guardian's executable:
//! `guardian/src/sessions.rs`, `in_use_exempt`), as it did for the length
//! of each call before; a kept connection makes that true between calls
//! too. A frontend holds a helper open only while a call of its own reads
//! or pins it; what an execution holds is looked at as before.

use std::sync::Mutex;

use winx_release_kernel::sys::lock;
use winx_release_protocol::client::{GuardianClient, Hello};

/// Most connections a frontend keeps at once (one per tool call running
/// at the same time, up to this).
pub(crate) const KEPT: usize = 4;

/// The kept connections of one frontend, each with its `hello`.
#[derive(Debug, Default)]
pub(crate) struct Kept(Mutex<Vec<(GuardianClient, Hello)>>);

impl Kept {
    /// A kept connection that is still open and quiet, if any; the others
    /// are closed.
    pub(crate) fn take(&self) -> Option<(GuardianClient, Hello)> {
        let mut kept = lock(&self.0);
        while let Some((client, hello)) = kept.pop() {
            if client.is_reusable() {
                return Some((client, hello));
            }
        }
        None
    }

    /// Keeps `client` (whose last reply was read whole) for the next call,
    /// unless [`KEPT`] are kept already.
    pub(crate) fn put(&self, client: GuardianClient, hello: Hello) {
        let mut kept = lock(&self.0);
        if kept.len() < KEPT {
            kept.push((client, hello));
        }
    }
}
