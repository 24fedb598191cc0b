//! Steps `shape` and `preflight` of a release: the request's paths checked
//! for shape, placed in the thread's session directory, and every target
//! opened through directory handles without following a link.
//!
//! This is the one copy of those rules. The frontend runs [`preflight`]
//! before it verifies each target's generation token against the identity
//! found here; the engine's `check` step ([`crate::release()`]) runs the
//! same two halves ([`place_all`], then `open_all` once the owner has
//! answered) before it compares each identity with its pin and re-hashes
//! the bytes. Nothing here changes anything on disk.
//!
//! Names: `shape` is [`check_shape`] (count, duplicates, exactness),
//! `preflight` is [`place_all`] (shape, then placement: reserved namespace,
//! other session, not a helper) followed by `open_all` (each target a
//! regular file with one link, on the session directory's filesystem, no
//! two naming one physical file).
//!
//! # References
//! - [`openat2(2)`](https://man7.org/linux/man-pages/man2/openat2.2.html)
//!   (`RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH`)
//! - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)
//! - [`path_resolution(7)`](https://man7.org/linux/man-pages/man7/path_resolution.7.html)

#[cfg(all(target_os = "linux", not(winx_foreign)))]
use std::collections::HashMap;
use std::ffi::OsStr;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use std::path::PathBuf;

#[cfg(all(target_os = "linux", not(winx_foreign)))]
use crate::error::Reason;
use crate::error::Refusal;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use crate::layout::{self, Layout};
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use crate::resolve::{open_dir_abs, open_dir_beneath, open_regular_beneath};
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use winx_release_kernel::identity::{Identity, PhysicalId};

#[cfg(all(target_os = "linux", not(winx_foreign)))]
mod reserved;
mod route;
mod rules;

#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub use reserved::write_reaches_reserved;
pub use route::{route_write, SessionDir, WriteRoute};
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub(crate) use rules::in_reserved_namespace;
pub use rules::{check_exact, check_kernel_shape, MAX_NAME_BYTES, MAX_PATH_BYTES, MAX_TARGETS};
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub use rules::{place_helper, HelperPath};

/// One target that passed the preflight: opened, regular, one link.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
#[derive(Debug)]
pub struct Preflighted {
    /// Its index in the request.
    pub index: usize,
    /// Its exact path and its components below the session directory.
    pub helper: HelperPath,
    /// Its parent directory, opened through handles without following links.
    pub parent: OwnedFd,
    /// The file itself, opened read-only with `O_NOFOLLOW`.
    pub file: OwnedFd,
    /// Its identity, read from `file`.
    pub identity: Identity,
}

/// The session directory and every target of a request, opened.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
#[derive(Debug)]
pub struct Preflight {
    /// The session directory, opened through handles from `/`.
    pub session: OwnedFd,
    /// Its path.
    pub session_path: PathBuf,
    /// Every target, in request order.
    pub targets: Vec<Preflighted>,
}

/// Opens the session directory of `thread_id` through directory handles
/// from `/`, never following a link.
///
/// # Errors
/// [`Reason::Symlink`] when the workspace path or a component below it is a
/// symbolic link; [`Reason::NotFound`] when a component is missing, is not
/// a directory or cannot be opened.
///
/// # References
/// - [`openat2(2)`](https://man7.org/linux/man-pages/man2/openat2.2.html)
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub fn open_session_dir(layout: &Layout, thread_id: &str) -> Result<OwnedFd, Reason> {
    let ws = open_dir_abs(layout.workspace()).map_err(|e| e.reason())?;
    let session = layout::session_name(thread_id);
    open_dir_beneath(ws.as_fd(), &[layout::WINX_DIR, layout::TMP_DIR, session.as_str()]).map_err(|e| e.reason())
}

/// Step `shape`: checks a request's paths: 1–[`MAX_TARGETS`] entries, each
/// unique and exact (see [`check_exact`]), with a refusal that names the
/// first refused path and why.
///
/// This is the one copy of the shape rules; the frontend and the engine both
/// call it.
///
/// # Errors
/// A [`Refusal`] with [`Reason::FileCount`], [`Reason::DuplicatePath`],
/// [`Reason::PathNotExact`] or [`Reason::GlobNotAllowed`].
pub fn check_shape<P: AsRef<Path>>(paths: &[P]) -> Result<(), Refusal> {
    let exact: Vec<&OsStr> = paths.iter().map(|p| p.as_ref().as_os_str()).collect();
    let Err((reason, own)) = rules::shape_reasons(&exact) else { return Ok(()) };
    Err(Refusal::of_targets(paths, own, |_| None).unwrap_or_else(|| {
        Refusal::whole(paths.len(), reason, format!("a release names 1 to {MAX_TARGETS} targets, not {}", paths.len()))
    }))
}

/// Checks the shape of a request's `paths` and places each in the session
/// directory of `thread_id`: the first half of [`preflight`].
///
/// Pure string work: nothing is opened.
///
/// # Errors
/// A [`Refusal`] whose reason is [`Reason::FileCount`] (fewer than 1 or more
/// than [`MAX_TARGETS`] paths), else the first refused target's own reason:
/// [`Reason::DuplicatePath`], [`Reason::PathNotExact`],
/// [`Reason::GlobNotAllowed`], [`Reason::ReservedNamespace`],
/// [`Reason::OtherSession`] or [`Reason::NotSessionHelper`].
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub fn place_all<P: AsRef<Path>>(layout: &Layout, thread_id: &str, paths: &[P]) -> Result<Vec<HelperPath>, Refusal> {
    check_shape(paths)?;
    let mut own = vec![None; paths.len()];
    let mut helpers = Vec::with_capacity(paths.len());
    for (i, p) in paths.iter().enumerate() {
        match place_helper(layout, thread_id, p.as_ref()) {
            Ok(h) => helpers.push(h),
            Err(r) => own[i] = Some(r),
        }
    }
    match Refusal::of_targets(paths, own, |_| None) {
        Some(refusal) => Err(refusal),
        None => Ok(helpers),
    }
}

/// Opens the session directory and every placed target below it through
/// directory handles, never following a link: the second half of
/// [`preflight`].
///
/// Each target must be a regular file with one link, on the session
/// directory's filesystem (so that its capture can be a rename), and no two
/// targets may be one physical file.
///
/// # Errors
/// A [`Refusal`] of the whole request when the session directory cannot be
/// opened ([`Reason::Symlink`], [`Reason::NotFound`]); else the first
/// refused target's own reason: [`Reason::Symlink`], [`Reason::NotFound`],
/// [`Reason::NotRegularFile`], [`Reason::Hardlink`] (more than one link, or
/// two request paths naming one file, a bind mount inside the session
/// say), [`Reason::ReadRequired`] (the object changed between its `statx`
/// and its open) or [`Reason::RenameUnsupported`] (on another filesystem
/// than the session directory).
///
/// # References
/// - [`openat(2)`](https://man7.org/linux/man-pages/man2/openat.2.html)
/// - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub(crate) fn open_all(layout: &Layout, thread_id: &str, helpers: Vec<HelperPath>) -> Result<Preflight, Refusal> {
    let n = helpers.len();
    let session_path = layout.session_dir(thread_id);
    let session = open_session_dir(layout, thread_id).map_err(|r| {
        Refusal::whole(n, r, format!("{}: {r:#}: the session directory cannot be opened", session_path.display()))
    })?;
    let session_dev = Identity::of_fd(&session)
        .map_err(|e| Refusal::whole(n, Reason::NotFound, format!("{}: {e}", session_path.display())))?
        .dev;
    let mut own: Vec<Option<Reason>> = vec![None; n];
    let mut why: Vec<Option<String>> = vec![None; n];
    let mut targets = Vec::with_capacity(n);
    let mut seen: HashMap<PhysicalId, usize> = HashMap::new();
    for (index, helper) in helpers.iter().enumerate() {
        let opened = match open_regular_beneath(session.as_fd(), &helper.rel) {
            Ok(o) => o,
            Err(r) => {
                own[index] = Some(r);
                continue;
            }
        };
        if let Some(&first) = seen.get(&opened.identity.physical()) {
            for i in [first, index] {
                own[i] = Some(Reason::Hardlink);
            }
            why[index] = Some(format!("the same physical file as {}", helpers[first].path.display()));
            why[first] = Some(format!("the same physical file as {}", helper.path.display()));
            continue;
        }
        seen.insert(opened.identity.physical(), index);
        if opened.identity.dev != session_dev {
            own[index] = Some(Reason::RenameUnsupported);
            why[index] = Some("on another filesystem than its session directory".to_owned());
            continue;
        }
        targets.push(Preflighted {
            index,
            helper: helper.clone(),
            parent: opened.parent,
            file: opened.file,
            identity: opened.identity,
        });
    }
    let paths: Vec<&Path> = helpers.iter().map(|h| h.path.as_path()).collect();
    match Refusal::of_targets(&paths, own, |i| why[i].clone()) {
        Some(refusal) => Err(refusal),
        None => Ok(Preflight { session, session_path, targets }),
    }
}

/// Runs the `preflight` step of a release for `paths` of `thread_id`'s
/// session: [`place_all`] (shape and placement), then `open_all` (every
/// target opened through directory handles, no-follow, regular, one link).
///
/// What it returns is what a caller pins or compares: each target's opened
/// descriptor and its identity. It does not read the bytes; a caller that
/// holds a pin compares it ([`Pin::matches_identity`](crate::Pin::matches_identity)),
/// and the release re-hashes under the owner's barrier. Nothing on disk
/// changes.
///
/// # Errors
/// A [`Refusal`] (every target refused, nothing touched) with any reason
/// [`place_all`] or `open_all` returns.
///
/// # Example
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use winx_release_engine::preflight::preflight;
/// use winx_release_engine::{Layout, Reason};
///
/// let tmp = tempfile::tempdir()?;
/// let layout = Layout::new(tmp.path().canonicalize()?, tmp.path().canonicalize()?.join("data"))?;
/// layout.create_session_dir("t")?;
/// let session = layout.session_dir("t");
/// std::fs::write(session.join("a.py"), "1\n")?;
/// let a = session.join("a.py").display().to_string();
/// let opened = preflight(&layout, "t", &[a.clone()])?;
/// assert_eq!(opened.targets[0].identity.size, 2);
///
/// let missing = session.join("b.py").display().to_string();
/// let refused = preflight(&layout, "t", &[a, missing.clone()]).unwrap_err();
/// assert_eq!(refused.reason, Reason::NotFound);
/// assert_eq!(refused.own, [None, Some(Reason::NotFound)]);
/// assert!(refused.detail.starts_with(&format!("{missing}: not_found (")));
/// # Ok(())
/// # }
/// ```
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub fn preflight<P: AsRef<Path>>(layout: &Layout, thread_id: &str, paths: &[P]) -> Result<Preflight, Refusal> {
    open_all(layout, thread_id, place_all(layout, thread_id, paths)?)
}
