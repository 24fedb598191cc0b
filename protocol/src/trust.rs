//! Whether a guardian socket may be trusted (contract section 1).
//!
//! A frontend sends nothing to a socket that another user could serve
//! (architecture invariant 9). Two rules decide it, each in exactly one
//! function here, and every party calls these rather than copying them:
//!
//! - [`trusted_socket_dir`]: the socket's directory is owned by this user,
//!   has mode `0700`, and is not a symbolic link. The frontend checks it
//!   before it connects, before it starts a guardian and before it writes a
//!   log beside the socket; the guardian checks it before it binds.
//! - [`check_peer`]: the peer of a connected Unix socket (`SO_PEERCRED`)
//!   runs as this user. The frontend checks the guardian it reached before
//!   it sends `hello`; the guardian checks every client before it reads.
//!
//! Failures are [`io::ErrorKind::PermissionDenied`] errors whose message
//! names what failed (a frontend reports them as `owner_unavailable`).
//!
//! # References
//! - [`unix(7)`](https://man7.org/linux/man-pages/man7/unix.7.html) (`SO_PEERCRED`)
//! - [`open(2)`](https://man7.org/linux/man-pages/man2/open.2.html) (`O_NOFOLLOW`, `O_DIRECTORY`)
//! - [`mkdir(2)`](https://man7.org/linux/man-pages/man2/mkdir.2.html)

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{Mode, OFlags, CWD};

/// The directory of a socket path: its parent, or `.` for a bare name.
pub fn socket_dir(socket: &Path) -> &Path {
    match socket.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn untrusted(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, msg)
}

/// Opens `dir` and checks that it may hold a guardian socket: a directory,
/// not a symbolic link, owned by the effective uid, mode exactly `0700`.
///
/// With `create`, a missing `dir` is created first (missing parents too,
/// mode `0700`); only a directory this call created is ever `fchmod`ed (to
/// undo the umask). An existing directory is never changed: a wrong owner
/// or mode is refused, not repaired.
///
/// Returns the opened directory. Errors are `PermissionDenied` naming the
/// failed check, or the error of opening or creating `dir`.
///
/// # References
/// - [`open(2)`](https://man7.org/linux/man-pages/man2/open.2.html),
///   [`fstat(2)`](https://man7.org/linux/man-pages/man2/fstat.2.html),
///   [`mkdir(2)`](https://man7.org/linux/man-pages/man2/mkdir.2.html)
pub fn trusted_socket_dir(dir: &Path, create: bool) -> io::Result<OwnedFd> {
    let mut created = false;
    if create {
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            if !parent.exists() {
                std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
                    .create(parent)?;
            }
        }
        match rustix::fs::mkdirat(CWD, dir, Mode::RWXU) {
            Ok(()) => created = true,
            Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(io::Error::new(io::Error::from(e).kind(), format!("{}: {e}", dir.display()))),
        }
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(CWD, dir, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(e) if e == rustix::io::Errno::LOOP || e == rustix::io::Errno::NOTDIR => {
            let what = match rustix::fs::lstat(dir) {
                Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Symlink => {
                    "is a symbolic link"
                }
                _ => "is not a directory",
            };
            return Err(untrusted(format!("socket directory {} {what}", dir.display())));
        }
        Err(e) => return Err(io::Error::new(io::Error::from(e).kind(), format!("{}: {e}", dir.display()))),
    };
    if created {
        rustix::fs::fchmod(&fd, Mode::RWXU)?;
    }
    let st = rustix::fs::fstat(&fd)?;
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != me {
        return Err(untrusted(format!("socket directory {} is owned by uid {}, not {me}", dir.display(), st.st_uid)));
    }
    let mode = st.st_mode & 0o7777;
    if mode != 0o700 {
        return Err(untrusted(format!("socket directory {} has mode {mode:04o}, not 0700", dir.display())));
    }
    Ok(fd)
}

/// Checks that the peer of the connected Unix socket `sock` runs as the
/// effective uid of this process (`SO_PEERCRED`).
///
/// For a client, the peer credentials are the listener's at `listen(2)`;
/// for a server, the client's at `connect(2)`. Errors are
/// `PermissionDenied` naming the peer's uid, or the error of
/// `getsockopt`.
///
/// # References
/// - [`unix(7)`](https://man7.org/linux/man-pages/man7/unix.7.html) (`SO_PEERCRED`)
pub fn check_peer<Fd: AsFd>(sock: Fd) -> io::Result<()> {
    let cred = rustix::net::sockopt::socket_peercred(sock)
        .map_err(|e| untrusted(format!("no peer credentials (SO_PEERCRED): {e}")))?;
    let me = rustix::process::geteuid().as_raw();
    if cred.uid.as_raw() != me {
        return Err(untrusted(format!("the socket's peer runs as uid {}, not {me}", cred.uid.as_raw())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn creates_private_and_refuses_what_it_did_not_make() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("a/b/winx");
        trusted_socket_dir(&d, true).unwrap();
        assert_eq!(std::fs::metadata(&d).unwrap().permissions().mode() & 0o7777, 0o700);
        // An existing 0755 directory is refused and left as it is.
        let open = t.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = trusted_socket_dir(&open, true).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        assert!(e.to_string().contains("mode 0755"), "{e}");
        assert_eq!(std::fs::metadata(&open).unwrap().permissions().mode() & 0o7777, 0o755);
        // A link to a good directory is refused.
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&d, &link).unwrap();
        let e = trusted_socket_dir(&link, false).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        // Missing, without create: the open error.
        assert_eq!(trusted_socket_dir(&t.path().join("none"), false).unwrap_err().kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn another_owner_is_refused() {
        if !rustix::process::geteuid().is_root() {
            return; // only root can give a directory away
        }
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("theirs");
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&d, Some(65534), Some(65534)).unwrap();
        let e = trusted_socket_dir(&d, true).unwrap_err();
        assert!(e.to_string().contains("owned by uid 65534"), "{e}");
    }

    #[test]
    fn peer_of_a_socketpair_is_me() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        check_peer(&a).unwrap();
    }
}
