//! Descriptors passed over a Unix socket (`SCM_RIGHTS`) with one line of
//! text, through rustix's safe wrappers.
//!
//! # References
//! - [`unix(7)`, `SCM_RIGHTS`](https://man7.org/linux/man-pages/man7/unix.7.html)
//! - [`sendmsg(2)`](https://man7.org/linux/man-pages/man2/sendmsg.2.html),
//!   [`recvmsg(2)`](https://man7.org/linux/man-pages/man2/recvmsg.2.html)

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage,
    SendFlags,
};

/// The most descriptors one message carries.
pub(crate) const MAX_FDS: usize = 3;

/// Sends `line` (one line, newline included) with `fds` in one message.
pub(crate) fn send(socket: impl AsFd, line: &str, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("too many descriptors for one message"));
    }
    let n = sendmsg(socket, &[IoSlice::new(line.as_bytes())], &mut control, SendFlags::NOSIGNAL)?;
    if n != line.len() {
        return Err(io::Error::other("a short message"));
    }
    Ok(())
}

/// Receives one message: its text (at most 256 bytes) and the
/// descriptors it carried (close-on-exec).
pub(crate) fn recv(socket: impl AsFd) -> io::Result<(String, Vec<OwnedFd>)> {
    let mut buf = [0u8; 256];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let msg = loop {
        match recvmsg(&socket, &mut [IoSliceMut::new(&mut buf)], &mut control, RecvFlags::CMSG_CLOEXEC) {
            Err(rustix::io::Errno::INTR) => {}
            other => break other?,
        }
    };
    let mut fds = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(got) = m {
            fds.extend(got);
        }
    }
    Ok((String::from_utf8_lossy(&buf[..msg.bytes]).into_owned(), fds))
}
