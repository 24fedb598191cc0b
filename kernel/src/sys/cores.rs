//! How many threads the engine may run side by side.

use std::sync::OnceLock;

/// The available parallelism ([`std::thread::available_parallelism`]),
/// read once per process: each reading opens the process's cgroup files
/// (about fifteen system calls), which hot paths (every re-hash plan,
/// every `/proc` sweep) would otherwise repeat. A change of the CPU
/// affinity or the cgroup's CPU quota after the first call is not seen.
pub fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}
