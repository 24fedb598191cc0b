//! The descriptors a release's caches keep, reserved once.

use std::io;

/// Grows this process's descriptor table to hold as many descriptors as
/// the release's caches may keep (the scan cache's directories, step
/// `scan`; the remembered kernel threads' pidfds, step `in_use`) plus
/// 1,024, within the soft `RLIMIT_NOFILE`; returns the size asked for.
/// Call it first thing in a long-lived process, before it starts threads.
/// Nothing stays open.
///
/// # References
/// - [`fcntl(2)`](https://man7.org/linux/man-pages/man2/fcntl.2.html)
// Hidden: public for the guardian's start-up; not a supported API.
#[doc(hidden)]
pub fn reserve_descriptor_table() -> io::Result<usize> {
    let cached = crate::scan::descriptor_budget() + crate::procfs::kernel_threads_remembered_at_most();
    crate::sys::grow_descriptor_table(cached)
}
