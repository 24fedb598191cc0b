//! The `winx-release` binary: a thin shim over `winx-release-tools`.
#![deny(unsafe_code)]

fn main() -> std::process::ExitCode {
    keep_freed_memory();
    winx_release_tools::main()
}

/// Tells glibc's `malloc` to keep freed memory for reuse: blocks up to
/// 32 MiB (the largest threshold glibc accepts) come from the heap instead
/// of a fresh `mmap`, and up to 128 MiB freed at the heap's top stays
/// mapped. Without it every `ReadFiles` unmaps its buffers and faults them
/// in again (100 binary helpers: 52 ms p50 against 36 ms with it; benches/log,
/// 2026-12). A speed setting only: a refused value leaves glibc's default.
///
/// # References
/// - [`mallopt(3)`](https://man7.org/linux/man-pages/man3/mallopt.3.html)
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn keep_freed_memory() {
    // SAFETY: `mallopt` takes two integers and changes only the allocator's
    // tunables under its own lock; it touches no memory of ours, and runs
    // here before any other thread of this process exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 20);
    }
}

/// Other C libraries keep their own policy.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn keep_freed_memory() {}
