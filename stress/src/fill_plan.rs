//! The fill plan of the setup phase: how one session's fill splits into
//! bulk and tiny files, and which file the same-size rewrite probe
//! rewrites. Plain arithmetic over the ledger,
//! so that it is tested without a frontend.

use std::path::PathBuf;

use crate::ledger::{in_quarantine, Ledger};
use crate::quota::{MAX_FILE_BYTES, MAX_SESSION_FILES};
use crate::rng::Rng;

/// Size of each tiny fill file (written by the tool, so quota-checked).
pub const TINY: u64 = 16;

/// How a session holding `files` files and `bytes` bytes reaches the file
/// quota and its byte target: two bulk files made by commands (quotas do
/// not govern command output; the second is empty unless the bulk exceeds
/// the 32 MiB file quota) and `tiny` tool writes of [`TINY`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FillPlan {
    /// Sizes of `bulk-a.bin` and `bulk-b.bin`.
    pub bulk: [u64; 2],
    /// Tiny files to write.
    pub tiny: u64,
}

impl FillPlan {
    /// The plan from the session's usage now to 128 files and `target`
    /// bytes.
    pub fn new(files: u64, bytes: u64, target: u64) -> FillPlan {
        let tiny = MAX_SESSION_FILES.saturating_sub(files + 2);
        let bulk = target.saturating_sub(bytes + tiny * TINY);
        let a = bulk.min(MAX_FILE_BYTES);
        FillPlan { bulk: [a, bulk - a], tiny }
    }
}

/// A helper of exactly [`TINY`] bytes, for the probes that rewrite one at
/// the session's limit: a same-size rewrite must leave the session's usage
/// unchanged, and `TINY + 1` bytes must be exactly one byte over. Any
/// smaller helper would not do: the empty `bulk-b.bin` rewritten with
/// `TINY` bytes grew its session by 16 bytes, which put the workspace over
/// its quota for a later session's fill.
pub fn same_size_probe(ledger: &Ledger, rng: &mut Rng) -> Option<PathBuf> {
    let tiny: Vec<PathBuf> = ledger
        .present()
        .into_iter()
        .filter(|g| g.size == TINY && !in_quarantine(&g.path))
        .map(|g| g.path.clone())
        .collect();
    (!tiny.is_empty()).then(|| tiny[rng.index(tiny.len())].clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fill_reaches_the_file_quota_and_its_target() {
        for (files, bytes, target) in [(40, 163_840, 32 << 20), (40, 300_000, 64 << 20), (41, 1, 4 << 20)] {
            let p = FillPlan::new(files, bytes, target);
            assert_eq!(files + 2 + p.tiny, MAX_SESSION_FILES);
            assert_eq!(bytes + p.bulk[0] + p.bulk[1] + p.tiny * TINY, target);
            assert!(p.bulk.iter().all(|b| *b <= MAX_FILE_BYTES));
        }
        // Under the file quota the second bulk file is empty.
        assert_eq!(FillPlan::new(40, 0, 32 << 20).bulk[1], 0);
    }

    /// The run of seed 1796105872119148578: session 2's same-size rewrite
    /// probe chose its empty `bulk-b.bin` (any helper of at most 16 bytes
    /// would do) and wrote 16 bytes into it; workspace 0 was then 16 bytes
    /// over 256 MiB when session 14's tiny files came.
    #[test]
    fn the_same_size_probe_rewrites_a_file_of_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::default();
        std::fs::write(dir.path().join("bulk-b.bin"), b"").unwrap();
        std::fs::write(dir.path().join("seed.txt"), "s".repeat(64)).unwrap();
        std::fs::write(dir.path().join("short.txt"), "s".repeat(TINY as usize - 1)).unwrap();
        for name in ["bulk-b.bin", "seed.txt", "short.txt"] {
            ledger.add_path(&dir.path().join(name)).unwrap();
        }
        let mut rng = Rng::new(1796105872119148578);
        assert_eq!(same_size_probe(&ledger, &mut rng), None);
        for i in 0..3 {
            let p = dir.path().join(format!("tiny-{i}.txt"));
            std::fs::write(&p, "t".repeat(TINY as usize)).unwrap();
            ledger.add_path(&p).unwrap();
        }
        for _ in 0..200 {
            let p = same_size_probe(&ledger, &mut rng).unwrap();
            assert_eq!(ledger.get(&p).unwrap().size, TINY, "{}", p.display());
        }
    }
}
