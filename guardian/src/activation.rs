//! Running under systemd: socket activation and readiness.
//!
//! A `.socket` unit binds the guardian socket and hands it to the service
//! as file descriptor 3 with `LISTEN_FDS=1` and `LISTEN_PID` set to the
//! guardian's pid ([`inherited_listener`], through the `listenfd` crate,
//! which checks that the descriptor is a listening Unix stream socket and
//! marks it close-on-exec). Once the guardian serves, it sends `READY=1` to
//! `NOTIFY_SOCKET` ([`notify_ready`], through `sd-notify`), so a
//! `Type=notify` unit is started only when the socket answers.
//!
//! Commands the guardian runs never see these variables (they are removed
//! from their environment, [`SYSTEMD_VARS`]).
//!
//! # References
//! - [`sd_listen_fds(3)`](https://www.freedesktop.org/software/systemd/man/latest/sd_listen_fds.html)
//! - [`sd_notify(3)`](https://www.freedesktop.org/software/systemd/man/latest/sd_notify.html)
//! - [`systemd.socket(5)`](https://www.freedesktop.org/software/systemd/man/latest/systemd.socket.html)

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// The variables of the activation and notification protocols, which a
/// command the guardian runs must not inherit.
pub const SYSTEMD_VARS: &[&str] = &["LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "NOTIFY_SOCKET"];

/// The listening socket systemd handed over, if any.
///
/// `None` when `LISTEN_FDS` is unset or `LISTEN_PID` names another process.
/// An error when the first passed descriptor is not a listening Unix stream
/// socket; further descriptors are ignored (with a warning).
pub fn inherited_listener() -> std::io::Result<Option<UnixListener>> {
    let mut fds = listenfd::ListenFd::from_env();
    if fds.len() == 0 {
        return Ok(None);
    }
    if fds.len() > 1 {
        tracing::warn!(count = fds.len(), "systemd passed more than one socket; only the first is served");
    }
    let listener = fds
        .take_unix_listener(0)
        .map_err(|e| crate::error::context(e, "the socket systemd passed (LISTEN_FDS) is not a Unix stream socket"))?
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "LISTEN_FDS names no descriptor"))?;
    Ok(Some(listener))
}

/// The path `listener` is bound to, else `fallback`.
pub fn bound_path(listener: &UnixListener, fallback: &Path) -> PathBuf {
    listener.local_addr().ok().and_then(|a| a.as_pathname().map(Path::to_path_buf)).unwrap_or_else(|| fallback.into())
}

/// Tells systemd (`NOTIFY_SOCKET`, when set) that the guardian serves.
pub fn notify_ready() {
    if let Err(e) = sd_notify::notify(&[sd_notify::NotifyState::Ready]) {
        tracing::warn!(error = %e, "could not notify systemd of readiness");
    }
}

/// Tells systemd (`NOTIFY_SOCKET`, when set) that the guardian is stopping.
pub fn notify_stopping() {
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
}
