//! Evaluating snapshots: the counting and bound rules of `tally.rs` and the
//! alias set, applied to the directories of each root in scan order.
//!
//! A snapshot's entries carry their class without aliases; an entry that
//! is a regular file or directory whose (device, inode) is in the alias
//! set fails with `backing_alias`, as `tally::classify_statx` and
//! `lean::from_dirent` decide for a fresh scan (a link or an unsupported
//! entry fails with its own reason first).
//!
//! # Per directory, not per entry
//!
//! A warm scan's records rarely change, and a release evaluates them all
//! (48,000 entries: hashing each into the alias set was most of a warm
//! scan's CPU time). So evaluation first tries the clean case per directory,
//! from each record's [`Summary`](super::record::Summary), taken when the
//! record was read: when no step failed, no record holds an offending entry
//! or ended its reading with a failure, no record's entries lie deeper than
//! the bound, the entries in all add up to no more than the bound, and no
//! alias is among any record's sorted identities, every entry would be
//! admitted without failure, so the tally is the sums (entries, files,
//! directories) and the deepest non-empty record's depth + 1, exactly what
//! admitting them one by one gives. Anything else (a failure of any kind,
//! or an alias found) is evaluated entry by entry, as before, which finds
//! the first offending entry in scan order.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::super::tally::{join_path, Class, Failure, Tally};
use super::super::{BackendKind, ScanLimits, ScanReport};
use super::record::Kind;
use super::walk::{RootSnapshot, Step};
use crate::error::Reason;
use winx_release_kernel::identity::PhysicalId;

/// `root` joined with the `/`-separated `rel` and `leaf`.
fn path_of(root: &Path, rel: &[u8], leaf: Option<&[u8]>) -> PathBuf {
    let parts = rel.split(|b| *b == b'/').filter(|p| !p.is_empty());
    join_path(root, parts.chain(leaf))
}

/// The report a lean scan of these roots gives with `aliases` under
/// `limits`.
pub(crate) fn evaluate(
    snaps: &[&RootSnapshot],
    limits: ScanLimits,
    aliases: &HashSet<PhysicalId>,
    start: Instant,
) -> ScanReport {
    if let Some(t) = clean(snaps, limits, aliases) {
        return super::super::report(BackendKind::Sync, &t, None, start);
    }
    let mut t = Tally::new(false);
    let failure = run(snaps, limits, aliases, &mut t).err();
    super::super::report(BackendKind::Sync, &t, failure, start)
}

/// The tally of a scan of `snaps` that admits every entry without failure,
/// computed per directory (module docs); `None` when it cannot be shown
/// that way (then [`run`] decides, entry by entry).
fn clean(snaps: &[&RootSnapshot], limits: ScanLimits, aliases: &HashSet<PhysicalId>) -> Option<Tally> {
    let aliases: Vec<PhysicalId> = aliases.iter().copied().collect();
    let mut t = Tally::new(false);
    for snap in snaps {
        for step in &snap.steps {
            let Step::Dir(rec) = step else { return None };
            let s = &rec.summary;
            if rec.failed.is_some() || s.offends {
                return None;
            }
            let n = rec.entries.len() as u64;
            if n == 0 {
                continue;
            }
            let depth = rec.depth + 1;
            t.entries += n;
            if depth > limits.max_depth || t.entries > limits.max_entries || s.holds_any(&aliases) {
                return None;
            }
            t.files += s.files;
            t.directories += s.dirs;
            t.max_depth = t.max_depth.max(depth);
        }
    }
    Some(t)
}

fn run(
    snaps: &[&RootSnapshot],
    limits: ScanLimits,
    aliases: &HashSet<PhysicalId>,
    t: &mut Tally,
) -> Result<(), Failure> {
    let alias = |id: &PhysicalId| !aliases.is_empty() && aliases.contains(id);
    for snap in snaps {
        for step in &snap.steps {
            let rec = match step {
                Step::Dir(rec) => rec,
                Step::Fail { rel, reason } => return Err(Failure::new(*reason, path_of(&snap.path, rel, None))),
            };
            let depth = rec.depth + 1;
            let rel = rec.rel.as_bytes();
            for e in &rec.entries {
                let class = match e.kind {
                    Kind::File(id) if alias(&id) => Class::Fail(Reason::BackingAlias),
                    Kind::Dir(id) if alias(&id) => Class::Fail(Reason::BackingAlias),
                    Kind::File(_) => Class::File(None),
                    Kind::Dir(id) => Class::Dir(id),
                    Kind::Fail(r) => Class::Fail(r),
                };
                t.admit(&limits, class, depth, || path_of(&snap.path, rel, Some(&e.name)))?;
            }
            if let Some(reason) = rec.failed {
                return Err(Failure::new(reason, path_of(&snap.path, rel, None)));
            }
        }
    }
    Ok(())
}
