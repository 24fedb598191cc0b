//! The directories a root's walk has still to read, and the records the
//! parallel fill (`fill.rs`) read ahead for them.

use std::collections::HashMap;
use std::sync::Arc;

use super::record::{DirRecord, Entry, Kind};
use winx_release_kernel::identity::PhysicalId;

/// A directory waiting to be read.
#[derive(Clone)]
pub(crate) struct Pending {
    pub(crate) rel: Vec<u8>,
    pub(crate) depth: u32,
    pub(crate) expect: Option<PhysicalId>,
}

impl Pending {
    /// The root.
    pub(crate) fn root() -> Pending {
        Pending { rel: Vec::new(), depth: 0, expect: None }
    }

    /// The subdirectories of `rec`, the record of this directory, in
    /// reverse directory order (so that popping them off a stack visits
    /// them in order).
    pub(crate) fn children<'a>(&'a self, rec: &'a DirRecord) -> impl Iterator<Item = Pending> + 'a {
        let entries: &[Entry] = if rec.summary.dirs > 0 { &rec.entries } else { &[] };
        entries.iter().rev().filter_map(move |e| match e.kind {
            Kind::Dir(id) => {
                let mut rel = self.rel.clone();
                if !rel.is_empty() {
                    rel.push(b'/');
                }
                rel.extend_from_slice(&e.name);
                Some(Pending { rel, depth: self.depth + 1, expect: Some(id) })
            }
            _ => None,
        })
    }
}

/// Records read ahead of the walk by the parallel fill (`fill.rs`), by
/// path below the root, each with how
/// many subdirectory identities it took from its old record.
#[derive(Default)]
pub(crate) struct Fetched(HashMap<Vec<u8>, (Arc<DirRecord>, u64)>);

impl Fetched {
    /// The record read ahead for `p`, when it is the directory `p`'s
    /// parent names.
    pub(crate) fn take(&mut self, p: &Pending) -> Option<(Arc<DirRecord>, u64)> {
        let (rec, _) = self.0.get(&p.rel)?;
        if p.expect.is_some_and(|id| id != rec.stat.id) {
            return None;
        }
        self.0.remove(&p.rel)
    }

    /// How many records were read ahead.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

impl Fetched {
    /// Adds the records of `more`.
    pub(crate) fn extend(&mut self, more: Fetched) {
        self.0.extend(more.0);
    }
}

impl From<HashMap<Vec<u8>, (Arc<DirRecord>, u64)>> for Fetched {
    fn from(map: HashMap<Vec<u8>, (Arc<DirRecord>, u64)>) -> Fetched {
        Fetched(map)
    }
}

/// Reads ahead, in parallel, the directories given (pending in a walk)
/// and those below them, as `fill.rs` does from the root.
pub(crate) type ReadAhead<'a> = &'a dyn Fn(Vec<Pending>) -> Fetched;
