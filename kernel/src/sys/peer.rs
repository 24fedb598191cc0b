//! The pidfd of a Unix socket's peer (`SO_PEERPIDFD`, Linux 6.5).
//!
//! `SO_PEERCRED` gives the pid the peer had when it connected; by the time
//! the pid is used it may name another process. `SO_PEERPIDFD` gives a
//! pidfd of the very process that connected, taken by the kernel from the
//! socket itself, so no pid reuse can slip in between.
//!
//! Neither rustix nor `libc` names the option yet, so its one
//! `getsockopt(2)` call is made here, in one of the engine's few fenced
//! files allowed `unsafe`.
//!
//! # References
//! - [`unix(7)`](https://man7.org/linux/man-pages/man7/unix.7.html) (`SO_PEERPIDFD`)
//! - [`getsockopt(2)`](https://man7.org/linux/man-pages/man2/getsockopt.2.html)
//! - [`pidfd_open(2)`](https://man7.org/linux/man-pages/man2/pidfd_open.2.html)
#![deny(clippy::undocumented_unsafe_blocks)]

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `SO_PEERPIDFD` of `<asm-generic/socket.h>`.
const SO_PEERPIDFD: libc::c_int = 77;

/// A pidfd of the process at the other end of the connected Unix socket
/// `socket`, taken from the socket itself; `None` where the kernel does not
/// offer it (before Linux 6.5) or the peer is gone.
///
/// # References
/// - [`unix(7)`](https://man7.org/linux/man-pages/man7/unix.7.html) (`SO_PEERPIDFD`)
pub fn peer_pidfd(socket: BorrowedFd<'_>) -> Option<OwnedFd> {
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `getsockopt` writes at most `len` bytes into `fd`, a local
    // integer of exactly that size, and `len` itself; `socket` stays open
    // for the call.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            (&mut fd as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 || fd < 0 || len as usize != std::mem::size_of::<libc::c_int>() {
        return None;
    }
    // SAFETY: on success the kernel installed `fd` as a new descriptor of
    // this process that nothing else owns.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn the_peer_of_a_socket_pair_is_this_process() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let Some(fd) = peer_pidfd(a.as_fd()) else {
            eprintln!("SKIPPED: SO_PEERPIDFD is not offered by this kernel");
            return;
        };
        // The pidfd names this process: its fdinfo says `Pid: <ours>`.
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).unwrap();
        let pid = info.lines().find_map(|l| l.strip_prefix("Pid:")).map(|p| p.trim().to_owned());
        assert_eq!(pid, Some(std::process::id().to_string()), "{info}");
    }
}
