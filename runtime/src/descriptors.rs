//! The descriptors a release's caches keep, reserved once.

use std::io;

/// Grows this process's descriptor table to hold as many descriptors as
/// the engine's caches may keep (the scan cache's directories, step
/// `scan`; the remembered kernel threads' and older processes' pidfds and
/// the snapshots' kept `/proc/<pid>` and `stat` pairs, steps `in_use` and
/// `owner`; the executions' members' pidfds, step `owner`) plus 1,024, within the soft `RLIMIT_NOFILE`;
/// returns the size asked for.
/// Call it first thing in a long-lived process, before it starts threads.
/// Nothing stays open.
///
/// # References
/// - [`fcntl(2)`](https://man7.org/linux/man-pages/man2/fcntl.2.html)
pub fn reserve_descriptor_table() -> io::Result<usize> {
    let cached = winx_release_engine::scan::descriptor_budget()
        + winx_release_kernel::procfs::kernel_threads_remembered_at_most()
        + 2 * winx_release_kernel::procfs::kept_pairs_at_most()
        + crate::members::members_held_at_most();
    winx_release_kernel::sys::grow_descriptor_table(cached)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every cache that keeps descriptors for the life of a process is in
    /// the reservation: one left out grows the table from worker threads,
    /// a grace period per doubling (`sys/fd_table.rs`).
    #[test]
    fn the_reservation_holds_every_cache_s_descriptors() {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        let shares = [
            winx_release_engine::scan::descriptor_budget(),
            winx_release_kernel::procfs::kernel_threads_remembered_at_most(),
            2 * winx_release_kernel::procfs::kept_pairs_at_most(),
            crate::members::members_held_at_most(),
        ];
        assert!(shares.iter().all(|&n| n > 0), "a cache has no share at this limit: {shares:?}");
        let want = shares.iter().sum::<usize>() + 1024;
        let want = soft.map_or(want, |s| want.min(usize::try_from(s - 1).unwrap_or(want)));
        assert_eq!(reserve_descriptor_table().unwrap(), want);
    }
}
