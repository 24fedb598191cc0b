//! Exact-path rules and helper placement.
//!
//! A request names helpers by exact absolute paths. Nothing is normalised:
//! a path that would need normalising is refused, so two distinct accepted
//! strings never name the same pathname.

use std::path::{Path, PathBuf};

use crate::error::Reason;
use crate::layout::{self, Layout};

/// Longest accepted path, in bytes (`PATH_MAX` less the NUL).
pub const MAX_PATH_BYTES: usize = 4095;
/// Longest accepted component, in bytes (`NAME_MAX`).
pub const MAX_NAME_BYTES: usize = 255;

/// Checks that `path` is exact: absolute, no `.`, `..` or empty component,
/// no trailing `/`, no NUL, no glob character, within length limits.
///
/// Returns `path_not_exact` or `glob_not_allowed`.
pub fn check_exact(path: &str) -> Result<(), Reason> {
    if !path.starts_with('/') || path.contains('\0') || path.len() > MAX_PATH_BYTES {
        return Err(Reason::PathNotExact);
    }
    if path.len() > 1 && path.ends_with('/') {
        return Err(Reason::PathNotExact);
    }
    if path.len() > 1 {
        for comp in path[1..].split('/') {
            if comp.is_empty() || comp == "." || comp == ".." || comp.len() > MAX_NAME_BYTES {
                return Err(Reason::PathNotExact);
            }
        }
    }
    if path.contains(['*', '?', '[']) {
        return Err(Reason::GlobNotAllowed);
    }
    Ok(())
}

/// Most targets of one release request.
pub const MAX_TARGETS: usize = 100;

/// Checks a request's paths for shape: 1–[`MAX_TARGETS`] entries, each
/// unique and exact (see [`check_exact`]).
///
/// This is the one copy of the shape rules; the frontend and the engine both
/// call it. Returns the request-level reason (`file_count` for a bad count,
/// else the first entry's own reason in request order) and each entry's own
/// reason (`duplicate_path` before exactness).
pub fn check_shape(paths: &[String]) -> Result<(), (Reason, Vec<Option<Reason>>)> {
    if paths.is_empty() || paths.len() > MAX_TARGETS {
        return Err((Reason::FileCount, vec![None; paths.len()]));
    }
    let mut seen = std::collections::HashSet::new();
    let own: Vec<Option<Reason>> = paths
        .iter()
        .map(|p| if !seen.insert(p.as_str()) { Some(Reason::DuplicatePath) } else { check_exact(p).err() })
        .collect();
    match own.iter().flatten().next().copied() {
        Some(first) => Err((first, own)),
        None => Ok(()),
    }
}

/// Whether any component of `path` is in the reserved `.winx-release-*`
/// namespace.
pub fn in_reserved_namespace(path: &str) -> bool {
    path.split('/').any(|c| c.starts_with(layout::RESERVED_PREFIX))
}

/// A path accepted as a candidate helper of one session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelperPath {
    /// The exact path as requested.
    pub path: String,
    /// Its components below the session directory (at least one).
    pub rel: Vec<String>,
}

impl HelperPath {
    /// The final component.
    pub fn name(&self) -> &str {
        self.rel.last().map(String::as_str).unwrap_or_default()
    }

    /// The components between the session directory and the final one.
    pub fn parents(&self) -> &[String] {
        &self.rel[..self.rel.len() - 1]
    }

    /// The path as a [`Path`].
    pub fn as_path(&self) -> &Path {
        Path::new(&self.path)
    }
}

/// Places `path` relative to `thread_id`'s session directory in `layout`.
///
/// Errors, in order: `path_not_exact` / `glob_not_allowed` (see
/// [`check_exact`]), `reserved_namespace`, `other_session` (below another
/// session directory of the same workspace), `not_session_helper`
/// (anything else that is not strictly below this session's directory).
pub fn place_helper(layout: &Layout, thread_id: &str, path: &str) -> Result<HelperPath, Reason> {
    check_exact(path)?;
    if in_reserved_namespace(path) {
        return Err(Reason::ReservedNamespace);
    }
    let ws = layout.workspace().to_str().ok_or(Reason::NotSessionHelper)?;
    let rest = if ws == "/" {
        &path[1..]
    } else {
        path.strip_prefix(ws).and_then(|r| r.strip_prefix('/')).ok_or(Reason::NotSessionHelper)?
    };
    let comps: Vec<&str> = rest.split('/').collect();
    if comps.len() < 3 || comps[0] != layout::WINX_DIR || comps[1] != layout::TMP_DIR {
        return Err(Reason::NotSessionHelper);
    }
    let own = layout::session_name(thread_id);
    if comps[2] != own {
        return Err(if comps[2].starts_with(layout::SESSION_PREFIX) {
            Reason::OtherSession
        } else {
            Reason::NotSessionHelper
        });
    }
    if comps.len() < 4 {
        return Err(Reason::NotSessionHelper);
    }
    Ok(HelperPath { path: path.to_owned(), rel: comps[3..].iter().map(|c| (*c).to_owned()).collect() })
}

/// Joins a session directory and a helper's relative components.
pub fn join_rel(base: &Path, rel: &[String]) -> PathBuf {
    let mut p = base.to_path_buf();
    for c in rel {
        p.push(c);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_rules() {
        let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(check_shape(&[]).unwrap_err().0, Reason::FileCount);
        let many: Vec<String> = (0..101).map(|i| format!("/a{i}")).collect();
        assert_eq!(check_shape(&many).unwrap_err().0, Reason::FileCount);
        assert!(check_shape(&many[..100]).is_ok());
        let (r, own) = check_shape(&p(&["/a", "/b", "/a"])).unwrap_err();
        assert_eq!((r, own), (Reason::DuplicatePath, vec![None, None, Some(Reason::DuplicatePath)]));
        assert_eq!(check_shape(&p(&["/a/../b"])).unwrap_err().0, Reason::PathNotExact);
        assert_eq!(check_shape(&p(&["a"])).unwrap_err().0, Reason::PathNotExact);
        assert_eq!(check_shape(&p(&["/a/"])).unwrap_err().0, Reason::PathNotExact);
        assert_eq!(check_shape(&p(&["/a/*.py"])).unwrap_err().0, Reason::GlobNotAllowed);
        // The first entry's own reason is the request's.
        let (r, _) = check_shape(&p(&["/x", "/a[1]", "/x"])).unwrap_err();
        assert_eq!(r, Reason::GlobNotAllowed);
    }
}
