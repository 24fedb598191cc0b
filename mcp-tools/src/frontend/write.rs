//! `EditFiles` whole-file writes (`mode: "replace"`).
//!
//! Every entry is checked before anything is written:
//!
//! 1. path rules (`file_count`, `duplicate_path`, `path_not_exact`,
//!    `glob_not_allowed`: writes take exact paths too);
//! 2. the thread (`thread_mismatch`) and exact workspace (`workspace_mismatch`);
//! 3. policy (`policy_denied`): `architect` refuses; `code_writer` needs the
//!    requested path *and* the resolved target to match `allowed_globs`, and
//!    the `verify_command`, if any, to be an allowed command;
//! 4. the reserved namespace (`reserved_namespace`), the engine's
//!    `write_reaches_reserved`: the requested path, and the target it
//!    resolves to (an existing file through its links, or the canonical
//!    existing ancestor plus the missing components), may not have a
//!    `.winx-release-*` component, and an existing file with other links may
//!    not have one of them in a quarantine; a dangling link is `symlink`, a
//!    directory or special file `not_regular_file`;
//! 5. quotas (`quota_exceeded`, status `denied`): a target inside a session
//!    directory `…/.winx/tmp/session-<16 hex>/…` is checked with
//!    `engine::quota::write_allowed` against the usage the audit measures for
//!    that session and its workspace (every file at any depth), entries of
//!    one request counted cumulatively. Measuring and writing run under
//!    `engine::quota::QuotaLock` of each workspace touched, so concurrent
//!    writers (threads or frontend processes) cannot pass a quota together.
//!
//! Then each file is written atomically: missing parent directories are
//! created through no-follow handles from the canonical ancestor, the
//! content goes to a temporary file `.winx-write-<hex>.tmp` in the same
//! directory (an existing file's permission bits are kept), fsync, rename
//! over the name, directory fsync. A failure stops the run: that file is
//! `failed`, later ones `not_attempted`. No undo checkpoint is made. After a
//! completed write, `verify_command` runs like a `BashCommand` (default wait)
//! and its result is under `verification`.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};
use serde_json::{json, Value};
use winx_release_engine::audit::audit;
use winx_release_engine::layout::{self, is_session_name};
use winx_release_engine::preflight::{check_shape, write_reaches_reserved};
use winx_release_engine::quota::{write_allowed, QuotaLock, Usage};
use winx_release_engine::resolve::{mkdir_beneath, open_dir_abs};
use winx_release_engine::Reason;

use super::Frontend;
use crate::wire::{WriteArgs, DEFAULT_WAIT_SECONDS, EDIT_OPERATION};
use winx_release_host::error::{Code, FrontendError};
use winx_release_kernel::sys::random_hex;

/// A write refused before anything was written.
pub(crate) fn write_denial(paths: &[String], e: &FrontendError, own: &[Option<Code>]) -> Value {
    let files: Vec<Value> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let reason = own.get(i).copied().flatten().unwrap_or(e.code);
            json!({"file_path": p, "outcome": "denied", "reason": reason.as_str()})
        })
        .collect();
    json!({
        "status": e.status(),
        "operation": EDIT_OPERATION,
        "errorCode": e.code.as_str(),
        "files": files,
        "message": e.message,
    })
}

/// Where one write lands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The canonical existing directory the walk starts from.
    base: PathBuf,
    /// Directories to create below `base`.
    missing: Vec<String>,
    /// The final name.
    name: String,
    /// `base/missing…/name`.
    target: PathBuf,
    /// Size and permission bits of the regular file it replaces.
    existing: Option<(u64, u32)>,
}

fn utf8(p: &Path) -> Result<&str, Code> {
    p.to_str().ok_or(Code::IoError)
}

/// Resolves where a write of `path` lands (see the module docs).
pub(crate) fn resolve(path: &str) -> Result<Plan, Code> {
    let p = Path::new(path);
    let (base, missing, name) = match fs::symlink_metadata(p) {
        Ok(_) => {
            let c = fs::canonicalize(p).map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => Code::Reason(Reason::Symlink),
                _ => Code::IoError,
            })?;
            let name = c.file_name().and_then(|n| n.to_str()).ok_or(Code::Reason(Reason::NotRegularFile))?.to_owned();
            let base = c.parent().ok_or(Code::Reason(Reason::NotRegularFile))?.to_path_buf();
            (base, Vec::new(), name)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let name = p.file_name().and_then(|n| n.to_str()).ok_or(Code::Reason(Reason::NotRegularFile))?.to_owned();
            let mut cur = p.parent().ok_or(Code::Reason(Reason::NotRegularFile))?.to_path_buf();
            let mut missing = Vec::new();
            let base = loop {
                match fs::canonicalize(&cur) {
                    Ok(c) => break c,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        if fs::symlink_metadata(&cur).is_ok() {
                            // A dangling link on the way.
                            return Err(Reason::Symlink.into());
                        }
                        missing.push(utf8(Path::new(cur.file_name().ok_or(Code::IoError)?))?.to_owned());
                        cur = cur.parent().ok_or(Code::IoError)?.to_path_buf();
                    }
                    Err(_) => return Err(Code::IoError),
                }
            };
            missing.reverse();
            (base, missing, name)
        }
        Err(_) => return Err(Code::IoError),
    };
    let mut target = base.clone();
    for m in &missing {
        target.push(m);
    }
    target.push(&name);
    if write_reaches_reserved(p, &target) {
        return Err(Reason::ReservedNamespace.into());
    }
    let existing = match fs::symlink_metadata(&target) {
        Ok(m) if m.file_type().is_file() => Some((m.len(), m.permissions().mode() & 0o7777)),
        Ok(_) => return Err(Reason::NotRegularFile.into()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(_) => return Err(Code::IoError),
    };
    Ok(Plan { base, missing, name, target, existing })
}

/// The workspace and session name of a target inside a session directory.
fn session_of(target: &Path) -> Option<(PathBuf, String)> {
    let comps: Vec<&str> = target
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect();
    (0..comps.len().saturating_sub(3)).find_map(|i| {
        (comps[i] == layout::WINX_DIR && comps[i + 1] == layout::TMP_DIR && is_session_name(comps[i + 2])).then(|| {
            let mut ws = PathBuf::from("/");
            ws.extend(&comps[..i]);
            (ws, comps[i + 2].to_owned())
        })
    })
}

/// Files and bytes per session of one workspace, and its total bytes.
struct WorkspaceUsage {
    sessions: HashMap<String, (u64, u64)>,
    total: u64,
}

/// Usage per workspace, measured once per request and updated as entries
/// are admitted.
#[derive(Default)]
struct QuotaBook {
    workspaces: HashMap<PathBuf, WorkspaceUsage>,
}

impl QuotaBook {
    /// Admits a write of `new` bytes at `plan`'s target, or refuses it with
    /// `quota_exceeded`. Runs under the workspace's [`QuotaLock`]; the size
    /// of the file the write replaces is read here, under the lock, not
    /// taken from the plan (made before the lock): another writer may have
    /// replaced the file in between, and a stale, larger old size would
    /// let this write pass a quota by the difference.
    fn admit(&mut self, plan: &Plan, new: u64) -> Result<(), Code> {
        let target = plan.target.as_path();
        let Some((ws, session)) = session_of(target) else { return Ok(()) };
        let old = match fs::symlink_metadata(target) {
            Ok(m) if m.file_type().is_file() => Some(m.len()),
            Ok(_) => return Err(Reason::NotRegularFile.into()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(_) => return Err(Code::IoError),
        };
        if !self.workspaces.contains_key(&ws) {
            let report = audit(&ws).map_err(|_| Code::IoError)?;
            let sessions = report.sessions.iter().map(|s| (s.session.clone(), (s.files, s.bytes))).collect();
            self.workspaces.insert(ws.clone(), WorkspaceUsage { sessions, total: report.total_bytes });
        }
        let WorkspaceUsage { sessions, total } = self.workspaces.get_mut(&ws).ok_or(Code::IoError)?;
        let (files, bytes) = sessions.entry(session).or_insert((0, 0));
        let usage = Usage { session_files: *files, session_bytes: *bytes, workspace_bytes: *total };
        if !write_allowed(usage, old, new) {
            return Err(Code::QuotaExceeded);
        }
        let old_bytes = old.unwrap_or(0);
        *files = files.saturating_add(u64::from(old.is_none()));
        *bytes = bytes.saturating_sub(old_bytes).saturating_add(new);
        *total = total.saturating_sub(old_bytes).saturating_add(new);
        Ok(())
    }
}

/// Writes `content` at `plan` atomically (see the module docs).
fn write_atomic(plan: &Plan, content: &[u8]) -> io::Result<()> {
    let mut dir = open_dir_abs(&plan.base)?;
    for m in &plan.missing {
        dir = mkdir_beneath(dir.as_fd(), m, 0o755)?;
    }
    let tmp = format!(".winx-write-{}.tmp", random_hex(8));
    let mode = plan.existing.map_or(0o644, |(_, m)| m);
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir.as_fd(), tmp.as_str(), flags, Mode::from_raw_mode(mode))?;
    let mut file = File::from(fd);
    let mut renamed = false;
    let result = (|| -> io::Result<()> {
        file.write_all(content)?;
        if plan.existing.is_some() {
            rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))?;
        }
        file.sync_all()?;
        rustix::fs::renameat(dir.as_fd(), tmp.as_str(), dir.as_fd(), plan.name.as_str())?;
        renamed = true;
        rustix::fs::fsync(dir.as_fd())?;
        Ok(())
    })();
    if result.is_err() && !renamed {
        let _ = rustix::fs::unlinkat(dir.as_fd(), tmp.as_str(), AtFlags::empty());
    }
    result
}

impl Frontend {
    pub(super) fn write(&self, w: &WriteArgs) -> Value {
        let paths = w.paths();
        if let Err(refused) = check_shape(&paths) {
            let own: Vec<Option<Code>> = refused.own.into_iter().map(|o| o.map(Code::from)).collect();
            return write_denial(&paths, &FrontendError::new(refused.reason, "a path was refused"), &own);
        }
        let session = match self.session(&w.thread_id) {
            Ok(s) => s,
            Err(e) => return write_denial(&paths, &e, &[]),
        };
        if w.workspace_root != session.workspace {
            let msg = format!("workspace_root is not the initialised workspace {:?}", session.workspace);
            return write_denial(&paths, &FrontendError::new(Reason::WorkspaceMismatch, msg), &[]);
        }
        let policy_msg = format!("mode {} does not allow this", session.mode().as_str());
        if let Some(cmd) = &w.verify_command {
            if !session.policy.command_allowed(cmd) {
                return write_denial(&paths, &FrontendError::new(Reason::PolicyDenied, policy_msg), &[]);
            }
        }
        let ws = Path::new(&session.workspace);
        let mut own: Vec<Option<Code>> = vec![None; paths.len()];
        let mut plans = Vec::with_capacity(paths.len());
        for (i, e) in w.entries.iter().enumerate() {
            own[i] = if !session.policy.mutation_allowed(ws, Path::new(&e.file_path)) {
                Some(Code::from(Reason::PolicyDenied))
            } else if write_reaches_reserved(Path::new(&e.file_path), Path::new(&e.file_path)) {
                // By name, before the path is resolved (a dangling link in
                // the namespace is still `reserved_namespace`).
                Some(Reason::ReservedNamespace.into())
            } else {
                match resolve(&e.file_path) {
                    Ok(plan) if !session.policy.mutation_allowed(ws, &plan.target) => Some(Reason::PolicyDenied.into()),
                    Ok(plan) => {
                        plans.push(plan);
                        None
                    }
                    Err(c) => Some(c),
                }
            };
        }
        // Quota check and write under each touched workspace's lock (taken
        // in path order), so that concurrent writers cannot pass a quota
        // together.
        let mut locks = Vec::new();
        if own.iter().all(Option::is_none) {
            let mut touched: Vec<PathBuf> =
                plans.iter().filter_map(|p| session_of(&p.target)).map(|(w, _)| w).collect();
            touched.sort();
            touched.dedup();
            for t in touched {
                match QuotaLock::workspace_within(&t, self.config.quota_lock_wait) {
                    Ok(l) => locks.push(l),
                    Err(err) => {
                        let msg = err.to_string();
                        return write_denial(&paths, &FrontendError::new(Code::IoError, msg), &[]);
                    }
                }
            }
            let mut quota = QuotaBook::default();
            for (i, (e, plan)) in w.entries.iter().zip(&plans).enumerate() {
                if let Err(c) = quota.admit(plan, e.content.len() as u64) {
                    own[i] = Some(c);
                }
            }
        }
        if let Some(first) = own.iter().flatten().next().copied() {
            let msg = match first {
                Code::Reason(Reason::PolicyDenied) => policy_msg,
                Code::QuotaExceeded => "the write would exceed a helper quota".to_owned(),
                _ => "a target was refused".to_owned(),
            };
            return write_denial(&paths, &FrontendError::new(first, msg), &own);
        }
        let mut files = Vec::with_capacity(paths.len());
        let mut stopped = false;
        for (e, plan) in w.entries.iter().zip(&plans) {
            if stopped {
                files.push(
                    json!({"file_path": e.file_path, "outcome": "not_attempted", "reason": "stopped_after_failure"}),
                );
                continue;
            }
            match write_atomic(plan, e.content.as_bytes()) {
                Ok(()) => files.push(json!({"file_path": e.file_path, "outcome": "written",
                    "revision": winx_release_kernel::revision::of_bytes(e.content.as_bytes())})),
                Err(err) => {
                    stopped = true;
                    files.push(json!({"file_path": e.file_path, "outcome": "failed", "reason": "io_error",
                        "message": err.to_string()}));
                }
            }
        }
        drop(locks);
        let written = files.iter().filter(|f| f["outcome"] == "written").count();
        let status = match written {
            n if n == files.len() => "completed",
            0 => "failed",
            _ => "partial",
        };
        let mut v = json!({"status": status, "operation": EDIT_OPERATION, "files": files});
        if let (Some(cmd), "completed") = (&w.verify_command, status) {
            v["verification"] = match self.run_command(&session, cmd, DEFAULT_WAIT_SECONDS, false) {
                Ok(r) => r,
                Err(e) => super::refusal(&e),
            };
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file a write replaces shrank after the write was planned (a
    /// concurrent writer): the quota is judged on its size under the lock,
    /// not on the planned one, so the write cannot pass the workspace quota
    /// by the difference.
    #[test]
    fn the_replaced_size_is_read_under_the_lock() {
        use winx_release_engine::quota::MAX_WORKSPACE_BYTES;
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().canonicalize().unwrap();
        let tmp = ws.join(".winx/tmp");
        let mib = 1u64 << 20;
        // Four other sessions hold 255 MiB (sparse files: sizes count).
        for i in 0..4u64 {
            let s = tmp.join(format!("session-{i:016x}"));
            fs::create_dir_all(&s).unwrap();
            let size = if i < 3 { 64 * mib } else { 63 * mib };
            File::create(s.join("big")).unwrap().set_len(size).unwrap();
        }
        let own = tmp.join("session-00000000000000ff");
        fs::create_dir_all(&own).unwrap();
        let h = own.join("h.txt");
        File::create(&h).unwrap().set_len(mib).unwrap();
        // Planned while h is 1 MiB: the workspace is exactly full.
        let plan = resolve(h.to_str().unwrap()).unwrap();
        assert_eq!(plan.existing.map(|(s, _)| s), Some(mib));
        // Meanwhile h is emptied and another 1 MiB helper written.
        File::create(&h).unwrap();
        File::create(own.join("other.txt")).unwrap().set_len(mib).unwrap();
        let _lock = QuotaLock::workspace(&ws).unwrap();
        let mut book = QuotaBook::default();
        // 256 MiB on disk, h empty: 1 MiB more would be 257 MiB.
        assert_eq!(book.admit(&plan, mib), Err(Code::QuotaExceeded));
        assert_eq!(MAX_WORKSPACE_BYTES, 256 * mib);
        let mut book = QuotaBook::default();
        assert_eq!(book.admit(&plan, 0), Ok(()));
    }

    #[test]
    fn session_detection() {
        let (ws, s) = session_of(Path::new("/a/b/.winx/tmp/session-0123456789abcdef/x/y")).unwrap();
        assert_eq!((ws, s.as_str()), (PathBuf::from("/a/b"), "session-0123456789abcdef"));
        assert!(session_of(Path::new("/a/.winx/tmp/session-0123456789abcdef")).is_none());
        assert!(session_of(Path::new("/a/.winx/tmp/other/x")).is_none());
        assert!(session_of(Path::new("/a/src/x")).is_none());
    }
}
