//! Where things live: the workspace's session and scratch directories, the
//! data directory's backing roots and journals, the guardian socket.

#[cfg(all(target_os = "linux", not(winx_foreign)))]
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{Reason, Refusal};
use crate::exact::check_exact;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use crate::resolve::{mkdir_beneath, open_dir_abs};

/// Name of the workspace's private state directory.
pub const WINX_DIR: &str = ".winx";
/// Directory below [`WINX_DIR`] that holds session directories.
pub const TMP_DIR: &str = "tmp";
/// Directory below [`WINX_DIR`] that holds dropped output.
pub const SCRATCH_DIR: &str = "scratch";
/// Prefix of session directory names.
pub const SESSION_PREFIX: &str = "session-";
/// Prefix of the reserved quarantine namespace.
pub const RESERVED_PREFIX: &str = ".winx-release-";

/// Whether a directory entry's name lies in the reserved namespace
/// ([`RESERVED_PREFIX`], the quarantines'): the one test of such a name,
/// for the release's path rules and for every walk that passes over the
/// namespace or looks for it (recovery, the audit, the operator's tools).
pub fn is_reserved_name(name: impl AsRef<std::ffi::OsStr>) -> bool {
    name.as_ref().as_encoded_bytes().starts_with(RESERVED_PREFIX.as_bytes())
}

/// The session directory name of a thread:
/// `session-<first 8 bytes of sha256(thread_id), 16 lowercase hex>`.
pub fn session_name(thread_id: &str) -> String {
    let digest = Sha256::digest(thread_id.as_bytes());
    format!("{SESSION_PREFIX}{}", hex::encode(&digest[..8]))
}

/// Whether a directory entry name is a session directory name.
pub fn is_session_name(name: &str) -> bool {
    name.strip_prefix(SESSION_PREFIX)
        .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

/// The default data directory `D`: `$XDG_DATA_HOME/winx`, else
/// `$HOME/.local/share/winx`, else (no `HOME`, as some MCP clients start
/// servers) `<home from the password database>/.local/share/winx`, else
/// `/tmp/winx-<uid>/data`.
///
/// # References
/// - [`getpwuid_r(3)`](https://man7.org/linux/man-pages/man3/getpwuid_r.3.html)
///   (through [`std::env::home_dir`], which reads it when `HOME` is unset)
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub fn default_data_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(x);
        if p.is_absolute() {
            return p.join("winx");
        }
    }
    if let Some(h) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(h).join(".local/share/winx");
    }
    // `HOME` unset: std asks the password database.
    if let Some(h) = std::env::home_dir().filter(|h| h.is_absolute()) {
        return h.join(".local/share/winx");
    }
    PathBuf::from(format!("/tmp/winx-{}/data", rustix::process::getuid().as_raw()))
}

/// A layout refused: `reason` about `path`.
fn refused(reason: Reason, path: &Path, what: &str) -> Refusal {
    Refusal::whole(0, reason, format!("{}: {what}", path.display()))
}

/// The paths of one workspace and the data directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    workspace: PathBuf,
    data_dir: PathBuf,
}

impl Layout {
    /// A layout for `workspace` (an exact absolute path) and `data_dir`.
    ///
    /// Fails with `path_not_exact` when the workspace is not an exact
    /// absolute path (it must already be canonical).
    pub fn new(workspace: impl Into<PathBuf>, data_dir: impl Into<PathBuf>) -> Result<Layout, Refusal> {
        let workspace = workspace.into();
        let s =
            workspace.to_str().ok_or_else(|| refused(Reason::PathNotExact, &workspace, "workspace is not UTF-8"))?;
        check_exact(s).map_err(|r| refused(r, &workspace, "workspace is not an exact path"))?;
        let data_dir = data_dir.into();
        if !data_dir.is_absolute() {
            return Err(refused(Reason::PathNotExact, &data_dir, "data dir must be absolute"));
        }
        Ok(Layout { workspace, data_dir })
    }

    /// The workspace root `W`.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The data directory `D`.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// `W/.winx/tmp`, the parent of every session directory.
    pub(crate) fn sessions_parent(&self) -> PathBuf {
        self.workspace.join(WINX_DIR).join(TMP_DIR)
    }

    /// The session directory of `thread_id`.
    pub fn session_dir(&self, thread_id: &str) -> PathBuf {
        self.sessions_parent().join(session_name(thread_id))
    }

    /// Backing root of dropped output: `W/.winx/scratch`.
    pub fn scratch_root(&self) -> PathBuf {
        self.workspace.join(WINX_DIR).join(SCRATCH_DIR)
    }

    /// Backing root of retained execution payloads: `D/executions`.
    pub fn executions_root(&self) -> PathBuf {
        self.data_dir.join("executions")
    }

    /// Backing root of mutation receipts: `D/receipts`.
    pub fn receipts_root(&self) -> PathBuf {
        self.data_dir.join("receipts")
    }

    /// Creates `W/.winx/tmp/session-<hex>` (each missing level mode 0700)
    /// and opens it, never following a link.
    ///
    /// This is the only place a session directory is made: `Initialize`, the
    /// guardian and the embedded runtime all call it. A link or a
    /// non-directory anywhere on the way fails.
    ///
    /// # References
    /// - [`mkdirat(2)`](https://man7.org/linux/man-pages/man2/mkdirat.2.html)
    /// - [`openat(2)`](https://man7.org/linux/man-pages/man2/openat.2.html)
    #[cfg(all(target_os = "linux", not(winx_foreign)))]
    pub fn create_session_dir(&self, thread_id: &str) -> std::io::Result<OwnedFd> {
        let ws = open_dir_abs(&self.workspace)?;
        let winx = mkdir_beneath(ws.as_fd(), WINX_DIR, 0o700)?;
        let tmp = mkdir_beneath(winx.as_fd(), TMP_DIR, 0o700)?;
        mkdir_beneath(tmp.as_fd(), &session_name(thread_id), 0o700)
    }

    /// Off Linux: creates nothing and answers an error of kind
    /// [`std::io::ErrorKind::Unsupported`] whose inner error is
    /// [`Reason::UnsupportedPlatform`], so that a host's `Initialize` is
    /// the same code everywhere (the directory is a `File` here, not an
    /// `OwnedFd`, which not every platform has).
    ///
    /// # Errors
    /// Always `unsupported_platform`.
    #[cfg(not(all(target_os = "linux", not(winx_foreign))))]
    pub fn create_session_dir(&self, thread_id: &str) -> std::io::Result<std::fs::File> {
        let _ = thread_id;
        Err(std::io::Error::new(std::io::ErrorKind::Unsupported, Reason::UnsupportedPlatform))
    }

    /// Creates `W/.winx/scratch` (each missing level mode 0700) and opens
    /// it, never following a link.
    #[cfg(all(target_os = "linux", not(winx_foreign)))]
    pub fn create_scratch_dir(&self) -> std::io::Result<OwnedFd> {
        let ws = open_dir_abs(&self.workspace)?;
        let winx = mkdir_beneath(ws.as_fd(), WINX_DIR, 0o700)?;
        mkdir_beneath(winx.as_fd(), SCRATCH_DIR, 0o700)
    }

    /// Where release intent journals live: `D/journal`.
    pub fn journal_dir(&self) -> PathBuf {
        self.data_dir.join("journal")
    }
}

/// The guardian socket path when none is given (contract section 1), the
/// first of:
/// 1. `$WINX_GUARDIAN_SOCKET`;
/// 2. `$XDG_RUNTIME_DIR/winx/guardian.sock`;
/// 3. `/run/user/<uid>/winx/guardian.sock` when `/run/user/<uid>` is a
///    directory (not a link) owned by this user with mode 0700;
/// 4. `/tmp/winx-<uid>/guardian.sock` when `/tmp/winx-<uid>` is a directory
///    (not a link) owned by this user, or is missing and this user may
///    create it (`/tmp` writable);
/// 5. `D/run/guardian.sock` (`D` the data directory, [`default_data_dir`])
///    when that path fits a socket address (at most 107 bytes);
/// 6. `<cache>/winx-<hash>/guardian.sock`, `<cache>` the user's cache
///    directory (`$XDG_CACHE_HOME`, else `$HOME/.cache`, else the password
///    database's home's) and `<hash>` 16 hex digits of SHA-256 of `D` (so
///    data directories keep their guardians apart), when it fits;
/// 7. else step 5's path (which the guardian refuses as too long, naming it).
///
/// Empty and, for `XDG_RUNTIME_DIR` and `XDG_CACHE_HOME`, relative values
/// are ignored. Steps 5-7 make directories the user owns (0700, by whoever
/// listens first), where `/tmp` is not world-writable or another user made
/// `/tmp/winx-<uid>` first.
///
/// MCP clients often start servers with a minimal environment, without
/// `XDG_RUNTIME_DIR`: the `/run/user` step lets such a frontend, a guardian
/// started from a login shell and the systemd user units (`%t/winx`) meet at
/// one path. This is the one place the rule lives; the guardian, the
/// frontend and every subcommand call it.
///
/// # References
/// - [`lstat(2)`](https://man7.org/linux/man-pages/man2/lstat.2.html),
///   [`access(2)`](https://man7.org/linux/man-pages/man2/access.2.html)
/// - [`unix(7)`](https://man7.org/linux/man-pages/man7/unix.7.html) (`sun_path`: 108 bytes)
/// - [XDG Base Directory Specification](https://specifications.freedesktop.org/basedir-spec/latest/)
///   (`XDG_RUNTIME_DIR`, which `pam_systemd` sets to `/run/user/<uid>`; `XDG_CACHE_HOME`)
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub fn default_socket_path() -> PathBuf {
    if let Some(p) = std::env::var_os("WINX_GUARDIAN_SOCKET").filter(|v| !v.is_empty()) {
        return PathBuf::from(p);
    }
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(x);
        if p.is_absolute() {
            return p.join("winx").join("guardian.sock");
        }
    }
    let uid = rustix::process::getuid();
    let run_user = PathBuf::from(format!("/run/user/{}", uid.as_raw()));
    if private_dir_of(&run_user, uid) {
        return run_user.join("winx").join("guardian.sock");
    }
    let tmp = PathBuf::from(format!("/tmp/winx-{}", uid.as_raw()));
    if own_or_can_make(&tmp, uid) {
        return tmp.join("guardian.sock");
    }
    let data = default_data_dir();
    let in_data = data.join("run").join("guardian.sock");
    if fits_socket_address(&in_data) {
        return in_data;
    }
    if let Some(cache) = cache_dir() {
        let digest = Sha256::digest(data.as_os_str().as_encoded_bytes());
        let hashed = cache.join(format!("winx-{}", hex::encode(&digest[..8]))).join("guardian.sock");
        if fits_socket_address(&hashed) {
            return hashed;
        }
    }
    in_data
}

/// The longest socket path `bind(2)` takes: `sun_path` holds 108 bytes,
/// the last one its NUL.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
const SOCKET_PATH_MAX: usize = 107;

/// Whether `path` fits a Unix socket address.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
fn fits_socket_address(path: &Path) -> bool {
    path.as_os_str().len() <= SOCKET_PATH_MAX
}

/// Whether `dir` is a directory (not a link) owned by `uid`, or is missing
/// and its parent is writable by this process.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
fn own_or_can_make(dir: &Path, uid: rustix::process::Uid) -> bool {
    match rustix::fs::lstat(dir) {
        Ok(st) => {
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory
                && st.st_uid == uid.as_raw()
        }
        Err(rustix::io::Errno::NOENT) => dir
            .parent()
            .is_some_and(|p| rustix::fs::access(p, rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK).is_ok()),
        Err(_) => false,
    }
}

/// The user's cache directory: `$XDG_CACHE_HOME` (absolute), else
/// `$HOME/.cache`, else the password database's home's `.cache`.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
fn cache_dir() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()).map(PathBuf::from) {
        if x.is_absolute() {
            return Some(x);
        }
    }
    if let Some(h) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(h).join(".cache"));
    }
    std::env::home_dir().filter(|h| h.is_absolute()).map(|h| h.join(".cache"))
}

/// Whether `dir` is a directory, not a link, owned by `uid`, mode 0700.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
fn private_dir_of(dir: &Path, uid: rustix::process::Uid) -> bool {
    rustix::fs::lstat(dir).is_ok_and(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory
            && st.st_uid == uid.as_raw()
            && st.st_mode & 0o7777 == 0o700
    })
}

#[cfg(all(test, target_os = "linux", not(winx_foreign)))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn only_a_private_directory_of_the_user_is_a_runtime_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let uid = rustix::process::getuid();
        let d = tmp.path().join("run");
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(private_dir_of(&d, uid));
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!private_dir_of(&d, uid), "mode 0755");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&d, &link).unwrap();
        assert!(!private_dir_of(&link, uid), "a link");
        assert!(!private_dir_of(&tmp.path().join("missing"), uid));
        let other = rustix::process::Uid::from_raw(uid.as_raw() + 1);
        assert!(!private_dir_of(&d, other), "another user's");
    }
}
