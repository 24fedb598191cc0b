//! The age-based maintenance audit (contract section 6).
//!
//! The old maintenance entry points lack authoritative runtime ownership, so
//! the audit deletes nothing: it reports usage per session and
//! `deletion_deferred: "runtime_protection_unknown"`, and flags sessions over
//! quota or past the 24-hour TTL as candidates for an explicit release.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::layout;
use crate::quota;

/// The contract's `deletion_deferred` value.
pub const DELETION_DEFERRED: &str = "runtime_protection_unknown";

/// Usage of one session directory.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SessionUsage {
    /// The session directory's name.
    pub session: String,
    /// Its path.
    pub path: PathBuf,
    /// Helper files (regular files outside the reserved namespace).
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Age of the oldest helper, in seconds (by modification time).
    pub oldest_age_seconds: Option<u64>,
    /// Entries held in `.winx-release-*` quarantine directories.
    pub quarantined_entries: u64,
    /// Entries that are neither regular files nor directories (links,
    /// fifos, ...), not counted as helpers.
    pub other_entries: u64,
    /// Over the 128-file or 64 MiB quota.
    pub over_quota: bool,
    /// Oldest helper older than the 24-hour TTL.
    pub past_ttl: bool,
    /// A candidate for an explicit guarded release.
    pub release_candidate: bool,
}

/// The audit of one workspace.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct AuditReport {
    /// The workspace root.
    pub workspace: PathBuf,
    /// Per session, by name.
    pub sessions: Vec<SessionUsage>,
    /// Helper files in all sessions.
    pub total_files: u64,
    /// Helper bytes in all sessions.
    pub total_bytes: u64,
    /// Over the 256 MiB workspace quota.
    pub workspace_over_quota: bool,
    /// Always `runtime_protection_unknown`.
    pub deletion_deferred: &'static str,
    /// Always 0.
    pub deleted_files: u64,
    /// Always 0.
    pub deleted_bytes: u64,
}

/// One helper file of a session directory, as [`helpers_of`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelperFile {
    /// Its path.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// Its last modification, where the filesystem reports it.
    pub modified: Option<SystemTime>,
}

#[derive(Default)]
struct Walk {
    files: u64,
    bytes: u64,
    oldest: Option<SystemTime>,
    quarantined: u64,
    other: u64,
    /// Every helper file met, when asked for ([`helpers_of`]).
    list: Option<Vec<HelperFile>>,
}

/// Whether an error means the entry went away while it was being looked at
/// (a concurrent release or command): such entries are skipped.
fn vanished(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
}

/// Counts every entry below `root`, whatever its depth: quotas are not the
/// backing-root scan's bound, and a helper 17 levels down occupies the
/// quota like any other. The walk keeps its own stack (no recursion), so a
/// deep tree cannot exhaust the thread's stack; a path the kernel refuses
/// as too long is an error, and the quota check fails closed.
fn walk(root: &Path, acc: &mut Walk) -> io::Result<()> {
    let mut stack: Vec<(PathBuf, bool)> = vec![(root.to_path_buf(), false)];
    while let Some((dir, in_reserved)) = stack.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if vanished(&e) => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = match entry {
                Ok(e) => e,
                Err(e) if vanished(&e) => continue,
                Err(e) => return Err(e),
            };
            let name = entry.file_name();
            let reserved = in_reserved || layout::is_reserved_name(&name);
            // `statx` relative to the directory being read (a link is not
            // followed), not by the whole path from `/` again.
            let meta = match entry.metadata() {
                Ok(m) => m,
                Err(e) if vanished(&e) => continue,
                Err(e) => return Err(e),
            };
            let ft = meta.file_type();
            if reserved && !ft.is_dir() {
                acc.quarantined += 1;
            } else if ft.is_file() {
                acc.files += 1;
                // Saturating: a sparse file's size is the agent's to choose.
                acc.bytes = acc.bytes.saturating_add(meta.len());
                let modified = meta.modified().ok();
                if let Some(m) = modified {
                    acc.oldest = Some(acc.oldest.map_or(m, |o| o.min(m)));
                }
                if let Some(list) = &mut acc.list {
                    list.push(HelperFile { path: entry.path(), size: meta.len(), modified });
                }
            } else if !ft.is_dir() {
                acc.other += 1;
            }
            if ft.is_dir() {
                stack.push((entry.path(), reserved));
            }
        }
    }
    Ok(())
}

/// The helper files of the session directory `session_dir`, sorted by
/// path: the regular files below it at any depth, outside the reserved
/// namespace, links never followed (what the audit counts as its
/// `files`). A directory that does not exist has none. Entries that vanish
/// while the walk runs are passed over; any other error is returned.
pub fn helpers_of(session_dir: &Path) -> io::Result<Vec<HelperFile>> {
    let mut acc = Walk { list: Some(Vec::new()), ..Walk::default() };
    walk(session_dir, &mut acc)?;
    let mut list = acc.list.unwrap_or_default();
    list.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(list)
}

/// Audits the sessions of `workspace`; deletes nothing.
///
/// Every file below a session directory counts, at any depth. Symbolic
/// links are never followed. A workspace without sessions yields
/// an empty report.
pub fn audit(workspace: &Path) -> io::Result<AuditReport> {
    let parent = workspace.join(layout::WINX_DIR).join(layout::TMP_DIR);
    let now = SystemTime::now();
    let mut sessions = Vec::new();
    let entries = match fs::symlink_metadata(&parent) {
        Ok(m) if m.file_type().is_dir() => fs::read_dir(&parent)?.collect::<Result<Vec<_>, _>>()?,
        Ok(_) => return Err(io::Error::other(format!("{} is not a directory", parent.display()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !layout::is_session_name(&name) || !entry.file_type()?.is_dir() {
            continue;
        }
        let mut acc = Walk::default();
        walk(&entry.path(), &mut acc)?;
        let age = acc.oldest.map(|o| now.duration_since(o).unwrap_or(Duration::ZERO).as_secs());
        let over_quota = acc.files > quota::MAX_SESSION_FILES || acc.bytes > quota::MAX_SESSION_BYTES;
        let past_ttl = age.is_some_and(|a| a > quota::SESSION_TTL_SECS);
        sessions.push(SessionUsage {
            session: name,
            path: entry.path(),
            files: acc.files,
            bytes: acc.bytes,
            oldest_age_seconds: age,
            quarantined_entries: acc.quarantined,
            other_entries: acc.other,
            over_quota,
            past_ttl,
            release_candidate: over_quota || past_ttl,
        });
    }
    sessions.sort_by(|a, b| a.session.cmp(&b.session));
    let total_files = sessions.iter().map(|s| s.files).sum();
    let total_bytes = sessions.iter().fold(0u64, |t, s| t.saturating_add(s.bytes));
    Ok(AuditReport {
        workspace: workspace.to_path_buf(),
        sessions,
        total_files,
        total_bytes,
        workspace_over_quota: total_bytes > quota::MAX_WORKSPACE_BYTES,
        deletion_deferred: DELETION_DEFERRED,
        deleted_files: 0,
        deleted_bytes: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_files_at_any_depth_and_follows_no_link() {
        let ws = tempfile::tempdir().unwrap();
        let s = ws.path().join(".winx/tmp/session-0123456789abcdef");
        fs::create_dir_all(s.join("deep/er")).unwrap();
        fs::write(s.join("a.py"), vec![b'x'; 100]).unwrap();
        fs::write(s.join("deep/er/b.sh"), vec![b'y'; 20]).unwrap();
        // A link to a large file outside: an entry of its own kind, not
        // the 4 KiB behind it.
        let outside = ws.path().join("big");
        fs::write(&outside, vec![0u8; 4096]).unwrap();
        std::os::unix::fs::symlink(&outside, s.join("link")).unwrap();
        // A release's quarantine: its file counts apart.
        fs::create_dir(s.join(".winx-release-00ff")).unwrap();
        fs::write(s.join(".winx-release-00ff/0"), b"zz").unwrap();
        // Not a session directory: not audited.
        fs::create_dir_all(ws.path().join(".winx/tmp/other")).unwrap();
        fs::write(ws.path().join(".winx/tmp/other/c"), b"c").unwrap();

        let r = audit(ws.path()).unwrap();
        assert_eq!(r.sessions.len(), 1, "{r:?}");
        let u = &r.sessions[0];
        assert_eq!((u.files, u.bytes), (2, 120), "{u:?}");
        assert_eq!((u.other_entries, u.quarantined_entries), (1, 1), "{u:?}");
        assert_eq!((r.total_files, r.total_bytes), (2, 120));
        assert_eq!((r.deleted_files, r.deleted_bytes), (0, 0));
        // The same walk lists the helpers: no link, nothing reserved.
        let listed: Vec<_> = helpers_of(&s).unwrap().into_iter().map(|h| (h.path, h.size)).collect();
        assert_eq!(listed, [(s.join("a.py"), 100), (s.join("deep/er/b.sh"), 20)]);
        assert_eq!(helpers_of(&s.join("gone")).unwrap(), []);
    }

    /// Sparse files whose sizes sum past `u64::MAX` (possible on tmpfs,
    /// xfs, btrfs) make a session over quota, never a wrapped, small total.
    #[test]
    fn sizes_summing_past_u64_saturate_and_are_over_quota() {
        let Ok(ws) = tempfile::tempdir_in("/dev/shm") else {
            eprintln!("skipped: no tmpfs at /dev/shm for sparse files of 2^63 - 1 bytes");
            return;
        };
        let s = ws.path().join(".winx/tmp/session-0123456789abcdef");
        fs::create_dir_all(&s).unwrap();
        for name in ["a", "b", "c"] {
            fs::File::create(s.join(name)).unwrap().set_len(i64::MAX as u64).unwrap();
        }
        let r = audit(ws.path()).unwrap();
        let u = &r.sessions[0];
        assert_eq!((u.files, u.bytes, u.over_quota), (3, u64::MAX, true), "{u:?}");
        assert!(r.total_bytes == u64::MAX && r.workspace_over_quota, "{r:?}");
    }
}
