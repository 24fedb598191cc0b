//! Filling the backing roots up to the scan bound, and keeping them there.
//!
//! A release scans `D/executions`, `D/receipts` and its workspace's
//! `W/.winx/scratch`, at most 50,000 entries in all. The tool fills
//! `D/executions/fill-NNNN/` with empty files (its own bytes, in its ledger
//! as a count: every one must still be there at the end) until a scan of
//! the fullest workspace sees the target number of entries. The run itself
//! adds entries (each command retains `D/executions/<id>/`, each release
//! that touched the filesystem a receipt), so a keeper thread counts the
//! roots a few times a second and removes fill files to stay at the target.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Files per fill directory.
const PER_DIR: usize = 1000;

/// Entries below `root` (the root itself not counted), links not
/// followed; a root that does not exist has none. `skip` names top-level
/// children left out.
pub fn count_entries(root: &Path, skip: &dyn Fn(&str) -> bool) -> u64 {
    fn walk(dir: &Path, top: bool, skip: &dyn Fn(&str) -> bool) -> u64 {
        let Ok(rd) = fs::read_dir(dir) else { return 0 };
        let mut n = 0;
        for e in rd.flatten() {
            if top && skip(&e.file_name().to_string_lossy()) {
                continue;
            }
            n += 1;
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                n += walk(&e.path(), false, skip);
            }
        }
        n
    }
    walk(root, true, skip)
}

fn is_fill(name: &str) -> bool {
    name.starts_with("fill-")
}

/// The fill files and the roots they are counted with.
pub struct Backing {
    executions: PathBuf,
    receipts: PathBuf,
    scratch: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
    files: Vec<PathBuf>,
    /// Fill files the tool removed itself (to hold the target).
    pub removed: u64,
    /// The last total counted.
    pub last_total: u64,
}

impl Backing {
    /// The roots of data directory `data_dir` and the workspaces' scratch
    /// roots.
    pub fn new(data_dir: &Path, scratch: Vec<PathBuf>) -> Backing {
        Backing {
            executions: data_dir.join("executions"),
            receipts: data_dir.join("receipts"),
            scratch,
            dirs: Vec::new(),
            files: Vec::new(),
            removed: 0,
            last_total: 0,
        }
    }

    /// Entries a release in the fullest workspace scans now.
    pub fn total(&mut self) -> u64 {
        let exec = count_entries(&self.executions, &is_fill);
        let receipts = count_entries(&self.receipts, &|_| false);
        let scratch = self.scratch.iter().map(|s| count_entries(s, &|_| false)).max().unwrap_or(0);
        let t = exec + receipts + scratch + self.dirs.len() as u64 + self.files.len() as u64;
        self.last_total = t;
        t
    }

    fn add(&mut self, n: u64) -> io::Result<()> {
        let first = self.files.len();
        let last = first + n as usize;
        while self.dirs.len() * PER_DIR < last {
            let d = self.executions.join(format!("fill-{:04}", self.dirs.len()));
            fs::create_dir_all(&d)?;
            self.dirs.push(d);
        }
        let names: Vec<PathBuf> = (first..last).map(|i| self.dirs[i / PER_DIR].join(format!("e{i:05}"))).collect();
        // A few threads: creating tens of thousands of files is the slow part
        // of the setup.
        let chunk = names.len().div_ceil(4).max(1);
        std::thread::scope(|sc| {
            let handles: Vec<_> = names
                .chunks(chunk)
                .map(|part| sc.spawn(move || part.iter().try_for_each(|f| fs::File::create(f).map(drop))))
                .collect();
            handles
                .into_iter()
                .try_for_each(|h| h.join().unwrap_or_else(|_| Err(io::Error::other("fill thread panicked"))))
        })?;
        self.files.extend(names);
        Ok(())
    }

    fn remove(&mut self, n: u64) -> io::Result<u64> {
        let mut done = 0;
        while done < n {
            let Some(f) = self.files.pop() else { break };
            fs::remove_file(&f)?;
            self.removed += 1;
            done += 1;
            while self.dirs.len() > self.files.len().div_ceil(PER_DIR) {
                if let Some(d) = self.dirs.pop() {
                    fs::remove_dir(&d)?;
                    done += 1;
                }
            }
        }
        Ok(done)
    }

    /// Adds or removes fill files until a scan sees exactly `target`
    /// entries (as far as the fill can go: the directories themselves stay).
    pub fn set_total(&mut self, target: u64) -> io::Result<u64> {
        for _ in 0..8 {
            let t = self.total();
            if t == target {
                return Ok(t);
            }
            if t < target {
                // A new fill directory is an entry too.
                let mut n = target - t;
                let room = (self.dirs.len() * PER_DIR).saturating_sub(self.files.len()) as u64;
                if n > room {
                    let extra_dirs = (n - room).div_ceil(PER_DIR as u64 + 1);
                    n -= extra_dirs.min(n);
                }
                self.add(n)?;
            } else {
                self.remove(t - target)?;
            }
        }
        Ok(self.total())
    }

    /// Removes fill files while the total is above `target`.
    pub fn trim(&mut self, target: u64) -> io::Result<u64> {
        let t = self.total();
        if t > target {
            self.remove(t - target)?;
        }
        Ok(t)
    }

    /// Removes every fill file and directory (a few threads: tens of
    /// thousands of unlinks are the slow part of the teardown).
    pub fn remove_all(&mut self) {
        let files = std::mem::take(&mut self.files);
        let chunk = files.len().div_ceil(4).max(1);
        std::thread::scope(|sc| {
            for part in files.chunks(chunk) {
                sc.spawn(move || part.iter().for_each(|f| drop(fs::remove_file(f))));
            }
        });
        for d in self.dirs.drain(..) {
            let _ = fs::remove_dir(d);
        }
    }

    /// Fill files that are missing (each one the tool did not remove).
    pub fn missing(&self) -> Vec<PathBuf> {
        self.files.iter().filter(|f| fs::symlink_metadata(f).is_err()).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_total_is_exact() {
        let dir = tempfile::tempdir().unwrap();
        let scratch = dir.path().join("ws/.winx/scratch");
        fs::create_dir_all(scratch.join("a/b")).unwrap();
        fs::create_dir_all(dir.path().join("receipts")).unwrap();
        fs::write(dir.path().join("receipts/r.json"), b"{}").unwrap();
        let mut b = Backing::new(dir.path(), vec![scratch]);
        assert_eq!(b.total(), 3);
        for target in [2500, 1001, 1002, 5, 3] {
            assert_eq!(b.set_total(target).unwrap(), target, "target {target}");
        }
        assert!(b.missing().is_empty());
    }
}
