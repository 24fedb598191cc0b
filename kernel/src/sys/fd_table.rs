//! Growing this process's descriptor table once, ahead of need.
//!
//! The kernel grows a process's descriptor table by doubling it when a new
//! descriptor does not fit. When more than one thread shares the table,
//! each growth first waits for an RCU grace period (`expand_fdtable` calls
//! `synchronize_rcu`), milliseconds each on a virtual machine. A guardian
//! keeps thousands of descriptors for its life (the scan cache's
//! directories, the kernel threads' and members' pidfds, the snapshots'
//! kept pairs), and grown a doubling at a time
//! from its worker threads, the first release after a start took about
//! 20 ms longer in its scan and 10 ms in its `in_use` check (measured on
//! the development machine: 49 against 28 ms of check and scan, deep
//! 48,000-entry tree). Grown once at start, while the process has one
//! thread, it costs one copy of a small table.
//!
//! # References
//! - [`fcntl(2)`](https://man7.org/linux/man-pages/man2/fcntl.2.html) (`F_DUPFD_CLOEXEC`)
//! - [`getrlimit(2)`](https://man7.org/linux/man-pages/man2/getrlimit.2.html)

use std::io;

use rustix::fs::{Mode, OFlags};

/// Descriptors reserved besides those the engine's caches may keep.
const SLACK: usize = 1024;

/// How many descriptors one of the engine's caches may keep open: a
/// quarter of the soft `RLIMIT_NOFILE`, and never more than `max`. The one
/// rule for every cache that holds descriptors: the scan cache's
/// directories, the remembered kernel threads' pidfds and the members'
/// pidfds take a quarter each, the snapshots' kept pairs an eighth (a
/// sixteenth of the limit in pairs of two), so that together they leave
/// the process at least an eighth of its limit.
pub fn cache_share(max: usize) -> usize {
    share_of(rustix::process::getrlimit(rustix::process::Resource::Nofile).current, max)
}

/// [`cache_share`] for a soft limit of `soft` (`None`: unlimited).
fn share_of(soft: Option<u64>, max: usize) -> usize {
    soft.map_or(max, |n| usize::try_from(n / 4).unwrap_or(max).min(max))
}

/// Grows this process's descriptor table to hold `cached` descriptors (what
/// the caller's caches may keep) plus 1,024, within the soft
/// `RLIMIT_NOFILE`; returns the size asked for. Nothing stays open.
///
/// # References
/// - [`fcntl(2)`](https://man7.org/linux/man-pages/man2/fcntl.2.html)
pub fn grow_descriptor_table(cached: usize) -> io::Result<usize> {
    let want = cached + SLACK;
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let want = soft.map_or(want, |s| want.min(usize::try_from(s.saturating_sub(1)).unwrap_or(want)));
    let probe = rustix::fs::open("/", OFlags::PATH | OFlags::CLOEXEC, Mode::empty())?;
    let min = i32::try_from(want.saturating_sub(1)).unwrap_or(i32::MAX);
    // The duplicate lands at `min` or above: the table grows to hold it.
    drop(rustix::io::fcntl_dupfd_cloexec(&probe, min)?);
    Ok(want)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_may_keep_a_quarter_of_the_limit_at_most() {
        assert_eq!(share_of(Some(1024), 4096), 256);
        assert_eq!(share_of(Some(3), 4096), 0);
        assert_eq!(share_of(Some(1 << 20), 4096), 4096);
        assert_eq!(share_of(None, 16_384), 16_384);
    }

    #[test]
    fn the_table_is_grown_within_the_limit_and_nothing_stays_open() {
        let n = grow_descriptor_table(4096).unwrap();
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        assert!(soft.is_none_or(|s| n as u64 <= s));
        // The table holds at least `n` slots now (`FDSize` of
        // proc_pid_status(5) is its allocated size).
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let size: usize = status
            .lines()
            .find_map(|l| l.strip_prefix("FDSize:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("an FDSize line");
        assert!(size >= n, "FDSize {size} < {n}");
        // The duplicate went to slot `n - 1` or above and was closed.
        // (Not a count of the table: the crate's other tests open and close
        // descriptors on other threads meanwhile, some of them dozens.)
        let high: Vec<usize> = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .filter(|&fd: &usize| fd + 1 >= n)
            .collect();
        assert!(high.is_empty(), "descriptors left at or above {}: {high:?}", n - 1);
    }
}
