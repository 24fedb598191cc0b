//! Crash recovery of interrupted releases (contract section 8).
//!
//! Recovery reads every intent journal under `D/journal`. For each target it
//! finds in the journal's quarantine directory whose identity still matches
//! the pin, it puts the object back under its original name with
//! `RENAME_NOREPLACE` when that name is free, and otherwise leaves it in
//! place and names it. It never deletes a file, finishes nothing
//! destructive, removes quarantine directories only when empty, and retires
//! a journal only when its quarantine is verifiably gone (`ENOENT`, or
//! removed by this run): any other error opening or reading it keeps the
//! journal, the only map from quarantine names back to original paths, and
//! is reported in [`RecoveryReport::kept_journals`]. A journal that
//! records the quarantine's identity (dev, inode, birth time) is also kept
//! when the directory at the journaled path is another one, or when the
//! quarantine is not there and a target is unaccounted for: the session
//! directory was moved or recreated, and the quarantine may live on
//! elsewhere. It is idempotent. A
//! torn or corrupt journal preserves everything and is reported.
//!
//! One recovery at a time, and never beside a release in flight: recovery
//! holds an exclusive `flock(2)` on `D/journal` (the journal's lock, which every release takes shared), and a
//! release holds it shared while its journal is live.
//!
//! With workspaces given, orphan `.winx-release-*` directories in their
//! sessions (no journal names them: a crash before the journal was written)
//! are removed when empty and their entries named otherwise.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::{AtFlags, FileType};

use crate::fault::{FaultHook, FaultPoint};
use crate::journal::{read_journal, JournalLock, ReadJournal};
use crate::layout;
use crate::quarantine::rename_noreplace;
use crate::resolve::{open_dir_abs, open_dir_beneath, WalkError};
use winx_release_kernel::identity::Identity;

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
    /// Journals kept because something could not be opened or read (not
    /// `ENOENT`): the error, so that nothing is forgotten silently.
    pub kept_journals: Vec<KeptJournal>,
}

/// A journal kept because recovery met an error other than `ENOENT`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct KeptJournal {
    /// The journal file.
    pub journal: PathBuf,
    /// What failed.
    pub error: String,
}

/// Options of a recovery run.
pub struct RecoveryOptions<'a> {
    /// How long to wait for the exclusive lock on `D/journal` (a release in
    /// flight or another recovery holds it) before refusing with
    /// [`io::ErrorKind::WouldBlock`].
    pub lock_wait: Duration,
    /// Fault injection at [`FaultPoint::RecoveryOpenQuarantine`] (tests).
    pub faults: Option<&'a dyn FaultHook>,
}

impl Default for RecoveryOptions<'_> {
    fn default() -> Self {
        RecoveryOptions { lock_wait: Duration::from_secs(30), faults: None }
    }
}

/// Runs recovery over `data_dir`'s journals, and sweeps orphan quarantines
/// in `workspaces`' sessions. With `workspaces` non-empty, only journals of
/// those workspaces are processed. Waits up to 30 s for the journal lock.
pub fn recover(data_dir: &Path, workspaces: &[PathBuf]) -> io::Result<RecoveryReport> {
    recover_with(data_dir, workspaces, &RecoveryOptions::default())
}

/// [`recover`] with options.
///
/// Fails with [`io::ErrorKind::WouldBlock`] when the exclusive lock on
/// `D/journal` is not granted within `opts.lock_wait`; nothing is touched
/// then.
pub fn recover_with(data_dir: &Path, workspaces: &[PathBuf], opts: &RecoveryOptions<'_>) -> io::Result<RecoveryReport> {
    let mut report = RecoveryReport::default();
    let jdir = data_dir.join("journal");
    let _lock = match JournalLock::exclusive(&jdir, opts.lock_wait)? {
        Some(l) => l,
        None => {
            // No journal directory: no release ever ran on this data
            // directory (one creates it, and takes its lock, before its
            // quarantine exists), so there is nothing to recover, and an
            // orphan sweep here could race a first release.
            return Ok(report);
        }
    };
    let mut known_quarantines = HashSet::new();
    // Every entry, or an error: a listing cut short by an error would
    // pass over the journals after it as if there were none.
    let mut journals: Vec<PathBuf> = fs::read_dir(&jdir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<io::Result<Vec<PathBuf>>>()?
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    journals.sort();
    for jpath in journals {
        let read = match read_journal(&jpath) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                tracing::warn!(journal = %jpath.display(), error = %e, "journal unreadable; kept");
                report.kept_journals.push(KeptJournal { journal: jpath, error: format!("reading the journal: {e}") });
                continue;
            }
        };
        match read {
            ReadJournal::Torn => {
                tracing::warn!(journal = %jpath.display(), "torn intent: the release never started moving");
                fs::remove_file(&jpath)?;
                winx_release_kernel::sys::fsync_dir(&jdir)?;
                report.torn_journals.push(jpath);
            }
            ReadJournal::Idle => {
                fs::remove_file(&jpath)?;
                winx_release_kernel::sys::fsync_dir(&jdir)?;
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
                match recover_one(&intent, &verified, opts, &mut report) {
                    Ok(true) => {
                        fs::remove_file(&jpath)?;
                        winx_release_kernel::sys::fsync_dir(&jdir)?;
                    }
                    Ok(false) => {}
                    Err(error) => {
                        tracing::warn!(journal = %jpath.display(), %error, "quarantine not verifiably gone; journal kept");
                        report.kept_journals.push(KeptJournal { journal: jpath, error });
                    }
                }
            }
        }
    }
    for ws in workspaces {
        sweep_orphans(ws, &known_quarantines, &mut report)?;
    }
    Ok(report)
}

/// Recovers one journal; returns whether its quarantine is gone (and the
/// journal may be retired), or the error that keeps the journal.
fn recover_one(
    intent: &crate::journal::JournalIntent,
    verified: &[usize],
    opts: &RecoveryOptions<'_>,
    report: &mut RecoveryReport,
) -> Result<bool, String> {
    let session = match open_dir_abs(&intent.session_dir) {
        Ok(s) => s,
        Err(e) => {
            // The session directory is gone, holds a link, or cannot be
            // opened: touch nothing, keep the journal.
            for t in &intent.targets {
                report.unaccounted.push(Removed { file_path: t.file_path.clone() });
            }
            return Err(format!("session directory {}: {e}", intent.session_dir.display()));
        }
    };
    let qname = intent.quarantine_dir.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
    if !layout::is_reserved_name(&qname) || intent.quarantine_dir.parent() != Some(intent.session_dir.as_path()) {
        return Err(format!("quarantine {} is not a reserved name in the session", intent.quarantine_dir.display()));
    }
    let opened =
        match opts.faults.map(|f| f.at(&FaultPoint::RecoveryOpenQuarantine { quarantine: &intent.quarantine_dir })) {
            Some(Err(e)) => Err(WalkError::Io(0, e)),
            _ => open_dir_beneath(session.as_fd(), &[&qname]),
        };
    // Only ENOENT means gone; anything else (EACCES, EMFILE, a link or a
    // non-directory at the name) keeps the journal.
    let quarantine = match opened {
        Ok(q) => Some(q),
        Err(WalkError::NotFound(_)) => None,
        Err(WalkError::Io(_, e)) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("opening quarantine {}: {e}", intent.quarantine_dir.display())),
    };
    // A directory at the journaled path that is not the one the release
    // made (the session directory was replaced): touch nothing in it.
    if let (Some(q), Some(recorded)) = (quarantine.as_ref(), intent.quarantine_identity) {
        match Identity::of_fd(q) {
            Ok(id) if recorded.matches(&id) => {}
            Ok(_) => {
                return Err(format!(
                    "{} is not the quarantine the release made (its identity differs: the session directory was \
                     replaced); the real quarantine may live elsewhere",
                    intent.quarantine_dir.display()
                ))
            }
            Err(e) => return Err(format!("identifying quarantine {}: {e}", intent.quarantine_dir.display())),
        }
    }
    let unaccounted_before = report.unaccounted.len();
    let mut keep: Option<String> = None;
    for (i, t) in intent.targets.iter().enumerate() {
        let Ok(rel) = t.file_path.strip_prefix(&intent.session_dir) else {
            report.unaccounted.push(Removed { file_path: t.file_path.clone() });
            continue;
        };
        let rel: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
        let Some((name, parents)) = rel.split_last() else { continue };
        let parent = open_dir_beneath(session.as_fd(), parents).ok();
        let qpath = intent.quarantine_dir.join(&t.quarantine_name);
        let in_q = match quarantine.as_ref().map(|q| Identity::of_name(q, &t.quarantine_name)) {
            Some(Ok(id)) => id,
            None => None,
            Some(Err(e)) => {
                // Cannot tell whether it is there: name it, keep the journal.
                report.preserved.push(Preserved {
                    file_path: Some(t.file_path.clone()),
                    quarantine_path: qpath,
                    why: "inaccessible",
                });
                keep.get_or_insert(format!("{}: {e}", intent.quarantine_dir.join(&t.quarantine_name).display()));
                continue;
            }
        };
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
                        // Back under its name; until that is durable the
                        // journal stays (a crash could undo the rename).
                        if let Err(e) = sync_dir(opts, parent.as_fd(), &t.file_path) {
                            keep.get_or_insert(format!("syncing the directory of {}: {e}", t.file_path.display()));
                        }
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
    if let Some(why) = keep {
        return Err(why);
    }
    match quarantine {
        // Gone from its journaled path. A journal that records the
        // quarantine's identity is retired only when every target is
        // accounted for (back at its path, or verified and removed): else
        // the quarantine holding them may live on elsewhere (the workspace
        // moved or recreated), and the journal is its only map back.
        None if intent.quarantine_identity.is_some() && report.unaccounted.len() > unaccounted_before => Err(format!(
            "quarantine {} not found at its journaled path and {} target(s) unaccounted for: it may live \
                 elsewhere (the session directory moved or was recreated)",
            intent.quarantine_dir.display(),
            report.unaccounted.len() - unaccounted_before
        )),
        None => Ok(true),
        Some(q) => {
            name_leftovers(&q, &intent.quarantine_dir, intent, report);
            drop(q);
            match rustix::fs::unlinkat(session.as_fd(), qname.as_str(), AtFlags::REMOVEDIR) {
                // Its removal, and the moves before it, durable before the
                // journal goes.
                Ok(()) => match sync_dir(opts, session.as_fd(), &intent.session_dir) {
                    Ok(()) => Ok(true),
                    Err(e) => Err(format!("syncing {}: {e}", intent.session_dir.display())),
                },
                Err(rustix::io::Errno::NOENT) => Ok(true),
                // Not empty: the named objects stay, and so does the journal.
                Err(rustix::io::Errno::NOTEMPTY) | Err(rustix::io::Errno::EXIST) => Ok(false),
                Err(e) => Err(format!("removing quarantine {}: {e}", intent.quarantine_dir.display())),
            }
        }
    }
}

/// `fsync`s the directory `dir` (at `path`) whose entries recovery changed.
///
/// # References
/// - [`fsync(2)`](https://man7.org/linux/man-pages/man2/fsync.2.html)
fn sync_dir(opts: &RecoveryOptions<'_>, dir: std::os::fd::BorrowedFd<'_>, path: &Path) -> io::Result<()> {
    if let Some(f) = opts.faults {
        f.at(&FaultPoint::DirSync { dir: path })?;
    }
    rustix::fs::fsync(dir).map_err(Into::into)
}

/// Names entries of a quarantine that no journal target accounts for.
fn name_leftovers(
    q: &std::os::fd::OwnedFd,
    qpath: &Path,
    intent: &crate::journal::JournalIntent,
    report: &mut RecoveryReport,
) {
    let known: HashSet<&str> = intent.targets.iter().map(|t| t.quarantine_name.as_str()).collect();
    let names = match list_dir(q) {
        Ok(names) => names,
        Err(e) => {
            tracing::warn!(quarantine = %qpath.display(), error = %e, "a quarantine cannot be listed");
            report.preserved.push(Preserved {
                file_path: None,
                quarantine_path: qpath.to_path_buf(),
                why: "inaccessible",
            });
            return;
        }
    };
    for name in names {
        if !known.contains(name.as_str()) {
            report.preserved.push(Preserved {
                file_path: None,
                quarantine_path: qpath.join(&name),
                why: "not_in_journal",
            });
        }
    }
}

/// Every name in the directory `dir` but `.` and `..`, or the error that
/// cut the listing short.
fn list_dir(dir: &std::os::fd::OwnedFd) -> io::Result<Vec<String>> {
    let mut out = Vec::new();
    let fd = rustix::fs::openat(
        dir.as_fd(),
        ".",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let mut buf = vec![std::mem::MaybeUninit::<u8>::uninit(); 16 * 1024];
    let mut it = rustix::fs::RawDir::new(fd, &mut buf);
    while let Some(e) = it.next() {
        let e = e?;
        let n = e.file_name().to_string_lossy();
        if n != "." && n != ".." {
            out.push(n.into_owned());
        }
    }
    Ok(out)
}

/// Names the quarantines under `ws`'s session directories that no journal
/// accounts for, removing the empty ones. A directory that is missing (no
/// session ever ran there, or one that went meanwhile) has none; one that
/// cannot be read fails the sweep, so that a recovery never says "nothing
/// left" about what it could not look at.
fn sweep_orphans(ws: &Path, known: &HashSet<PathBuf>, report: &mut RecoveryReport) -> io::Result<()> {
    let gone = |e: &WalkError| match e {
        WalkError::NotFound(_) => true,
        WalkError::Io(_, e) => e.kind() == io::ErrorKind::NotFound,
        _ => false,
    };
    let walk = |e: WalkError, at: &Path| io::Error::other(format!("{}: {e}", at.display()));
    let parent = ws.join(layout::WINX_DIR).join(layout::TMP_DIR);
    let tmp = match open_dir_abs(&parent) {
        Ok(fd) => fd,
        Err(e) if gone(&e) => return Ok(()),
        Err(e) => return Err(walk(e, &parent)),
    };
    for session in list_dir(&tmp)? {
        if !layout::is_session_name(&session) {
            continue;
        }
        let sfd = match open_dir_beneath(tmp.as_fd(), &[&session]) {
            Ok(fd) => fd,
            Err(e) if gone(&e) => continue,
            Err(e) => return Err(walk(e, &parent.join(&session))),
        };
        for name in list_dir(&sfd)? {
            if !layout::is_reserved_name(&name) {
                continue;
            }
            let qpath = parent.join(&session).join(&name);
            if known.contains(&qpath) {
                continue;
            }
            if rustix::fs::unlinkat(sfd.as_fd(), name.as_str(), AtFlags::REMOVEDIR).is_ok() {
                continue;
            }
            let entries = match open_dir_beneath(sfd.as_fd(), &[&name]) {
                Ok(q) => list_dir(&q).map_err(|e| e.to_string()),
                Err(e) if gone(&e) => continue,
                Err(e) => Err(e.to_string()),
            };
            match entries {
                Ok(entries) => report.preserved.extend(entries.into_iter().map(|entry| Preserved {
                    file_path: None,
                    quarantine_path: qpath.join(entry),
                    why: "no_journal",
                })),
                Err(e) => {
                    tracing::warn!(quarantine = %qpath.display(), error = %e, "a quarantine cannot be listed");
                    report.preserved.push(Preserved { file_path: None, quarantine_path: qpath, why: "inaccessible" });
                }
            }
        }
    }
    Ok(())
}
