//! Exact-path rules and helper placement.
//!
//! A request names helpers by exact absolute paths. Nothing is normalised:
//! a path that would need normalising is refused, so two distinct accepted
//! strings never name the same pathname.

use std::ffi::OsStr;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use std::ffi::OsString;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use std::os::unix::ffi::OsStrExt;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use std::path::{Path, PathBuf};

use crate::error::Reason;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use crate::layout::{self, Layout};

pub use crate::exact::{check_exact, check_kernel_shape, MAX_NAME_BYTES, MAX_PATH_BYTES};

/// Most targets of one release request.
pub const MAX_TARGETS: usize = 100;

/// The rules of step `shape`: 1–[`MAX_TARGETS`] entries, each unique and
/// exact (see [`check_exact`]). [`super::shape_reasons`] words the refusal.
///
/// # Errors
/// The request-level reason ([`Reason::FileCount`] for a bad count, else the
/// first entry's own reason in request order) and each entry's own reason
/// ([`Reason::DuplicatePath`] before exactness).
pub(super) fn shape_reasons<P: AsRef<OsStr>>(paths: &[P]) -> Result<(), (Reason, Vec<Option<Reason>>)> {
    if paths.is_empty() || paths.len() > MAX_TARGETS {
        return Err((Reason::FileCount, vec![None; paths.len()]));
    }
    let mut seen = std::collections::HashSet::new();
    let own: Vec<Option<Reason>> = paths
        .iter()
        .map(|p| if !seen.insert(p.as_ref()) { Some(Reason::DuplicatePath) } else { check_exact(p).err() })
        .collect();
    match own.iter().flatten().next().copied() {
        Some(first) => Err((first, own)),
        None => Ok(()),
    }
}

/// Whether any component of `path` is in the reserved `.winx-release-*`
/// namespace.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub(crate) fn in_reserved_namespace(path: impl AsRef<OsStr>) -> bool {
    path.as_ref().as_encoded_bytes().split(|&b| b == b'/').any(|c| layout::is_reserved_name(OsStr::from_bytes(c)))
}

/// A path accepted as a candidate helper of one session.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelperPath {
    /// The exact path as requested.
    pub path: PathBuf,
    /// Its components below the session directory (at least one).
    pub rel: Vec<OsString>,
}

#[cfg(all(target_os = "linux", not(winx_foreign)))]
impl HelperPath {
    /// The final component.
    pub(crate) fn name(&self) -> &OsStr {
        self.rel.last().map(OsString::as_os_str).unwrap_or_default()
    }

    /// The path as a [`Path`].
    pub(crate) fn as_path(&self) -> &Path {
        &self.path
    }
}

/// Places `path` relative to `thread_id`'s session directory in `layout`.
///
/// # Errors
/// In this order: [`Reason::PathNotExact`] / [`Reason::GlobNotAllowed`]
/// (see [`check_exact`]), [`Reason::ReservedNamespace`],
/// [`Reason::OtherSession`] (below another session directory of the same
/// workspace), [`Reason::NotSessionHelper`] (anything else that is not
/// strictly below this session's directory).
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub fn place_helper(layout: &Layout, thread_id: &str, path: impl AsRef<OsStr>) -> Result<HelperPath, Reason> {
    let path = path.as_ref();
    check_exact(path)?;
    if in_reserved_namespace(path) {
        return Err(Reason::ReservedNamespace);
    }
    let bytes = path.as_bytes();
    let ws = layout.workspace().as_os_str().as_bytes();
    let rest = if ws == b"/" {
        &bytes[1..]
    } else {
        bytes.strip_prefix(ws).and_then(|r| r.strip_prefix(b"/")).ok_or(Reason::NotSessionHelper)?
    };
    let comps: Vec<&[u8]> = rest.split(|&b| b == b'/').collect();
    if comps.len() < 3 || comps[0] != layout::WINX_DIR.as_bytes() || comps[1] != layout::TMP_DIR.as_bytes() {
        return Err(Reason::NotSessionHelper);
    }
    let own = layout::session_name(thread_id);
    if comps[2] != own.as_bytes() {
        return Err(if comps[2].starts_with(layout::SESSION_PREFIX.as_bytes()) {
            Reason::OtherSession
        } else {
            Reason::NotSessionHelper
        });
    }
    if comps.len() < 4 {
        return Err(Reason::NotSessionHelper);
    }
    Ok(HelperPath {
        path: PathBuf::from(path),
        rel: comps[3..].iter().map(|c| OsStr::from_bytes(c).to_owned()).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_rules() {
        let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(shape_reasons::<String>(&[]).unwrap_err().0, Reason::FileCount);
        let many: Vec<String> = (0..101).map(|i| format!("/a{i}")).collect();
        assert_eq!(shape_reasons(&many).unwrap_err().0, Reason::FileCount);
        assert!(shape_reasons(&many[..100]).is_ok());
        let (r, own) = shape_reasons(&p(&["/a", "/b", "/a"])).unwrap_err();
        assert_eq!((r, own), (Reason::DuplicatePath, vec![None, None, Some(Reason::DuplicatePath)]));
        assert_eq!(shape_reasons(&p(&["/a/../b"])).unwrap_err().0, Reason::PathNotExact);
        assert_eq!(shape_reasons(&p(&["a"])).unwrap_err().0, Reason::PathNotExact);
        assert_eq!(shape_reasons(&p(&["/a/"])).unwrap_err().0, Reason::PathNotExact);
        assert_eq!(shape_reasons(&p(&["/a/*.py"])).unwrap_err().0, Reason::GlobNotAllowed);
        // The first entry's own reason is the request's.
        let (r, _) = shape_reasons(&p(&["/x", "/a[1]", "/x"])).unwrap_err();
        assert_eq!(r, Reason::GlobNotAllowed);
    }
}
