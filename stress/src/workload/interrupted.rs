//! A release that a guardian kill cut off (`--chaos`): telling one from an
//! answer to check ([`cut_off`]), and accounting for its targets once the
//! next guardian is up ([`reconcile`]; the rules are `workload::chaos`'s).

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::oracle::ledger::{hash_file, in_quarantine};
use crate::workload::kills::inc;
use crate::workload::world::{Pinned, TrackedSession, World};

/// Whether a release answer `v`, sent in `epoch`, was cut off by a kill:
/// `outcome_unknown` or `owner_unavailable` while a kill happened.
pub fn cut_off(w: &World, v: &Value, epoch: u64) -> bool {
    let Some(c) = &w.chaos else { return false };
    let cut = v["outcome_unknown"] == json!(true) || v["errorCode"] == "owner_unavailable";
    if !cut || !c.interrupted_since(epoch) {
        return false;
    }
    if v["outcome_unknown"] == json!(true) {
        inc(&c.counts.interrupted_releases);
    } else {
        inc(&c.counts.refused_while_down);
    }
    true
}

/// After an interrupted release of `targets` sent in `epoch`: waits for
/// the next guardian, then accounts for each target (see the module docs).
pub fn reconcile(w: &World, sess: &mut TrackedSession, targets: &[Pinned], epoch: u64) -> anyhow::Result<()> {
    let Some(c) = &w.chaos else { return Ok(()) };
    c.wait_up_after(&w.stop, epoch)?;
    for t in targets {
        let Some(g) = sess.ledger.get(&t.path).filter(|g| g.id == t.gen && sess.ledger.is_present(&t.path)) else {
            continue;
        };
        let (sha, size) = (g.sha, g.size);
        match hash_file(&t.path) {
            Ok((s, n, _)) if s == sha && n == size => inc(&c.counts.recovered),
            // Other bytes: the ledger's check names it.
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match in_quarantines(&sess.dir, &sha, size) {
                Some(q) => {
                    sess.ledger.relocate(&t.path, &q);
                    inc(&c.counts.preserved);
                }
                None => {
                    sess.ledger.mark_released(&t.path, t.gen);
                    inc(&c.counts.removed);
                }
            },
            Err(_) => {}
        }
    }
    Ok(())
}

/// A file with these bytes in a `.winx-release-*` quarantine below `dir`.
fn in_quarantines(dir: &Path, sha: &[u8; 32], size: u64) -> Option<PathBuf> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(p),
                Ok(t)
                    if t.is_file()
                        && in_quarantine(&p)
                        && e.metadata().is_ok_and(|m| m.len() == size)
                        && hash_file(&p).is_ok_and(|(s, n, _)| &s == sha && n == size) =>
                {
                    return Some(p);
                }
                _ => {}
            }
        }
    }
    None
}
