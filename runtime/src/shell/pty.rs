//! Opening a pseudo-terminal pair, for a shell whose host has no PTY code
//! of its own.
//!
//! rustix's `pty` module wraps `posix_openpt`, `grantpt`, `unlockpt` and
//! `ptsname` without `unsafe` in this crate; the follower is opened by the
//! name `ptsname` gives, `O_NOCTTY` (the guardian never takes a controlling
//! terminal), and the window size is set on the controller.
//!
//! # References
//! - [`posix_openpt(3)`](https://man7.org/linux/man-pages/man3/posix_openpt.3.html),
//!   [`grantpt(3)`](https://man7.org/linux/man-pages/man3/grantpt.3.html),
//!   [`unlockpt(3)`](https://man7.org/linux/man-pages/man3/unlockpt.3.html),
//!   [`ptsname(3)`](https://man7.org/linux/man-pages/man3/ptsname.3.html)
//! - [`pty(7)`](https://man7.org/linux/man-pages/man7/pty.7.html)

use std::io;
use std::os::fd::OwnedFd;

use rustix::fs::{Mode, OFlags, CWD};
use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
use rustix::termios::{tcsetwinsize, Winsize};

/// A terminal's controller (the side a host reads and writes) and follower
/// (the side the shell gets as its standard streams and controlling
/// terminal).
#[derive(Debug)]
pub(crate) struct PtyPair {
    /// The controller (`/dev/ptmx` side).
    pub controller: OwnedFd,
    /// The follower (`/dev/pts/N`), opened `O_NOCTTY`.
    pub follower: OwnedFd,
}

/// Opens a new PTY pair of `rows` × `cols` characters.
///
/// Both descriptors are close-on-exec.
///
/// # References
/// - [`pty(7)`](https://man7.org/linux/man-pages/man7/pty.7.html)
/// - [`TIOCSWINSZ`](https://man7.org/linux/man-pages/man2/TIOCSWINSZ.2const.html)
pub(crate) fn open_pair(rows: u16, cols: u16) -> io::Result<PtyPair> {
    let controller = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    grantpt(&controller)?;
    unlockpt(&controller)?;
    let name = ptsname(&controller, Vec::new())?;
    let follower =
        rustix::fs::openat(CWD, name.as_c_str(), OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC, Mode::empty())?;
    tcsetwinsize(&controller, Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 })?;
    // Non-blocking: a write waits for room only as long as its caller says
    // (`Shell::write`), and the output reader polls before it reads.
    rustix::fs::fcntl_setfl(&controller, rustix::fs::fcntl_getfl(&controller)? | OFlags::NONBLOCK)?;
    Ok(PtyPair { controller, follower })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the controller writes, the follower reads (canonical mode: a
    /// line at a time), and the window size is the one asked for.
    #[test]
    fn a_pair_carries_bytes_and_its_size() {
        let p = open_pair(30, 100).unwrap();
        rustix::io::write(&p.controller, b"hi\n").unwrap();
        let mut buf = [0u8; 16];
        let n = rustix::io::read(&p.follower, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"hi\n");
        let ws = rustix::termios::tcgetwinsize(&p.follower).unwrap();
        assert_eq!((ws.ws_row, ws.ws_col), (30, 100));
    }
}
