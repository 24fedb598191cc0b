//! The exact-path rule: one absolute path that needs no normalising. It
//! knows nothing of layouts, so the layout's own workspace check uses it
//! too; [`crate::preflight`] offers it as `check_exact`.

use std::ffi::OsStr;

use crate::error::Reason;

/// Longest accepted path, in bytes (`PATH_MAX` less the NUL).
pub const MAX_PATH_BYTES: usize = 4095;
/// Longest accepted component, in bytes (`NAME_MAX`).
pub const MAX_NAME_BYTES: usize = 255;

/// Checks that the kernel can take `path` at all: no NUL, at most
/// [`MAX_PATH_BYTES`] bytes, no component over [`MAX_NAME_BYTES`]. Paths
/// that are read as given (not exact paths) are held to this much before
/// any system call; [`check_exact`] starts with it.
///
/// # Errors
/// [`Reason::PathNotExact`].
pub fn check_kernel_shape(path: impl AsRef<OsStr>) -> Result<(), Reason> {
    let path = path.as_ref().as_encoded_bytes();
    if path.contains(&0) || path.len() > MAX_PATH_BYTES || path.split(|&b| b == b'/').any(|c| c.len() > MAX_NAME_BYTES)
    {
        return Err(Reason::PathNotExact);
    }
    Ok(())
}

/// Checks that `path` is exact: absolute, no `.`, `..` or empty component,
/// no trailing `/`, no NUL, no glob character, within length limits.
///
/// The rules are on bytes: a path need not be UTF-8.
///
/// # Errors
/// [`Reason::PathNotExact`] or [`Reason::GlobNotAllowed`].
pub fn check_exact(path: impl AsRef<OsStr>) -> Result<(), Reason> {
    check_kernel_shape(path.as_ref())?;
    // The platform's encoding of the path: its bytes on Unix.
    let path = path.as_ref().as_encoded_bytes();
    if path.first() != Some(&b'/') {
        return Err(Reason::PathNotExact);
    }
    if path.len() > 1 && path.ends_with(b"/") {
        return Err(Reason::PathNotExact);
    }
    if path.len() > 1 {
        for comp in path[1..].split(|&b| b == b'/') {
            if comp.is_empty() || comp == b"." || comp == b".." || comp.len() > MAX_NAME_BYTES {
                return Err(Reason::PathNotExact);
            }
        }
    }
    if path.iter().any(|b| matches!(b, b'*' | b'?' | b'[')) {
        return Err(Reason::GlobNotAllowed);
    }
    Ok(())
}
