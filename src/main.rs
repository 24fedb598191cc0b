//! The `winx-release` binary: a thin shim over `winx-release-tools`.
#![deny(unsafe_code)]

fn main() -> std::process::ExitCode {
    // First: started as the monitor of an execution, this process is that
    // and nothing else (docs/DESIGN.md, "The monitor").
    #[cfg(target_os = "linux")]
    winx_release_runtime::monitor::enter();
    keep_freed_memory();
    winx_release_tools::set_idle_hook(give_back_freed_memory);
    winx_release_tools::main()
}

/// Tells glibc's `malloc` to keep freed memory for reuse: blocks up to
/// 32 MiB (the largest threshold glibc accepts) come from the heap instead
/// of a fresh `mmap`, and up to 128 MiB freed at the heap's top stays
/// mapped. Without it every `ReadFiles` unmaps its buffers and faults them
/// in again (100 binary helpers: 52 ms p50 against 36 ms with it; benches/log,
/// 2026-12).
///
/// And to make one arena per core (at least 2) instead of up to eight per
/// core: a guardian runs a few threads per shell and per connection (over
/// 300 at 16 sessions), each arena keeps its own freed memory, and at
/// 16 sessions the arenas' slack was a fifth of its peak RSS (38.3 against
/// 30.9 MiB with 2 arenas on 2 cores; benches/log, 2026-12-02, stop 40).
/// Small blocks come from each thread's cache without the arena's lock.
///
/// What these settings keep is given back once the MCP frontend has been
/// idle for a moment after answering ([`give_back_freed_memory`]): kept for
/// the next request of a busy spell, not for the process's life (after
/// 100,000 pings the frontend had kept 274-337 MB; after a 1,000,000-path
/// `ReadFiles`, 1.71 GB; issue 58).
///
/// Settings for speed and memory only: a refused value leaves glibc's
/// default.
///
/// # References
/// - [`mallopt(3)`](https://man7.org/linux/man-pages/man3/mallopt.3.html)
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn keep_freed_memory() {
    let arenas = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
    let arenas = libc::c_int::try_from(arenas).unwrap_or(libc::c_int::MAX);
    // SAFETY: `mallopt` takes two integers and changes only the allocator's
    // tunables under its own lock; it touches no memory of ours, and runs
    // here before any other thread of this process exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 20);
        libc::mallopt(libc::M_ARENA_MAX, arenas);
    }
}

/// Other C libraries keep their own policy.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn keep_freed_memory() {}

/// Gives the free memory of every arena back to the system: the heaps'
/// free tops are unmapped and their free pages within released
/// (`MADV_DONTNEED`).
///
/// # References
/// - [`malloc_trim(3)`](https://man7.org/linux/man-pages/man3/malloc_trim.3.html)
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn give_back_freed_memory() {
    // SAFETY: `malloc_trim` takes an integer and works on the allocator's
    // own free lists under its locks; it touches no memory in use.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Other C libraries keep their own policy.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn give_back_freed_memory() {}
