//! Evaluating snapshots: the counting and bound rules of `tally.rs` and the
//! alias set, applied to the directories of each root in scan order.
//!
//! A snapshot's entries carry their class without aliases; an entry that
//! is a regular file or directory whose (device, inode) is in the alias
//! set fails with `backing_alias`, as `tally::classify_statx` and
//! `lean::from_dirent` decide for a fresh scan (a link or an unsupported
//! entry fails with its own reason first).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::super::tally::{join_path, Class, Failure, Tally};
use super::super::{BackendKind, ScanLimits, ScanReport};
use super::record::Kind;
use super::walk::{RootSnapshot, Step};
use crate::error::Reason;
use crate::identity::PhysicalId;

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
    let mut t = Tally::new(false);
    let failure = run(snaps, limits, aliases, &mut t).err();
    super::super::report(BackendKind::Sync, &t, failure, start)
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
