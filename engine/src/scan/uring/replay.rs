//! Phase 2 of the io_uring backend: the calling thread replays the
//! contract's order over the results phase 1 kept, counting with the shared
//! [`Tally`], and reads what phase 1 did not finish.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::walker::Walker;
use super::{DirResult, DirSlot, Enter, ScanShared};
use crate::error::Reason;
use crate::scan::tally::{join_path, Failure, Tally};
use crate::scan::ScanRoot;
use winx_release_kernel::sys::lock;

/// A directory on the replay's current chain.
struct Frame {
    slot: Arc<DirSlot>,
    result: DirResult,
    next: usize,
}

/// The path of the chain's last directory joined with `extra`.
fn chain_path(root: &Path, stack: &[Frame], extra: &[&[u8]]) -> PathBuf {
    join_path(root, stack.iter().skip(1).map(|f| f.slot.name()).chain(extra.iter().copied()))
}

/// Replays the synchronous order over the results.
pub(super) fn resolve(
    sh: &ScanShared<'_>,
    roots: &[ScanRoot],
    slots: &[Option<Arc<DirSlot>>],
    walker: &mut Walker,
) -> (Tally, Option<Failure>) {
    let mut t = Tally::new(sh.sizes);
    for (root, slot) in roots.iter().zip(slots) {
        let Some(slot) = slot else { continue };
        let mut stack: Vec<Frame> = Vec::new();
        if let Err(f) = visit(sh, walker, &root.path, &mut stack, slot.clone(), &mut t) {
            return (t, Some(f));
        }
        while let Some(top) = stack.last_mut() {
            if top.next == top.result.children.len() {
                stack.pop();
                continue;
            }
            let child = top.result.children[top.next].clone();
            top.next += 1;
            if let Err(f) = visit(sh, walker, &root.path, &mut stack, child, &mut t) {
                return (t, Some(f));
            }
        }
    }
    (t, None)
}

/// Counts one directory's entries in order; pushes it on `stack` when its
/// subdirectories are to be entered.
fn visit(
    sh: &ScanShared<'_>,
    walker: &mut Walker,
    root: &Path,
    stack: &mut Vec<Frame>,
    slot: Arc<DirSlot>,
    t: &mut Tally,
) -> Result<(), Failure> {
    let limits = sh.limits;
    let mut cap = usize::try_from(limits.max_entries.saturating_sub(t.entries)).unwrap_or(usize::MAX).saturating_add(1);
    loop {
        let mut result = lock(&slot.result).take();
        if result.is_none() {
            walker.read_one(sh, &slot, cap);
            result = lock(&slot.result).take();
        }
        let result = result.unwrap_or_else(|| DirResult::empty(Enter::Failed(Reason::BackingInaccessible)));
        let dir_path = |stack: &[Frame]| {
            if slot.is_root {
                root.to_path_buf()
            } else {
                chain_path(root, stack, &[slot.name()])
            }
        };
        match result.enter {
            Enter::Entered => {}
            Enter::Vanished => return Ok(()),
            Enter::Failed(r) => return Err(Failure::new(r, dir_path(stack))),
        }
        let saved = *t;
        let child_depth = slot.depth + 1;
        for (j, class) in result.classes.iter().enumerate() {
            t.admit(&limits, *class, child_depth, || join_path(&dir_path(stack), [result.name(j)]))?;
        }
        if result.truncated {
            // Entries vanished: the cap was too tight. Read it again wider.
            *t = saved;
            cap = cap.saturating_mul(2);
            continue;
        }
        if result.read_error {
            return Err(Failure::new(Reason::BackingInaccessible, dir_path(stack)));
        }
        stack.push(Frame { slot, result, next: 0 });
        return Ok(());
    }
}
