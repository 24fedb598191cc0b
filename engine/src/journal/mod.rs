//! The durable intent journal of a release.
//!
//! Before its first rename a release writes `D/journal/<id>.jsonl`: one JSON
//! line of intent naming the quarantine directory and, per target, its
//! original path, its quarantine name and its pinned identity. The file is
//! fdatasynced and its directory fsynced (that `fsync` is group-committed
//! with concurrent releases, `durable::fsync_dir`). Before each unlink a `verified` line is
//! appended, so that recovery can tell a removal that was verified from one
//! that never happened; the marks are fdatasynced together when the journal
//! outlives the release (see [`Journal::mark`]). The journal is retired
//! (unlinked; its directory is not fsynced then, see
//! [`Journal::retire_after_quarantine`]) at the end of the release when the
//! quarantine is gone;
//! a guardian instead overwrites what it wrote with zero bytes and writes
//! its next release's intent over them, in place (`idle.rs`), so a
//! journal's file is named by the id of the release that created it, not
//! always of the one it holds.
//!
//! A journal's content ends at its first zero byte or at its end, whichever
//! comes first (JSON never holds a raw zero byte: a string escapes it). A
//! torn last line (a crash during an append) is ignored by the reader; a
//! torn or unparsable intent line makes recovery preserve everything.
//!
//! A live journal is guarded by a shared `flock(2)` on `D/journal`
//! ([`JournalLock::shared`], held by [`Journal`] until it is retired or
//! dropped); recovery takes the lock exclusively
//! ([`JournalLock::exclusive`]), so it never runs beside a release in
//! flight, and two recoveries never run at once.
//!
//! # References
//! - [`flock(2)`](https://man7.org/linux/man-pages/man2/flock.2.html)

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::{FlockOperation, Mode, OFlags};

use winx_release_kernel::sys::{create_private_dir_all, fsync_dir};

mod idle;

pub use idle::{drop_idle_journals, keep_idle_journals};
// The quarantine the journal names, for this workspace's recovery tests,
// which stage crashed releases by hand.
pub use crate::quarantine::{entry_name, rename_noreplace, Quarantine};
use winx_release_kernel::identity::{Identity, Pin};

/// How long a release waits for the shared lock of `D/journal` while a
/// recovery holds it exclusively (30 s).
pub const JOURNAL_LOCK_WAIT: Duration = Duration::from_secs(30);

/// One target as the journal records it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JournalTarget {
    /// The original exact path: a JSON string, or `{"hex": "<bytes>"}` for
    /// a path that is not UTF-8.
    #[serde(with = "path_bytes")]
    pub file_path: PathBuf,
    /// Its name inside the quarantine directory.
    pub quarantine_name: String,
    /// What was pinned.
    pub pin: Pin,
}

/// The intent line.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JournalIntent {
    /// Format version (1).
    pub version: u32,
    /// Journal id (the file stem of a journal this release created; a
    /// reused file keeps the stem of the release that created it).
    pub id: String,
    /// The workspace root.
    pub workspace: PathBuf,
    /// The session directory.
    pub session_dir: PathBuf,
    /// The quarantine directory.
    pub quarantine_dir: PathBuf,
    /// The quarantine directory's identity when the intent was written, so
    /// that recovery judges the directory and not only its path. Journals
    /// written before this field existed have none (and recovery treats
    /// them as it always did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantine_identity: Option<DirIdentity>,
    /// Every target in request order.
    pub targets: Vec<JournalTarget>,
}

/// The identity of a directory: device, inode and, where the filesystem
/// reports it, birth time (an inode number alone is reused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DirIdentity {
    /// Device number.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
    /// Birth time (seconds, nanoseconds), where known.
    #[serde(default)]
    pub btime: Option<(i64, u32)>,
}

impl DirIdentity {
    /// The directory part of an identity.
    pub fn of(id: &Identity) -> DirIdentity {
        DirIdentity { dev: id.dev, ino: id.ino, btime: id.btime }
    }

    /// Whether `id` is this directory: same device and inode, and the same
    /// birth time where both know one.
    pub fn matches(&self, id: &Identity) -> bool {
        self.dev == id.dev
            && self.ino == id.ino
            && (self.btime.is_none() || id.btime.is_none() || self.btime == id.btime)
    }
}

/// A progress line appended after the intent.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum JournalMark {
    /// Target `index` was verified in quarantine and is about to be unlinked.
    Verified {
        /// Target index.
        index: usize,
    },
}

/// A `flock(2)` on the journal directory `D/journal`, released on drop.
#[derive(Debug)]
pub struct JournalLock {
    _dir: OwnedFd,
}

impl JournalLock {
    fn open(dir: &Path) -> io::Result<OwnedFd> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        Ok(rustix::fs::openat(rustix::fs::CWD, dir, flags, Mode::empty())?)
    }

    /// Takes the lock shared, as a release does while its journal is live;
    /// creates `dir` (mode 0700) when missing. Waits at most
    /// [`JOURNAL_LOCK_WAIT`] while a recovery holds it.
    pub fn shared(dir: &Path) -> io::Result<JournalLock> {
        Self::shared_within(dir, JOURNAL_LOCK_WAIT)
    }

    /// [`JournalLock::shared`], waiting at most `wait`: a recovery stuck
    /// on a hung filesystem must not hold every release (and the admission
    /// barriers they hold) forever. Past `wait` it fails with
    /// [`io::ErrorKind::WouldBlock`] and a message saying why.
    pub fn shared_within(dir: &Path, wait: Duration) -> io::Result<JournalLock> {
        create_private_dir_all(dir)?;
        let fd = Self::open(dir)?;
        let deadline = Instant::now() + wait;
        loop {
            match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockShared) {
                Ok(()) => return Ok(JournalLock { _dir: fd }),
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::WOULDBLOCK) if Instant::now() < deadline => {
                    std::thread::sleep(
                        Duration::from_millis(20).min(deadline.saturating_duration_since(Instant::now())),
                    );
                }
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WouldBlock,
                        format!(
                            "{} has been locked by a recovery for {} s (see `winx-release recover`); nothing was \
                             touched, retry once it ends",
                            dir.display(),
                            wait.as_secs()
                        ),
                    ))
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Takes the lock exclusively, as recovery does, waiting at most
    /// `wait`; `Ok(None)` when `dir` does not exist (no journal at all).
    /// Fails with [`io::ErrorKind::WouldBlock`] when a release in flight or
    /// another recovery still holds it after `wait`.
    pub fn exclusive(dir: &Path, wait: Duration) -> io::Result<Option<JournalLock>> {
        let fd = match Self::open(dir) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let deadline = Instant::now() + wait;
        loop {
            match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(Some(JournalLock { _dir: fd })),
                Err(rustix::io::Errno::WOULDBLOCK) | Err(rustix::io::Errno::INTR) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WouldBlock,
                        format!("{} is locked by a release in flight or another recovery", dir.display()),
                    ))
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// An open journal of a running release. It holds the journal directory's
/// shared lock until it is retired or dropped.
#[derive(Debug)]
pub struct Journal {
    file: File,
    path: PathBuf,
    dir: PathBuf,
    /// Bytes written from offset 0 (the intent and the marks): where the
    /// next mark goes, and what retiring in place zeroes.
    written: u64,
    /// The file's size before this release wrote (0 for a new file).
    kept_len: u64,
    _lock: JournalLock,
}

impl Journal {
    /// Durably writes the intent into `dir` and returns the open journal.
    ///
    /// `lock` is the shared lock of `dir` ([`JournalLock::shared`]), taken by
    /// the caller before it created the quarantine, so that no recovery can
    /// see the quarantine or the journal while they are live.
    pub fn begin(lock: JournalLock, dir: &Path, intent: &JournalIntent) -> io::Result<Journal> {
        let mut line = serde_json::to_vec(intent).map_err(io::Error::other)?;
        line.push(b'\n');
        let written = line.len() as u64;
        // A kept journal of zero bytes (`idle.rs`; the lock held keeps
        // recovery out): its name is durable since it was created, so the
        // intent's `fdatasync` is all it needs; written over the zeros, in
        // blocks the file already has, that flush writes no metadata while
        // the intent fits (the size does not change).
        if let Some(k) = idle::take(dir) {
            k.file.write_all_at(&line, 0)?;
            k.file.sync_data()?;
            return Ok(Journal { file: k.file, path: k.path, dir: k.dir, written, kept_len: k.len, _lock: lock });
        }
        create_private_dir_all(dir)?;
        let path = dir.join(format!("{}.jsonl", intent.id));
        let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
        file.write_all(&line)?;
        // The intent's bytes (and the size that reaches them), then its name
        // in `dir`: that `fsync` is shared with every release writing its
        // intent at the same time (`durable::fsync_dir`, group commit).
        file.sync_data()?;
        fsync_dir(dir)?;
        Ok(Journal { file, path, dir: dir.to_path_buf(), written, kept_len: 0, _lock: lock })
    }

    /// Appends a progress mark and makes it durable.
    ///
    /// The line is written (to the page cache, where a killed process leaves
    /// it for recovery) before the caller unlinks; it is not fsynced one by
    /// one: a release of 100 helpers would pay 100 `fdatasync`s (a third of
    /// its time here). [`Journal::sync`] makes the marks durable once, when
    /// the journal must outlive the release. After a power loss a lost mark
    /// only makes recovery list that target as `unaccounted` instead of
    /// `removed_before_crash`: recovery never deletes, so no byte depends on
    /// it.
    pub fn mark(&mut self, mark: &JournalMark) -> io::Result<()> {
        let mut line = serde_json::to_vec(mark).map_err(io::Error::other)?;
        line.push(b'\n');
        self.file.write_all_at(&line, self.written)?;
        self.written += line.len() as u64;
        Ok(())
    }

    /// Makes every mark written so far durable.
    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// The journal file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the journal durably: unlinks it and fsyncs its directory,
    /// or, where this process keeps retired journals (`idle.rs`),
    /// overwrites it with zero bytes and fdatasyncs it (a journal of zero
    /// bytes is [`ReadJournal::Idle`]: nothing in flight).
    pub fn retire(self) -> io::Result<()> {
        if idle::on() {
            self.zero()?;
            self.file.sync_data()?;
            return self.keep();
        }
        std::fs::remove_file(&self.path)?;
        fsync_dir(&self.dir)
    }

    /// Removes the journal without making that durable: for a release
    /// whose quarantine's removal is already durable (the session
    /// directory was fsynced after it). Should a power loss bring the
    /// journal back, recovery finds its quarantine gone (`ENOENT`) and
    /// retires it; no byte depends on it. Where this process keeps retired
    /// journals it is overwritten with zero bytes, not unlinked (a kept
    /// file's next intent is fdatasynced over whatever a power loss left).
    pub fn retire_after_quarantine(self) -> io::Result<()> {
        if idle::on() {
            self.zero()?;
            return self.keep();
        }
        std::fs::remove_file(&self.path)
    }

    /// Overwrites everything written with zero bytes, in place, and pads
    /// the file with zeros to [`idle::KEPT_LEN`]: a kept file keeps its
    /// blocks (truncating freed them, and the next intent allocated them
    /// again: two block-bitmap updates and an inode write per release),
    /// and an intent that fits never changes its size.
    /// (Bytes past what this release wrote were zero when it began.)
    fn zero(&self) -> io::Result<()> {
        let len = self.written.max(idle::KEPT_LEN);
        let zeros = vec![0u8; usize::try_from(len).map_err(io::Error::other)?];
        self.file.write_all_at(&zeros, 0)
    }

    /// Keeps the (zeroed) file for reuse, or unlinks it when no room is
    /// left.
    fn keep(self) -> io::Result<()> {
        let Journal { file, path, dir, written, kept_len, _lock } = self;
        let len = written.max(idle::KEPT_LEN).max(kept_len);
        match idle::put(idle::Kept { dir, path, file, len }) {
            Ok(()) => Ok(()),
            Err(k) => std::fs::remove_file(&k.path),
        }
    }
}

/// A journal read back from disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadJournal {
    /// The intent and every complete mark after it.
    Valid {
        /// The intent.
        intent: JournalIntent,
        /// Indices of targets verified before unlink.
        verified: Vec<usize>,
    },
    /// The intent line was never completed (no line end): the release died
    /// while writing it, before its first rename, so nothing moved.
    Torn,
    /// The file is empty or starts with a zero byte: a retired journal a
    /// guardian kept for reuse (`idle.rs`), or one whose intent never
    /// reached the disk. Nothing is in flight; recovery removes it without
    /// a report.
    Idle,
    /// The intent line is complete but unparsable.
    Corrupt {
        /// Why.
        detail: String,
    },
}

/// Reads a journal file; a torn trailing mark is ignored (see
/// [`parse_journal`]).
pub fn read_journal(path: &Path) -> io::Result<ReadJournal> {
    let mut bytes = Vec::new();
    winx_release_kernel::sys::open_regular(path)?.read_to_end(&mut bytes)?;
    Ok(parse_journal(&bytes))
}

/// Parses a journal's bytes up to the first zero byte (module docs): the
/// intent line, then every complete mark; a torn trailing mark and unknown
/// lines are ignored, a torn intent is [`ReadJournal::Torn`], an unparsable
/// one [`ReadJournal::Corrupt`], no content (an empty file, or zero bytes
/// from the start) [`ReadJournal::Idle`]. Never panics, whatever the bytes.
pub fn parse_journal(bytes: &[u8]) -> ReadJournal {
    let bytes = bytes.split(|b| *b == 0).next().unwrap_or_default();
    if bytes.is_empty() {
        return ReadJournal::Idle;
    }
    let mut lines = bytes.split(|b| *b == b'\n');
    let first = lines.next().unwrap_or_default();
    if !bytes.contains(&b'\n') {
        return ReadJournal::Torn;
    }
    let intent: JournalIntent = match serde_json::from_slice(first) {
        Ok(i) => i,
        Err(e) => return ReadJournal::Corrupt { detail: format!("intent line: {e}") },
    };
    if intent.version != 1 {
        return ReadJournal::Corrupt { detail: format!("unknown version {}", intent.version) };
    }
    let mut verified = Vec::new();
    for line in lines {
        if line.is_empty() {
            continue;
        }
        if let Ok(JournalMark::Verified { index }) = serde_json::from_slice::<JournalMark>(line) {
            verified.push(index);
        }
    }
    ReadJournal::Valid { intent, verified }
}

/// A path in a journal line: its string when it is UTF-8, else its bytes in
/// hex, so that a helper of any name can be journaled and put back.
mod path_bytes {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use std::path::{Path, PathBuf};

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Text(String),
        Bytes { hex: String },
    }

    pub fn serialize<S: Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
        match p.to_str() {
            Some(t) => Repr::Text(t.to_owned()),
            None => Repr::Bytes { hex: hex::encode(p.as_os_str().as_bytes()) },
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
        Ok(match Repr::deserialize(d)? {
            Repr::Text(t) => PathBuf::from(t),
            Repr::Bytes { hex } => {
                PathBuf::from(OsStr::from_bytes(&hex::decode(hex).map_err(serde::de::Error::custom)?))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use std::path::PathBuf;

    use super::{parse_journal, JournalTarget, ReadJournal};
    use crate::Pin;

    #[test]
    fn content_ends_at_the_first_zero_byte() {
        let intent =
            br#"{"version":1,"id":"j","workspace":"/w","session_dir":"/w/s","quarantine_dir":"/w/s/q","targets":[]}"#;
        let line = |extra: &[u8]| [&intent[..], b"\n", extra].concat();
        let mark = b"{\"event\":\"verified\",\"index\":3}\n";
        // Zero bytes alone, or before anything: a kept journal, idle.
        assert_eq!(parse_journal(&[0; 4096]), ReadJournal::Idle);
        assert_eq!(parse_journal(&[&[0u8][..], &line(mark)].concat()), ReadJournal::Idle);
        // Content, then zeros: the marks before the zeros count, none after.
        let padded = [line(mark), vec![0; 100], mark.to_vec()].concat();
        let ReadJournal::Valid { verified, .. } = parse_journal(&padded) else { panic!() };
        assert_eq!(verified, vec![3]);
        let ReadJournal::Valid { verified, .. } = parse_journal(&[line(b""), vec![0; 10], mark.to_vec()].concat())
        else {
            panic!()
        };
        assert!(verified.is_empty());
        // An intent cut by zeros (its line end never written) is torn.
        assert_eq!(parse_journal(&[&intent[..40], &[0; 64]].concat()), ReadJournal::Torn);
    }

    #[test]
    fn a_target_path_of_any_bytes_round_trips_and_utf8_stays_a_string() {
        let pin = Pin {
            dev: 1,
            ino: 2,
            size: 3,
            ctime_sec: 4,
            ctime_nsec: 5,
            sha256: [6; 32],
            btime: None,
            generation: None,
        };
        let t = |p: PathBuf| JournalTarget { file_path: p, quarantine_name: "0".into(), pin };
        let text = serde_json::to_value(t(PathBuf::from("/w/a.sh"))).unwrap();
        assert_eq!(text["file_path"], "/w/a.sh");
        let odd = t(PathBuf::from(OsStr::from_bytes(b"/w/h\xff.sh")));
        let v = serde_json::to_value(&odd).unwrap();
        assert_eq!(v["file_path"], serde_json::json!({"hex": hex::encode(b"/w/h\xff.sh")}));
        assert_eq!(serde_json::from_value::<JournalTarget>(v).unwrap(), odd);
    }
}
