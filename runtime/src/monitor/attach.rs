//! A shell's monitor's socket: where the next runtime (a guardian that
//! was killed, restarted or upgraded) takes the shell over.
//!
//! The monitor listens on the abstract socket [`super::socket_name`] of its
//! execution (abstract: no file in the data directory, which every release
//! scans and where a socket would fail the scan closed; the name is gone
//! with the monitor). A peer whose credentials (`SO_PEERCRED`) are not this
//! user's is closed at once; the runtime checks in turn that the socket's
//! owner is the monitor it recorded (its pid and start time). To a peer of this user it sends one message,
//! `W <version> <leader pid>\n`, carrying the terminal's follower, the
//! runtime's end of the hook socket and, when the runtime kept it, the
//! terminal's controller; then `X <code>\n` once the leader exits (at once
//! when it has). Several peers may attach; each gets the same.
//!
//! # References
//! - [`unix(7)`, `SO_PEERCRED`](https://man7.org/linux/man-pages/man7/unix.7.html)

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::Path;
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use std::sync::{Arc, Mutex};

use super::names::{socket_name, PROTOCOL};
use winx_release_kernel::sys::lock;

/// What attached peers share with the monitor's main loop.
pub(super) struct Attach {
    state: Mutex<State>,
}

struct State {
    /// The leader's exit, once it exited (its code, when known).
    exited: Option<Option<i32>>,
    peers: Vec<UnixStream>,
}

fn exit_line(code: Option<i32>) -> String {
    format!("X {}\n", code.map_or_else(|| "?".to_owned(), |c| c.to_string()))
}

impl Attach {
    /// Tells every attached peer that the leader exited.
    pub(super) fn leader_exited(&self, code: Option<i32>) {
        let mut st = lock(&self.state);
        st.exited = Some(code);
        let line = exit_line(code);
        st.peers.retain_mut(|p| p.write_all(line.as_bytes()).is_ok());
    }
}

/// Listens on the socket of execution `id` (whose directory is `dir`) for
/// the shell whose leader is `leader`, handing `held` (the hook's runtime
/// end, then the controller when given) with the monitor's standard output
/// (the follower) to every peer of this user. `None` when the socket
/// cannot be made: the shell then does not outlive its runtime (said on
/// standard error).
///
/// Once `dir` is gone (the data directory removed: no runtime can account
/// for the execution or take the shell over any more) the monitor lets go
/// of what it holds and stops listening: with no runtime holding the
/// controller either, the kernel hangs the terminal up, as it did before
/// monitors when a runtime ended. It looks every [`DIR_LOOK`].
pub(super) fn listen(id: &str, dir: &Path, leader: i32, held: Vec<OwnedFd>) -> Option<Arc<Attach>> {
    let name = socket_name(id);
    let listener = match SocketAddr::from_abstract_name(name.as_bytes()).and_then(|a| UnixListener::bind_addr(&a)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("winx-release monitor: cannot listen on @{name}: {e}");
            return None;
        }
    };
    let follower = std::io::stdout().as_fd().try_clone_to_owned().ok()?;
    let attach = Arc::new(Attach { state: Mutex::new(State { exited: None, peers: Vec::new() }) });
    let shared = attach.clone();
    let me = rustix::process::getuid();
    let dir = dir.to_path_buf();
    let spawned = std::thread::Builder::new().stack_size(64 * 1024).spawn(move || {
        let timeout = Timespec { tv_sec: DIR_LOOK.as_secs() as _, tv_nsec: 0 };
        loop {
            let mut fds = [PollFd::new(&listener, PollFlags::IN)];
            match poll(&mut fds, Some(&timeout)) {
                Ok(0) => {
                    if !dir.exists() {
                        // `held` and `follower` are dropped with the thread.
                        return;
                    }
                    continue;
                }
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(_) => return,
            }
            let Ok((mut conn, _)) = listener.accept() else { continue };
            if rustix::net::sockopt::socket_peercred(&conn).map(|c| c.uid) != Ok(me) {
                continue;
            }
            let mut fds = vec![follower.as_fd()];
            fds.extend(held.iter().map(|f| f.as_fd()));
            let mut st = lock(&shared.state);
            if super::fds::send(&conn, &format!("W {PROTOCOL} {leader}\n"), &fds).is_err() {
                continue;
            }
            if let Some(code) = st.exited {
                let _ = conn.write_all(exit_line(code).as_bytes());
            }
            // A peer that hung up (a runtime that ended) is let go: a
            // monitor taken over many times holds only the live ones.
            st.peers.retain(still_attached);
            st.peers.push(conn);
        }
    });
    spawned.ok().map(|_| attach)
}

/// Whether `peer`, an attached runtime, still holds its end: a runtime
/// never writes to the monitor, so anything readable (its end closed) or a
/// hang-up means it is gone.
///
/// # References
/// - [`poll(2)`](https://man7.org/linux/man-pages/man2/poll.2.html)
fn still_attached(peer: &UnixStream) -> bool {
    let mut fds = [PollFd::new(peer, PollFlags::IN | PollFlags::RDHUP)];
    let now = Timespec { tv_sec: 0, tv_nsec: 0 };
    matches!(poll(&mut fds, Some(&now)), Ok(0))
}

/// How often a shell's monitor looks whether its execution's directory is
/// still there.
const DIR_LOOK: Duration = Duration::from_secs(1);
