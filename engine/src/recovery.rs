//! Crash recovery of interrupted releases (contract section 8).
//!
//! Recovery reads every intent journal under `D/journal`. For each target it
//! finds in the journal's quarantine directory whose identity still matches
//! the pin, it puts the object back under its original name with
//! `RENAME_NOREPLACE` when that name is free, and otherwise leaves it in
//! place and names it. It never deletes a file, finishes nothing
//! destructive, removes quarantine directories only when empty, and retires
//! a journal only when its quarantine is gone. It is idempotent. A torn or
//! corrupt journal preserves everything and is reported.
//!
//! With workspaces given, orphan `.winx-release-*` directories in their
//! sessions (no journal names them: a crash before the journal was written)
//! are removed when empty and their entries named otherwise.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType};

use crate::identity::Identity;
use crate::journal::{read_journal, ReadJournal};
use crate::layout::{self, RESERVED_PREFIX};
use crate::quarantine::rename_noreplace;
use crate::resolve::{open_dir_abs, open_dir_beneath};

/// A captured object put back under its name.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Restored {
    /// The original path.
    pub file_path: PathBuf,
    /// Where it was.
    pub from: PathBuf,
}

/// An object left in quarantine.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Preserved {
    /// The original path, when a journal names it.
    pub file_path: Option<PathBuf>,
    /// Where it stays.
    pub quarantine_path: PathBuf,
    /// Why it was not put back.
    pub why: &'static str,
}

/// A target whose removal was verified before the crash.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Removed {
    /// The original path.
    pub file_path: PathBuf,
}

/// The report of one recovery run.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RecoveryReport {
    /// Objects put back.
    pub restored: Vec<Restored>,
    /// Objects left in quarantine, named.
    pub preserved: Vec<Preserved>,
    /// Targets verified and removed before the crash.
    pub removed_before_crash: Vec<Removed>,
    /// Targets that never moved (still at their path with their pin).
    pub untouched: Vec<Removed>,
    /// Targets neither at their path, nor in quarantine, nor verified:
    /// changed or removed by something else. Listed so that nothing is
    /// silently unaccounted for.
    pub unaccounted: Vec<Removed>,
    /// Journals that could not be read; everything they might name is left
    /// as it is.
    pub corrupt_journals: Vec<PathBuf>,
    /// Journals whose intent was never completed (the release died while
    /// writing it, before any rename): retired, nothing to do.
    pub torn_journals: Vec<PathBuf>,
    /// Journals processed.
    pub journals: u64,
}

/// Runs recovery over `data_dir`'s journals, and sweeps orphan quarantines
/// in `workspaces`' sessions. With `workspaces` non-empty, only journals of
/// those workspaces are processed.
pub fn recover(data_dir: &Path, workspaces: &[PathBuf]) -> io::Result<RecoveryReport> {
    let mut report = RecoveryReport::default();
    let jdir = data_dir.join("journal");
    let mut known_quarantines = HashSet::new();
    let mut journals: Vec<PathBuf> = match fs::read_dir(&jdir) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    journals.sort();
    for jpath in journals {
        match read_journal(&jpath)? {
            ReadJournal::Torn => {
                tracing::warn!(journal = %jpath.display(), "torn intent: the release never started moving");
                fs::remove_file(&jpath)?;
                crate::durable::fsync_dir(&jdir)?;
                report.torn_journals.push(jpath);
            }
            ReadJournal::Corrupt { detail } => {
                tracing::warn!(journal = %jpath.display(), %detail, "corrupt journal; preserving everything");
                report.corrupt_journals.push(jpath);
            }
            ReadJournal::Valid { intent, verified } => {
                if !workspaces.is_empty() && !workspaces.iter().any(|w| w == &intent.workspace) {
                    continue;
                }
                report.journals += 1;
                known_quarantines.insert(intent.quarantine_dir.clone());
                let done = recover_one(&intent, &verified, &mut report);
                if done {
                    fs::remove_file(&jpath)?;
                    crate::durable::fsync_dir(&jdir)?;
                }
            }
        }
    }
    for ws in workspaces {
        sweep_orphans(ws, &known_quarantines, &mut report);
    }
    Ok(report)
}

/// Recovers one journal; returns whether its quarantine is gone.
fn recover_one(intent: &crate::journal::JournalIntent, verified: &[usize], report: &mut RecoveryReport) -> bool {
    let Ok(session) = open_dir_abs(&intent.session_dir) else {
        // The session directory is gone or holds a link: touch nothing.
        for t in &intent.targets {
            report.unaccounted.push(Removed { file_path: t.file_path.clone() });
        }
        return false;
    };
    let qname = intent.quarantine_dir.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
    let quarantine =
        if qname.starts_with(RESERVED_PREFIX) { open_dir_beneath(session.as_fd(), &[&qname]).ok() } else { None };
    for (i, t) in intent.targets.iter().enumerate() {
        let Ok(rel) = t.file_path.strip_prefix(&intent.session_dir) else {
            report.unaccounted.push(Removed { file_path: t.file_path.clone() });
            continue;
        };
        let rel: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
        let Some((name, parents)) = rel.split_last() else { continue };
        let parent = open_dir_beneath(session.as_fd(), parents).ok();
        let qpath = intent.quarantine_dir.join(&t.quarantine_name);
        let in_q = quarantine.as_ref().and_then(|q| Identity::of_name(q, &t.quarantine_name).ok().flatten());
        match in_q {
            Some(id) => {
                let matches = id.file_type() == FileType::RegularFile && t.pin.same_object(&id);
                if !matches {
                    report.preserved.push(Preserved {
                        file_path: Some(t.file_path.clone()),
                        quarantine_path: qpath,
                        why: "identity_differs",
                    });
                    continue;
                }
                let (Some(q), Some(parent)) = (quarantine.as_ref(), parent.as_ref()) else {
                    report.preserved.push(Preserved {
                        file_path: Some(t.file_path.clone()),
                        quarantine_path: qpath,
                        why: "original_directory_missing",
                    });
                    continue;
                };
                match rename_noreplace(q.as_fd(), &t.quarantine_name, parent.as_fd(), name) {
                    Ok(()) => {
                        let _ = rustix::fs::fsync(parent.as_fd());
                        report.restored.push(Restored { file_path: t.file_path.clone(), from: qpath });
                    }
                    Err(e) => report.preserved.push(Preserved {
                        file_path: Some(t.file_path.clone()),
                        quarantine_path: qpath,
                        why: if e.kind() == io::ErrorKind::AlreadyExists { "name_occupied" } else { "restore_failed" },
                    }),
                }
            }
            None => {
                let at_path = parent.as_ref().and_then(|p| Identity::of_name(p, name).ok().flatten());
                if at_path.is_some_and(|id| t.pin.same_object(&id)) {
                    report.untouched.push(Removed { file_path: t.file_path.clone() });
                } else if verified.contains(&i) {
                    report.removed_before_crash.push(Removed { file_path: t.file_path.clone() });
                } else {
                    report.unaccounted.push(Removed { file_path: t.file_path.clone() });
                }
            }
        }
    }
    match quarantine {
        None => true,
        Some(q) => {
            name_leftovers(&q, &intent.quarantine_dir, intent, report);
            drop(q);
            rustix::fs::unlinkat(session.as_fd(), qname.as_str(), AtFlags::REMOVEDIR).is_ok()
        }
    }
}

/// Names entries of a quarantine that no journal target accounts for.
fn name_leftovers(
    q: &std::os::fd::OwnedFd,
    qpath: &Path,
    intent: &crate::journal::JournalIntent,
    report: &mut RecoveryReport,
) {
    let known: HashSet<&str> = intent.targets.iter().map(|t| t.quarantine_name.as_str()).collect();
    for name in list_dir(q) {
        if !known.contains(name.as_str()) {
            report.preserved.push(Preserved {
                file_path: None,
                quarantine_path: qpath.join(&name),
                why: "not_in_journal",
            });
        }
    }
}

fn list_dir(dir: &std::os::fd::OwnedFd) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(fd) = rustix::fs::openat(
        dir.as_fd(),
        ".",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) else {
        return out;
    };
    let mut buf = vec![std::mem::MaybeUninit::<u8>::uninit(); 16 * 1024];
    let mut it = rustix::fs::RawDir::new(fd, &mut buf);
    while let Some(Ok(e)) = it.next() {
        let n = e.file_name().to_string_lossy();
        if n != "." && n != ".." {
            out.push(n.into_owned());
        }
    }
    out
}

fn sweep_orphans(ws: &Path, known: &HashSet<PathBuf>, report: &mut RecoveryReport) {
    let parent = ws.join(layout::WINX_DIR).join(layout::TMP_DIR);
    let Ok(tmp) = open_dir_abs(&parent) else { return };
    for session in list_dir(&tmp) {
        if !layout::is_session_name(&session) {
            continue;
        }
        let Ok(sfd) = open_dir_beneath(tmp.as_fd(), &[&session]) else { continue };
        for name in list_dir(&sfd) {
            if !name.starts_with(RESERVED_PREFIX) {
                continue;
            }
            let qpath = parent.join(&session).join(&name);
            if known.contains(&qpath) {
                continue;
            }
            if rustix::fs::unlinkat(sfd.as_fd(), name.as_str(), AtFlags::REMOVEDIR).is_ok() {
                continue;
            }
            if let Ok(q) = open_dir_beneath(sfd.as_fd(), &[&name]) {
                for entry in list_dir(&q) {
                    report.preserved.push(Preserved {
                        file_path: None,
                        quarantine_path: qpath.join(entry),
                        why: "no_journal",
                    });
                }
            }
        }
    }
}
