//! The fill plan of the setup phase: the bytes each session is filled to,
//! how one session's fill splits into bulk and tiny files, and which file
//! the same-size rewrite probe rewrites. Plain arithmetic over the ledger,
//! so that it is tested without a frontend.

use std::path::PathBuf;

use crate::oracle::ledger::{in_quarantine, Ledger};
use crate::oracle::quota::{MAX_FILE_BYTES, MAX_SESSION_BYTES, MAX_SESSION_FILES, MAX_WORKSPACE_BYTES};
use crate::workload::rng::Rng;

/// Size of each tiny fill file (written by the tool, so quota-checked).
pub const TINY: u64 = 16;

/// Bytes the sessions of a workspace leave free below the workspace quota
/// once they are all filled.
///
/// The sessions of a workspace are filled one after another, each ending
/// with tiny tool writes. With targets summing to exactly 256 MiB, one
/// unplanned byte in an earlier session (once: a probe that grew an empty
/// bulk file by 16 bytes) makes the frontend rightly refuse a later
/// session's tiny files, and the failure shows sessions away from its cause.
/// With this headroom each session's fill check is about that session only.
/// Nothing is hidden by it: the fill check still wants every tool write
/// accepted, `ops::write_files` still records a refusal the ledger says fits
/// as a contract mismatch, the probes check that they leave the session's
/// usage as planned, and the workspace edge itself is probed exactly
/// afterwards (`setup::workspace_quota` tops workspace 0 up to 256 MiB from
/// the ledgers and wants one more byte refused).
pub const WORKSPACE_HEADROOM: u64 = 64 << 10;

/// The byte target of each session, given each session's workspace (in
/// fill order): an even share of the workspace quota, at most the session
/// quota; where the shares would come closer than [`WORKSPACE_HEADROOM`] to
/// the workspace quota, the workspace's last session gives up the
/// difference (the others keep their share, so with 4 sessions per
/// workspace three still reach the 64 MiB session quota and probe it).
pub fn session_targets(ws_of: &[usize]) -> Vec<u64> {
    let count = |ws: usize| ws_of.iter().filter(|w| **w == ws).count() as u64;
    let mut targets: Vec<u64> =
        ws_of.iter().map(|ws| MAX_SESSION_BYTES.min(MAX_WORKSPACE_BYTES / count(*ws))).collect();
    let limit = MAX_WORKSPACE_BYTES - WORKSPACE_HEADROOM;
    for (last, ws) in ws_of.iter().enumerate() {
        if ws_of[last + 1..].contains(ws) {
            continue;
        }
        let sum: u64 = ws_of.iter().zip(&targets).filter(|(w, _)| *w == ws).map(|(_, t)| t).sum();
        targets[last] -= sum.saturating_sub(limit).min(targets[last]);
    }
    targets
}

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

    /// Workspace of each session as the stress tool spreads them.
    fn spread(sessions: usize, workspaces: usize) -> Vec<usize> {
        (0..sessions).map(|i| i % workspaces).collect()
    }

    /// Seeds 1796105872119148578 and ...579 run 16 sessions over 2
    /// workspaces: 8 sessions of 32 MiB filled workspace 0 to exactly
    /// 256 MiB, with no room for one unplanned byte.
    #[test]
    fn workspace_fill_leaves_headroom() {
        for (sessions, workspaces) in
            [(16, 2), (8, 2), (8, 1), (4, 1), (5, 1), (3, 1), (4, 2), (64, 1), (64, 16), (1, 1)]
        {
            let ws_of = spread(sessions, workspaces);
            let targets = session_targets(&ws_of);
            for ws in 0..workspaces {
                let sum: u64 = ws_of.iter().zip(&targets).filter(|(w, _)| **w == ws).map(|(_, t)| t).sum();
                assert!(
                    sum + WORKSPACE_HEADROOM <= MAX_WORKSPACE_BYTES,
                    "{sessions} sessions over {workspaces} workspaces: workspace {ws} filled to {sum}"
                );
            }
            for t in &targets {
                assert!(*t <= MAX_SESSION_BYTES);
                // Room for the 40 seed helpers (at most 8 KiB each) and the
                // tiny files.
                assert!(*t >= 40 * 8192 + MAX_SESSION_FILES * TINY, "target {t}");
            }
        }
        // The session quota is still reached (and probed) where it fits.
        assert_eq!(session_targets(&spread(4, 2)), vec![MAX_SESSION_BYTES; 4]);
        let four = session_targets(&spread(4, 1));
        assert_eq!(&four[..3], &[MAX_SESSION_BYTES; 3]);
        assert_eq!(four[3], MAX_SESSION_BYTES - WORKSPACE_HEADROOM);
    }

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
