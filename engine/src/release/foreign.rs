//! [`release()`] on every platform but Linux: nothing is touched.

use super::{ReleaseOptions, ReleaseReport, ReleaseRequest};
use crate::admission::AdmissionGuard;
use crate::error::Reason;
use crate::owner::RuntimeOwner;

/// Releases nothing: off Linux every target is `denied` with
/// [`Reason::UnsupportedPlatform`] and nothing is touched (the contract:
/// "on any other platform every release is denied with
/// `unsupported_platform`"). The signature is Linux's, so that a host's
/// code compiles everywhere.
///
/// # Errors
/// Never an `Err`: a [`ReleaseReport`] with [`super::Status::Denied`].
pub fn release(
    req: &ReleaseRequest<'_>,
    admission: &AdmissionGuard<'_>,
    owner: &dyn RuntimeOwner,
    opts: &ReleaseOptions<'_>,
) -> ReleaseReport {
    let _ = (admission, owner, opts);
    let paths: Vec<String> = req.targets.iter().map(|t| t.path.to_string_lossy().into_owned()).collect();
    ReleaseReport::denied(&paths, Reason::UnsupportedPlatform, &[], "release is supported on Linux only")
}
