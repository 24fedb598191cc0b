//! Where the guardian socket is: the default path, the one a command line
//! names, one a guardian can listen on, and what in the environment
//! explains a path that cannot be used.

use std::io;
use std::path::{Path, PathBuf};

use crate::trust;

/// The guardian socket when none is given on the command line:
/// `$WINX_GUARDIAN_SOCKET`, else `$XDG_RUNTIME_DIR/winx/guardian.sock`, else
/// `/run/user/<uid>/winx/guardian.sock` when that directory is the user's
/// and 0700, else `/tmp/winx-<uid>/guardian.sock` when the user owns or can
/// make that directory, else `D/run/guardian.sock` or a hashed name under
/// the user's cache directory (contract section 1; the
/// rule is [`winx_release_engine::layout::default_socket_path`]). Empty and, for
/// `XDG_RUNTIME_DIR`, relative values are ignored.
pub fn default_socket_path() -> PathBuf {
    winx_release_engine::layout::default_socket_path()
}

/// `--socket PATH` when given, else [`default_socket_path`].
pub fn resolve_socket_path(explicit: Option<&Path>) -> PathBuf {
    explicit.map(Path::to_path_buf).unwrap_or_else(default_socket_path)
}

/// A note on the environment when it explains why `socket` cannot be used:
/// `XDG_RUNTIME_DIR` unset or empty while `socket` is `/winx/...` (what
/// `--socket "$XDG_RUNTIME_DIR/winx/guardian.sock"` becomes then), or an
/// `XDG_RUNTIME_DIR` that `socket` lies below and that is not a writable
/// directory. `None` when the environment is not the cause.
pub fn socket_advice(socket: &Path) -> Option<String> {
    let xdg = std::env::var_os("XDG_RUNTIME_DIR");
    let empty = xdg.as_ref().is_none_or(|v| v.is_empty());
    if empty && socket.starts_with("/winx") {
        return Some(format!(
            "XDG_RUNTIME_DIR is {}, so \"$XDG_RUNTIME_DIR/winx/...\" became {}; leave --socket out (the default here \
             is {})",
            if xdg.is_none() { "not set" } else { "empty" },
            socket.display(),
            default_socket_path().display()
        ));
    }
    let x = PathBuf::from(xdg.filter(|v| !v.is_empty())?);
    if !socket.starts_with(&x) {
        return None;
    }
    let why = match std::fs::metadata(&x) {
        Err(e) => e.to_string(),
        Ok(m) if !m.is_dir() => "is not a directory".to_owned(),
        Ok(_) => match rustix::fs::access(&x, rustix::fs::Access::WRITE_OK) {
            Ok(()) => return None,
            Err(e) => format!("is not writable ({e})"),
        },
    };
    Some(format!("XDG_RUNTIME_DIR={} is unusable: {why}", x.display()))
}

/// A socket path a guardian can listen on for this user: `tried` when its
/// directory is trusted, or missing below a directory that exists;
/// otherwise the default path ([`default_socket_path`]) or
/// `/tmp/winx-<uid>/guardian.sock`, whichever passes that test first
/// (`tried` when none does). What a "start one with" hint names.
pub fn usable_socket_path(tried: &Path) -> PathBuf {
    let usable = |sock: &Path| {
        let dir = trust::socket_dir(sock);
        match trust::trusted_socket_dir(dir, false) {
            Ok(_) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                dir.parent().is_some_and(|p| rustix::fs::access(p, rustix::fs::Access::WRITE_OK).is_ok())
            }
            Err(_) => false,
        }
    };
    let uid = rustix::process::getuid().as_raw();
    let fallback = PathBuf::from(format!("/tmp/winx-{uid}/guardian.sock"));
    [tried.to_path_buf(), default_socket_path(), fallback].into_iter().find(|p| usable(p)).unwrap_or(tried.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_path_resolution() {
        assert_eq!(resolve_socket_path(Some(Path::new("/x/s.sock"))), PathBuf::from("/x/s.sock"));
        let p = default_socket_path();
        assert!(p.is_absolute() || std::env::var_os("WINX_GUARDIAN_SOCKET").is_some());
        assert!(p.ends_with("guardian.sock") || std::env::var_os("WINX_GUARDIAN_SOCKET").is_some());
    }
}
