//! The ledger of every byte the stress tool created, and the findings of
//! the run (violations, bytes lost, quota violations, contract mismatches).
//!
//! Each path the tool creates has a current *generation*: its SHA-256, size
//! and physical identity (device, inode, size, change and modification
//! times, links) as the tool saw them. A generation is `Present` (it must be
//! there with exactly its bytes) or `Released` (a release reported it
//! `released`: it must be gone). Verification stats every entry and re-hashes
//! only those whose identity changed, so it is cheap enough to run after
//! every step; the final verification re-hashes everything.
//!
//! A present generation that is missing is *lost* (its size counts in
//! `bytes_lost`); one whose bytes changed without the tool changing them is
//! *overwritten* (lost too). Replacing a file deliberately (an adversarial
//! change) makes a new generation and retires the old one: that is not loss.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::Serialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// Most entries kept in each findings list (counts stay exact).
const KEEP: usize = 100;

static NEXT_GEN: AtomicU64 = AtomicU64::new(1);

/// The physical identity of a file as `lstat` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ident {
    dev: u64,
    ino: u64,
    size: u64,
    ctime: (i64, i64),
    mtime: (i64, i64),
    nlink: u64,
}

impl Ident {
    fn of(m: &std::fs::Metadata) -> Ident {
        Ident {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            ctime: (m.ctime(), m.ctime_nsec()),
            mtime: (m.mtime(), m.mtime_nsec()),
            nlink: m.nlink(),
        }
    }
}

/// Whether a generation must be there or must be gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Must be at its path with its bytes.
    Present,
    /// A release reported it removed: must be gone.
    Released,
}

/// One generation of one path.
#[derive(Clone, Debug)]
pub struct Gen {
    /// Unique in the run.
    pub id: u64,
    /// Where it is.
    pub path: PathBuf,
    /// SHA-256 of its bytes.
    pub sha: [u8; 32],
    /// Its size.
    pub size: u64,
    ident: Ident,
    /// Present or released.
    pub state: State,
}

impl Gen {
    /// `sha256:<hex>`, the contract's revision.
    pub fn revision(&self) -> String {
        format!("sha256:{}", hex::encode(self.sha))
    }
}

thread_local! {
    /// The read buffer of [`hash_file`].
    static HASH_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Hashes the regular file at `path` without following a final link.
pub fn hash_file(path: &Path) -> io::Result<([u8; 32], u64, Ident)> {
    let flags = rustix::fs::OFlags::NOFOLLOW.bits() | rustix::fs::OFlags::NONBLOCK.bits();
    let mut f = File::options().read(true).custom_flags(flags as i32).open(path)?;
    let before = f.metadata()?;
    if !before.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    let mut h = Sha256::new();
    let mut n = 0u64;
    // One buffer per thread: a fresh 1 MiB buffer per file was fresh pages
    // from the allocator, each a page fault, for every helper checked.
    HASH_BUF.with_borrow_mut(|buf| -> io::Result<()> {
        buf.resize(1 << 20, 0);
        loop {
            let k = f.read(buf)?;
            if k == 0 {
                return Ok(());
            }
            h.update(&buf[..k]);
            n += k as u64;
        }
    })?;
    let ident = Ident::of(&std::fs::symlink_metadata(path)?);
    Ok((h.finalize().into(), n, ident))
}

/// Whether a path has a `.winx-release-*` component.
pub fn in_quarantine(path: &Path) -> bool {
    path.components().any(|c| c.as_os_str().to_string_lossy().starts_with(".winx-release-"))
}

/// A new present generation of the file now at `path`.
pub fn record(path: &Path) -> io::Result<Gen> {
    let (sha, size, ident) = hash_file(path)?;
    Ok(Gen {
        id: NEXT_GEN.fetch_add(1, Ordering::Relaxed),
        path: path.to_path_buf(),
        sha,
        size,
        ident,
        state: State::Present,
    })
}

/// A set of paths the tool created (one session's helpers, or a
/// workspace's source files).
#[derive(Debug, Default)]
pub struct Ledger {
    files: BTreeMap<PathBuf, Gen>,
}

impl Ledger {
    /// Records `g` as the current generation of its path; a previous one
    /// is retired (the tool replaced it).
    pub fn add(&mut self, g: Gen) {
        self.files.insert(g.path.clone(), g);
    }

    /// Records the file now at `path`.
    pub fn add_path(&mut self, path: &Path) -> io::Result<&Gen> {
        let g = record(path)?;
        self.files.insert(path.to_path_buf(), g);
        Ok(&self.files[path])
    }

    /// The current generation at `path`.
    pub fn get(&self, path: &Path) -> Option<&Gen> {
        self.files.get(path)
    }

    /// Present generations.
    pub fn present(&self) -> Vec<&Gen> {
        self.files.values().filter(|g| g.state == State::Present).collect()
    }

    /// Files and bytes of the present generations, as the quotas count
    /// them: objects preserved in a `.winx-release-*` quarantine are not
    /// helpers.
    pub fn usage(&self) -> (u64, u64) {
        self.files
            .values()
            .filter(|g| g.state == State::Present && !in_quarantine(&g.path))
            .fold((0, 0), |(f, b), g| (f + 1, b + g.size))
    }

    /// Whether `path` is tracked with a present generation.
    pub fn is_present(&self, path: &Path) -> bool {
        self.files.get(path).is_some_and(|g| g.state == State::Present)
    }

    /// A release reported `released` for `path` whose read pinned
    /// generation `gen`. Returns false when that is not the current
    /// generation (the tool changed the file after reading it).
    pub fn mark_released(&mut self, path: &Path, gen: u64) -> bool {
        match self.files.get_mut(path) {
            Some(g) if g.id == gen && g.state == State::Present => {
                g.state = State::Released;
                true
            }
            _ => false,
        }
    }

    /// The current generation of `from` now lives at `to` (a `preserved`
    /// quarantine location). Returns false when `to` does not hold it.
    pub fn relocate(&mut self, from: &Path, to: &Path) -> bool {
        let Some(g) = self.files.get(from).cloned() else { return false };
        match hash_file(to) {
            Ok((sha, size, ident)) if sha == g.sha && size == g.size => {
                self.files.remove(from);
                self.files.insert(to.to_path_buf(), Gen { path: to.to_path_buf(), ident, ..g });
                true
            }
            _ => false,
        }
    }

    /// Updates the remembered identity of `path` after the tool itself
    /// changed the file's metadata (a hard link made and removed).
    pub fn refresh(&mut self, path: &Path) {
        if let (Some(g), Ok(m)) = (self.files.get_mut(path), std::fs::symlink_metadata(path)) {
            g.ident = Ident::of(&m);
        }
    }

    /// Drops `path` from the ledger (the tool deleted it itself).
    pub fn forget(&mut self, path: &Path) -> Option<Gen> {
        self.files.remove(path)
    }

    /// Checks every entry against the filesystem (see the module docs);
    /// `full` re-hashes every present file. Released entries found gone are
    /// dropped.
    pub fn verify(&mut self, findings: &Findings, context: &str, full: bool) {
        let mut drop = Vec::new();
        for (path, g) in &mut self.files {
            let meta = std::fs::symlink_metadata(path);
            match (g.state, meta) {
                (State::Released, Err(e)) if e.kind() == io::ErrorKind::NotFound => drop.push(path.clone()),
                (State::Released, Ok(m)) => {
                    if m.is_file() && Ident::of(&m) == g.ident {
                        findings.violation(
                            "release_misreported",
                            path,
                            format!("{context}: reported released, but the pinned file is still there"),
                        );
                    }
                    // Whatever is there now was not created by the tool;
                    // track it so that nothing deletes it silently.
                    match record(path) {
                        Ok(n) => *g = n,
                        Err(_) => drop.push(path.clone()),
                    }
                }
                (State::Released, Err(_)) => {}
                (State::Present, Err(e)) => {
                    let what = if e.kind() == io::ErrorKind::NotFound { "missing" } else { "unreadable" };
                    findings.lost(path, g.size, format!("{context}: {what} ({e}) without a released outcome"));
                    drop.push(path.clone());
                }
                (State::Present, Ok(m)) => {
                    if !m.is_file() {
                        findings.lost(path, g.size, format!("{context}: replaced by a non-regular file"));
                        drop.push(path.clone());
                        continue;
                    }
                    if !full && Ident::of(&m) == g.ident {
                        continue;
                    }
                    match hash_file(path) {
                        Ok((sha, size, ident)) if sha == g.sha && size == g.size => g.ident = ident,
                        Ok((sha, size, ident)) => {
                            findings.violation(
                                "overwrite",
                                path,
                                format!("{context}: {} bytes now hold other content ({size} bytes)", g.size),
                            );
                            findings.add_lost_bytes(g.size);
                            *g = Gen { sha, size, ident, ..g.clone() };
                        }
                        Err(e) => {
                            findings.lost(path, g.size, format!("{context}: cannot be read: {e}"));
                            drop.push(path.clone());
                        }
                    }
                }
            }
        }
        for p in drop {
            self.files.remove(&p);
        }
    }
}

/// One violation.
#[derive(Clone, Debug, Serialize)]
pub struct Violation {
    /// What kind of invariant broke.
    pub kind: String,
    /// The path concerned.
    pub path: String,
    /// What happened.
    pub detail: String,
}

#[derive(Default)]
struct Inner {
    violations: Vec<Violation>,
    violation_count: u64,
    bytes_lost: u64,
    quota_violations: Vec<Value>,
    quota_violation_count: u64,
    mismatches: Vec<Value>,
    mismatch_count: u64,
    notes: BTreeMap<String, u64>,
}

/// What the run found, shared by all threads.
#[derive(Default)]
pub struct Findings {
    inner: Mutex<Inner>,
}

/// A snapshot of the findings, for the report.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FindingsReport {
    /// Invariant violations (quota violations included).
    pub violations: u64,
    /// The first violations.
    pub violation_details: Vec<Violation>,
    /// Bytes of the ledger missing without a `released` outcome.
    pub bytes_lost: u64,
    /// Tool writes accepted beyond a quota.
    pub quota_violations: Vec<Value>,
    /// Answers that differ from the contract without breaking an
    /// invariant (another denial code, say).
    pub contract_mismatches: u64,
    /// The first of them.
    pub contract_mismatch_details: Vec<Value>,
    /// Counted observations that are neither (by kind).
    pub notes: BTreeMap<String, u64>,
}

impl Findings {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a violation.
    pub fn violation(&self, kind: &str, path: &Path, detail: String) {
        tracing::error!(kind, path = %path.display(), %detail, "stress violation");
        let mut i = self.inner();
        i.violation_count += 1;
        if i.violations.len() < KEEP {
            i.violations.push(Violation { kind: kind.to_owned(), path: path.display().to_string(), detail });
        }
    }

    /// Records lost bytes (a violation of its own).
    pub fn lost(&self, path: &Path, bytes: u64, detail: String) {
        self.violation("lost", path, detail);
        self.add_lost_bytes(bytes);
    }

    fn add_lost_bytes(&self, bytes: u64) {
        self.inner().bytes_lost += bytes;
    }

    /// Records a tool write accepted beyond a quota (a violation too).
    pub fn quota_violation(&self, entry: Value) {
        tracing::error!(%entry, "stress quota violation");
        let mut i = self.inner();
        i.violation_count += 1;
        i.quota_violation_count += 1;
        if i.quota_violations.len() < KEEP {
            i.quota_violations.push(entry);
        }
    }

    /// Records an answer that differs from the contract.
    pub fn mismatch(&self, what: &str, expected: &str, got: Value) {
        tracing::warn!(what, expected, %got, "contract mismatch");
        let mut i = self.inner();
        i.mismatch_count += 1;
        if i.mismatches.len() < KEEP {
            i.mismatches.push(json!({"check": what, "expected": expected, "got": got}));
        }
    }

    /// Counts an observation.
    pub fn note(&self, kind: &str) {
        *self.inner().notes.entry(kind.to_owned()).or_default() += 1;
    }

    /// Violations so far.
    pub fn violations(&self) -> u64 {
        self.inner().violation_count
    }

    /// A snapshot.
    pub fn report(&self) -> FindingsReport {
        let i = self.inner();
        FindingsReport {
            violations: i.violation_count,
            violation_details: i.violations.clone(),
            bytes_lost: i.bytes_lost,
            quota_violations: i.quota_violations.clone(),
            contract_mismatches: i.mismatch_count,
            contract_mismatch_details: i.mismatches.clone(),
            notes: i.notes.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_overwrite_and_release_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let f = Findings::default();
        let mut l = Ledger::default();
        let (a, b, c) = (dir.path().join("a"), dir.path().join("b"), dir.path().join("c"));
        std::fs::write(&a, b"aaaa").unwrap();
        std::fs::write(&b, b"bbbb").unwrap();
        std::fs::write(&c, b"cc").unwrap();
        let ga = l.add_path(&a).unwrap().id;
        l.add_path(&b).unwrap();
        l.add_path(&c).unwrap();
        l.verify(&f, "t", false);
        assert_eq!(f.violations(), 0);

        std::fs::remove_file(&a).unwrap();
        assert!(l.mark_released(&a, ga));
        // An identical replacement keeps the ledger whole.
        std::fs::write(dir.path().join("tmp"), b"bbbb").unwrap();
        std::fs::rename(dir.path().join("tmp"), &b).unwrap();
        l.verify(&f, "t", false);
        assert_eq!(f.violations(), 0);
        assert!(l.get(&a).is_none());

        std::fs::write(&b, b"BBBB").unwrap();
        std::fs::remove_file(&c).unwrap();
        l.verify(&f, "t", false);
        let r = f.report();
        assert_eq!(r.violations, 2);
        assert_eq!(r.bytes_lost, 6);
    }
}
