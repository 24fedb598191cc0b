//! The io_uring scan backend.
//!
//! # How it runs
//!
//! **Phase 1, in parallel.** Worker threads (one ring each, the calling
//! thread being worker 0) take directories from `crossbeam-deque` queues,
//! a few at a time. For such a batch a worker submits the `openat`s of the
//! directories (`O_RDONLY|O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC`, relative to the
//! parent's descriptor), then, per opened directory, reads it with
//! getdents64 (synchronous: io_uring has no getdents) and submits one
//! `statx(AT_SYMLINK_NOFOLLOW)` per entry plus one `statx(AT_EMPTY_PATH)` of
//! the directory itself (its identity must be the one its parent's `statx`
//! saw). Entries are classified as their completions arrive; subdirectories
//! become new work on the worker's own queue (last in, first out, so the
//! walk stays depth first and few descriptors stay open); idle workers
//! steal. Each directory's result (its entry names in directory order, each
//! entry's class, its subdirectories) is kept.
//!
//! **Phase 2, in order.** The calling thread then replays the synchronous
//! backend's order over the kept results: roots in the order given, each
//! depth first, a directory's entries counted in directory order before any
//! of its subdirectories is entered. Counting, the depth and entry bounds,
//! vanished entries and the first offending entry are decided here, exactly
//! as [`SyncBackend`](crate::scan::SyncBackend) decides them, so both
//! backends give the same report for the same tree.
//!
//! Phase 1 stops early (cancels) as soon as it sees an offending entry, or
//! more entries than the bound allows; phase 2 then reads, on the calling
//! thread, the directories that phase 1 did not finish and that the replay
//! still reaches before its first failure. A directory phase 2 reads is
//! capped at the entries the bound can still admit; a capped directory is
//! read again, wider, only if entries vanished.
//!
//! If the kernel refuses an operation with `EINVAL` on a completion, the
//! run switches to synchronous system calls on the same threads (see
//! `winx_release_kernel::uring::ring`) and the report says `sync`.
//!
//! No `unsafe` here: operations go through `winx_release_kernel::uring::owned`, which
//! holds each operation's name buffer and directory descriptor until its
//! completion and hands an opened directory back as an `OwnedFd`. Counting
//! and bounds are [`Tally::admit`](super::tally::Tally::admit), shared with
//! every backend.
//!
//! Files: `mod.rs` (the backend and the state its threads share),
//! `walker.rs` (phase 1: reading directories on a ring), `workers.rs`
//! (phase 1's threads and queues), `replay.rs` (phase 2).
//!
//! # References
//! - [`io_uring_enter(2)`](https://man7.org/linux/man-pages/man2/io_uring_enter.2.html)
//! - [`getdents64(2)`](https://man7.org/linux/man-pages/man2/getdents64.2.html)
//! - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)
//! - [`openat(2)`](https://man7.org/linux/man-pages/man2/openat.2.html)

use std::collections::HashSet;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use crossbeam_deque::Injector;

use super::lean::full_scan;
use super::lean::{dir_identity, lean_scan, MountParents};
use super::tally::Class;
use super::{BackendKind, ScanBackend, ScanLimits, ScanMode, ScanReport, ScanRequest, SyncBackend};
use crate::error::Reason;
use winx_release_kernel::identity::PhysicalId;
use winx_release_kernel::uring::ring::{RingConfig, Shared};

mod replay;
mod walker;
mod workers;

/// Size of each worker's getdents64 buffer.
const DIRENT_BUF: usize = 64 * 1024;

/// Flags every scanned directory is opened with (as the synchronous backend).
const DIR_FLAGS: i32 = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

/// What an entry's `statx` must return.
const ENTRY_MASK: u32 = libc::STATX_TYPE | libc::STATX_INO | libc::STATX_SIZE;

/// What an opened directory's `statx` must return.
const DIR_MASK: u32 = libc::STATX_TYPE | libc::STATX_INO;

/// Knobs of the io_uring backend. The defaults are what measured fastest on
/// the development machine (`benches/README.md`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UringConfig {
    /// Worker threads, one ring each, the calling thread included; 0 uses
    /// the available parallelism.
    pub threads: usize,
    /// Directories a worker takes at once (their `openat`s share one
    /// submission, their `statx`es one pipeline).
    pub batch_dirs: usize,
    /// How each ring is set up.
    pub ring: RingConfig,
    /// Simulates a kernel that refuses an operation: completion number `n`
    /// (1-based, over all rings of one scan) is turned into `-EINVAL`, as
    /// gVisor answers. For tests of the mid-scan switch; `None` normally.
    pub simulate_einval_at: Option<u64>,
}

impl Default for UringConfig {
    fn default() -> Self {
        UringConfig { threads: 0, batch_dirs: 4, ring: RingConfig::default(), simulate_einval_at: None }
    }
}

impl UringConfig {
    fn thread_count(&self) -> usize {
        if self.threads > 0 {
            self.threads
        } else {
            winx_release_kernel::sys::cores()
        }
    }
}

/// The io_uring scan backend: batched `statx`/`openat` on one ring per
/// worker thread, getdents64 synchronous.
///
/// Where io_uring is unavailable ([`winx_release_kernel::uring::probe()`]) a scan runs on
/// [`SyncBackend`] and the report says `sync`.
#[derive(Clone, Debug, Default)]
pub struct UringBackend {
    config: UringConfig,
}

impl UringBackend {
    /// A backend with `config`.
    pub fn new(config: UringConfig) -> UringBackend {
        UringBackend { config }
    }
}

impl ScanBackend for UringBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Uring
    }

    fn scan(&self, req: &ScanRequest<'_>) -> ScanReport {
        if let Err(why) = winx_release_kernel::uring::probe() {
            tracing::warn!(reason = %why, "io_uring unavailable; scanning with the synchronous backend");
            return SyncBackend.scan(req);
        }
        run(&self.config, false, req)
    }
}

/// Runs a scan on parallel walkers: on io_uring, or on plain system calls
/// (`syscalls`, the [`ThreadsBackend`](super::ThreadsBackend)).
pub(super) fn run(config: &UringConfig, syscalls: bool, req: &ScanRequest<'_>) -> ScanReport {
    let start = Instant::now();
    let walk = |mounts| walk(config, syscalls, req, mounts, start);
    let kind = if syscalls { BackendKind::Threads } else { BackendKind::Uring };
    match req.mode {
        ScanMode::Lean => lean_scan(req.roots, kind, walk),
        ScanMode::Sizes => full_scan(req.roots, kind, walk),
    }
}

/// One walk of `req.roots` (see [`run`]); `mounts` are the directories
/// that hold a mount point, for [`ScanMode::Lean`].
fn walk(
    config: &UringConfig,
    syscalls: bool,
    req: &ScanRequest<'_>,
    mounts: Option<Arc<MountParents>>,
    start: Instant,
) -> ScanReport {
    let &ScanRequest { roots, limits, aliases, mode } = req;
    {
        let shared = Shared::with_einval_at(config.simulate_einval_at);
        let sizes = mode == ScanMode::Sizes;
        let sh = ScanShared {
            limits,
            aliases,
            sizes,
            mounts,
            syscalls,
            config,
            pipes: shared.clone(),
            cancel: AtomicBool::new(false),
            seen: AtomicU64::new(0),
            injector: Injector::new(),
            outstanding: AtomicUsize::new(0),
            idle: Mutex::new(()),
            wake: Condvar::new(),
            sleepers: AtomicUsize::new(0),
        };
        let root_slots: Vec<Option<Arc<DirSlot>>> = roots
            .iter()
            .map(|r| {
                r.dir.as_ref().map(|fd| {
                    // The scan's own descriptor of the root, shared by the
                    // operations that name it; a root that cannot be
                    // duplicated is inaccessible.
                    let own = rustix::io::fcntl_dupfd_cloexec(fd.as_fd(), 0).ok().map(Arc::new);
                    let id = if sizes { None } else { dir_identity(fd.as_fd()) };
                    Arc::new(DirSlot::root(own, id))
                })
            })
            .collect();
        let mut walker = walker::Walker::new(&sh, shared.clone());
        for slot in root_slots.iter().flatten() {
            sh.outstanding.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            sh.injector.push(slot.clone());
        }
        workers::run_phase1(&sh, &mut walker);
        let (tally, failure) = replay::resolve(&sh, roots, &root_slots, &mut walker);
        drop(walker);
        let backend = match (syscalls, shared.degraded()) {
            (true, _) => BackendKind::Threads,
            (false, true) => BackendKind::Sync,
            (false, false) => BackendKind::Uring,
        };
        super::report(backend, &tally, failure, start)
    }
}

/// A directory known to exist: a root, or a subdirectory some `statx` saw.
struct DirSlot {
    /// The buffer that holds its name (its parent's names; empty for a
    /// root), NUL-terminated at `end`.
    names: Arc<Vec<u8>>,
    /// Where its name starts in `names`.
    start: usize,
    /// Where its name ends (the NUL) in `names`.
    end: usize,
    /// What the parent's `statx` saw; for a root, its own identity.
    id: PhysicalId,
    /// Whether `id` is known (a root whose identity could not be read).
    known: bool,
    /// 0 for a root.
    depth: u32,
    is_root: bool,
    /// Whether reading started once: a root's descriptor must then be
    /// rewound before it is read again.
    read_before: AtomicBool,
    /// For a root, the root itself; otherwise the parent directory to open
    /// the name from. Kept until the directory's full result is recorded, so
    /// phase 2 can read it if phase 1 did not.
    handle: Mutex<Option<Arc<OwnedFd>>>,
    result: Mutex<Option<DirResult>>,
}

impl DirSlot {
    fn root(own: Option<Arc<OwnedFd>>, id: Option<PhysicalId>) -> DirSlot {
        DirSlot {
            names: Arc::new(Vec::new()),
            start: 0,
            end: 0,
            id: id.unwrap_or(PhysicalId { dev: 0, ino: 0 }),
            known: id.is_some(),
            depth: 0,
            is_root: true,
            read_before: AtomicBool::new(false),
            handle: Mutex::new(own),
            result: Mutex::new(None),
        }
    }

    /// Its name in its parent, without the NUL (empty for a root).
    fn name(&self) -> &[u8] {
        &self.names[self.start..self.end]
    }
}

/// How entering a directory went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Enter {
    Entered,
    /// Removed since its parent was read: skipped.
    Vanished,
    Failed(Reason),
}

/// What reading one directory found.
struct DirResult {
    enter: Enter,
    /// NUL-terminated names, in directory order; shared with the
    /// operations that name them and with the subdirectories' slots.
    names: Arc<Vec<u8>>,
    /// End (exclusive, after the NUL) of each name in `names`.
    ends: Vec<u32>,
    classes: Vec<Class>,
    /// getdents64 failed after the recorded names.
    read_error: bool,
    /// Reading stopped at a cap; more names may follow.
    truncated: bool,
    /// Subdirectories in order, up to the first offending entry: the `k`-th
    /// `Class::Dir` is `children[k]`.
    children: Vec<Arc<DirSlot>>,
}

impl DirResult {
    fn empty(enter: Enter) -> Self {
        DirResult {
            enter,
            names: Arc::new(Vec::new()),
            ends: Vec::new(),
            classes: Vec::new(),
            read_error: false,
            truncated: false,
            children: Vec::new(),
        }
    }

    /// Where name `j` starts in `names`.
    fn start(&self, j: usize) -> usize {
        if j == 0 {
            0
        } else {
            self.ends[j - 1] as usize
        }
    }

    /// Name `j`, without its NUL.
    fn name(&self, j: usize) -> &[u8] {
        &self.names[self.start(j)..self.ends[j] as usize - 1]
    }
}

/// State shared by the workers of one scan.
struct ScanShared<'s> {
    limits: ScanLimits,
    aliases: &'s HashSet<PhysicalId>,
    /// [`ScanMode::Sizes`]: every entry `statx`ed.
    sizes: bool,
    /// For [`ScanMode::Lean`]: the directories that hold a mount point.
    mounts: Option<Arc<MountParents>>,
    /// Plain system calls instead of io_uring.
    syscalls: bool,
    config: &'s UringConfig,
    pipes: Arc<Shared>,
    /// Phase 1 should stop: something offends, or too many entries.
    cancel: AtomicBool,
    /// Names read in phase 1.
    seen: AtomicU64,
    injector: Injector<Arc<DirSlot>>,
    /// Directories queued or being read.
    outstanding: AtomicUsize,
    idle: Mutex<()>,
    wake: Condvar,
    sleepers: AtomicUsize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::scan_paths;

    #[test]
    fn names_split() {
        let mut r = DirResult::empty(Enter::Entered);
        let mut names = Vec::new();
        for n in [&b"a\0"[..], b"bc\0", b"\xff\0"] {
            names.extend_from_slice(n);
            r.ends.push(names.len() as u32);
        }
        r.names = Arc::new(names);
        assert_eq!(r.name(0), b"a");
        assert_eq!(r.name(1), b"bc");
        assert_eq!(r.name(2), b"\xff");
    }

    /// A seccomp filter (on this thread and the workers it starts) fails
    /// `io_uring_setup` with `EPERM`: the scan runs on system calls, says
    /// `sync`, and reports the same as the synchronous backend.
    #[test]
    fn seccomp_blocked_rings_scan_synchronously() {
        // Decide the process-wide verdict outside the filter.
        let _ = winx_release_kernel::uring::probe();
        let t = tempfile::tempdir().unwrap();
        for i in 0..5 {
            std::fs::create_dir_all(t.path().join(format!("d{i}/e"))).unwrap();
            std::fs::write(t.path().join(format!("d{i}/f")), vec![0u8; i]).unwrap();
        }
        let roots = vec![t.path().to_path_buf()];
        let want = scan_paths(&SyncBackend, &roots, ScanLimits::default(), &HashSet::new());
        let got = std::thread::spawn(move || {
            if winx_release_kernel::uring::deny_io_uring_setup(libc::EPERM).is_err() {
                eprintln!("skipping: cannot install a seccomp filter here");
                return None;
            }
            let inputs = winx_release_kernel::uring::gather();
            assert_eq!(inputs.setup_errno, Some(libc::EPERM));
            Some(scan_paths(&UringBackend::default(), &roots, ScanLimits::default(), &HashSet::new()))
        })
        .join()
        .unwrap();
        let Some(mut got) = got else { return };
        assert_eq!(got.backend, BackendKind::Sync);
        got.elapsed_us = want.elapsed_us;
        assert_eq!(got, want);
    }
}
