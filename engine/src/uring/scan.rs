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
//! [`super::ring`]) and the report says `sync`.
//!
//! # References
//! - [`io_uring_enter(2)`](https://man7.org/linux/man-pages/man2/io_uring_enter.2.html)
//! - [`getdents64(2)`](https://man7.org/linux/man-pages/man2/getdents64.2.html)
//! - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)
//! - [`openat(2)`](https://man7.org/linux/man-pages/man2/openat.2.html)

use std::collections::HashSet;
use std::ffi::{CString, OsStr};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam_deque::{Injector, Stealer, Worker};
use rustix::fs::{FileType, RawDir};

use super::ring::{Op, Pipeline, RingConfig, Shared};
use crate::error::Reason;
use crate::identity::PhysicalId;
use crate::scan::{BackendKind, ScanBackend, ScanLimits, ScanReport, ScanRoot, SyncBackend, Verdict};
use crate::sync::lock;

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
            std::thread::available_parallelism().map_or(1, |n| n.get())
        }
    }
}

/// The io_uring scan backend: batched `statx`/`openat` on one ring per
/// worker thread, getdents64 synchronous.
///
/// Where io_uring is unavailable ([`super::probe()`]) a scan runs on
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

    /// Its configuration.
    pub fn config(&self) -> &UringConfig {
        &self.config
    }
}

impl ScanBackend for UringBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Uring
    }

    fn scan(&self, roots: &[ScanRoot], limits: ScanLimits, aliases: &HashSet<PhysicalId>) -> ScanReport {
        if let Err(why) = super::probe::probe() {
            tracing::warn!(reason = %why, "io_uring unavailable; scanning with the synchronous backend");
            return SyncBackend.scan(roots, limits, aliases);
        }
        let start = Instant::now();
        let shared = Shared::with_einval_at(self.config.simulate_einval_at);
        let sh = ScanShared {
            limits,
            aliases,
            config: &self.config,
            pipes: shared.clone(),
            cancel: AtomicBool::new(false),
            seen: AtomicU64::new(0),
            injector: Injector::new(),
            outstanding: AtomicUsize::new(0),
            idle: Mutex::new(()),
            wake: Condvar::new(),
            sleepers: AtomicUsize::new(0),
        };
        let root_slots: Vec<Option<Arc<DirSlot<'_>>>> = roots
            .iter()
            .map(|r| {
                r.dir.as_ref().map(|fd| {
                    Arc::new(DirSlot {
                        name: CString::default(),
                        id: PhysicalId { dev: 0, ino: 0 },
                        depth: 0,
                        is_root: true,
                        read_before: AtomicBool::new(false),
                        handle: Mutex::new(Some(Handle::Borrowed(fd.as_fd()))),
                        result: Mutex::new(None),
                    })
                })
            })
            .collect();
        let mut walker = Walker::new(&self.config, shared.clone());
        for slot in root_slots.iter().flatten() {
            sh.outstanding.fetch_add(1, Ordering::Relaxed);
            sh.injector.push(slot.clone());
        }
        run_phase1(&sh, &mut walker);
        let (tally, failure) = resolve(&sh, roots, &root_slots, &mut walker);
        drop(walker);
        let backend = if shared.degraded() { BackendKind::Sync } else { BackendKind::Uring };
        let (verdict, reason, path) = match failure {
            Some((r, p)) => (Verdict::FailClosed, Some(r), Some(p)),
            None => (Verdict::Clean, None, None),
        };
        ScanReport {
            verdict,
            reason,
            path,
            entries: tally.entries,
            directories: tally.directories,
            files: tally.files,
            bytes: tally.bytes,
            max_depth: tally.max_depth,
            backend,
            elapsed_us: u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX),
        }
    }
}

/// A directory descriptor, the scan's own or borrowed from a root.
#[derive(Clone, Debug)]
enum Handle<'a> {
    Borrowed(BorrowedFd<'a>),
    Shared(Arc<OwnedFd>),
}

impl Handle<'_> {
    fn raw(&self) -> RawFd {
        match self {
            Handle::Borrowed(fd) => fd.as_raw_fd(),
            Handle::Shared(fd) => fd.as_raw_fd(),
        }
    }
}

/// A directory known to exist: a root, or a subdirectory some `statx` saw.
struct DirSlot<'a> {
    /// The name in its parent (empty for a root).
    name: CString,
    /// What the parent's `statx` saw (unused for a root).
    id: PhysicalId,
    /// 0 for a root.
    depth: u32,
    is_root: bool,
    /// Whether reading started once: a root's descriptor must then be
    /// rewound before it is read again.
    read_before: AtomicBool,
    /// For a root, the root itself; otherwise the parent directory to open
    /// `name` from. Kept until the directory's full result is recorded, so
    /// phase 2 can read it if phase 1 did not.
    handle: Mutex<Option<Handle<'a>>>,
    result: Mutex<Option<DirResult<'a>>>,
}

/// How entering a directory went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Enter {
    Entered,
    /// Removed since its parent was read: skipped.
    Vanished,
    Failed(Reason),
}

/// One entry's class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// Not inspected: the directory is too deep to have entries.
    Unstatted,
    /// Removed since getdents.
    Vanished,
    File(u64),
    Dir(PhysicalId),
    Fail(Reason),
}

/// What reading one directory found.
struct DirResult<'a> {
    enter: Enter,
    /// NUL-terminated names, in directory order.
    names: Vec<u8>,
    /// End (exclusive, after the NUL) of each name in `names`.
    ends: Vec<u32>,
    classes: Vec<Class>,
    /// getdents64 failed after the recorded names.
    read_error: bool,
    /// Reading stopped at a cap; more names may follow.
    truncated: bool,
    /// Subdirectories in order, up to the first offending entry: the `k`-th
    /// `Class::Dir` is `children[k]`.
    children: Vec<Arc<DirSlot<'a>>>,
}

impl DirResult<'_> {
    fn empty(enter: Enter) -> Self {
        DirResult {
            enter,
            names: Vec::new(),
            ends: Vec::new(),
            classes: Vec::new(),
            read_error: false,
            truncated: false,
            children: Vec::new(),
        }
    }

    /// Name `j`, without its NUL.
    fn name(&self, j: usize) -> &[u8] {
        let start = if j == 0 { 0 } else { self.ends[j - 1] as usize };
        &self.names[start..self.ends[j] as usize - 1]
    }
}

/// State shared by the workers of one scan.
struct ScanShared<'s, 'a> {
    limits: ScanLimits,
    aliases: &'s HashSet<PhysicalId>,
    config: &'s UringConfig,
    pipes: Arc<Shared>,
    /// Phase 1 should stop: something offends, or too many entries.
    cancel: AtomicBool,
    /// Names read in phase 1.
    seen: AtomicU64,
    injector: Injector<Arc<DirSlot<'a>>>,
    /// Directories queued or being read.
    outstanding: AtomicUsize,
    idle: Mutex<()>,
    wake: Condvar,
    sleepers: AtomicUsize,
}

/// Where a directory read stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Its `openat` is in flight.
    Opening,
    /// Opened (or failed to open); waiting to be read.
    Opened,
    /// Its `statx`es are being queued.
    Pushing,
    /// Everything queued; done when nothing is in flight.
    Waiting,
}

/// One directory a worker is reading.
struct Job<'a> {
    slot: Arc<DirSlot<'a>>,
    /// A clone of the slot's handle, held while the job lives.
    handle: Option<Handle<'a>>,
    /// The directory's own descriptor, for a non-root.
    own: Option<OwnedFd>,
    enter: Enter,
    self_check: Option<bool>,
    result: DirResult<'a>,
    /// Its operations in flight.
    pending: usize,
    stage: Stage,
    cap: usize,
    cancellable: bool,
    /// Reading stopped because the scan was cancelled: record nothing.
    abandoned: bool,
}

impl Job<'_> {
    /// The directory's descriptor, once entered.
    fn fd(&self) -> RawFd {
        match (&self.own, &self.handle) {
            (Some(fd), _) => fd.as_raw_fd(),
            (None, Some(h)) => h.raw(),
            (None, None) => -1,
        }
    }
}

/// Part of a completion tag: a directory's own `statx`.
const SELF: u32 = u32::MAX;
/// Part of a completion tag: a directory's `openat`.
const OPEN: u32 = u32::MAX - 1;

fn tag(id: usize, part: u32) -> u64 {
    ((id as u64) << 32) | u64::from(part)
}

/// A worker's reading machinery: its pipeline (ring), its getdents buffer,
/// and the directories it has in flight. Directories are streamed: new ones
/// are opened and read while earlier ones' `statx`es are still in flight.
struct Walker<'a> {
    pipe: Pipeline,
    dirents: Vec<MaybeUninit<u8>>,
    async_close: bool,
    jobs: Vec<Option<Job<'a>>>,
    free: Vec<usize>,
    /// Jobs whose `openat` completed, to be read.
    opened: Vec<usize>,
    /// Jobs with nothing left in flight, to be recorded.
    finished: Vec<usize>,
    live: usize,
    wait_divisor: usize,
}

impl<'a> Walker<'a> {
    fn new(config: &UringConfig, shared: Arc<Shared>) -> Walker<'a> {
        let caps = super::probe::probe().ok();
        Walker {
            pipe: Pipeline::new(&config.ring, shared),
            dirents: vec![MaybeUninit::uninit(); DIRENT_BUF],
            async_close: config.ring.async_close && caps.is_some_and(|c| c.async_close),
            jobs: Vec::new(),
            free: Vec::new(),
            opened: Vec::new(),
            finished: Vec::new(),
            live: 0,
            wait_divisor: config.ring.wait_divisor.max(1) as usize,
        }
    }

    /// Closes a directory: asynchronously on the ring when so configured.
    fn close(&mut self, fd: OwnedFd, aliases: &HashSet<PhysicalId>) {
        if self.async_close {
            self.make_room(aliases);
            self.pipe.close(fd);
        } else {
            drop(fd);
        }
    }

    /// Waits for room in the pipeline, handling what completes meanwhile.
    fn make_room(&mut self, aliases: &HashSet<PhysicalId>) {
        if !self.pipe.has_room() {
            let (jobs, opened, finished) = (&mut self.jobs, &mut self.opened, &mut self.finished);
            self.pipe.make_room(&mut |t, res, st| on_completion(jobs, opened, finished, aliases, t, res, st));
        }
    }

    /// Submits what is queued and handles at least `want` completions
    /// (fewer only if fewer are in flight).
    fn pump(&mut self, aliases: &HashSet<PhysicalId>, want: usize) {
        let (jobs, opened, finished) = (&mut self.jobs, &mut self.opened, &mut self.finished);
        self.pipe.reap(want, &mut |t, res, st| on_completion(jobs, opened, finished, aliases, t, res, st));
    }

    /// Handles a fraction of what is in flight (see
    /// [`RingConfig::wait_divisor`]).
    fn pump_some(&mut self, aliases: &HashSet<PhysicalId>) {
        let want = (self.pipe.outstanding() / self.wait_divisor).max(1);
        self.pump(aliases, want);
    }

    /// Starts reading the directory of `slot`, keeping at most `cap` names.
    fn begin(&mut self, sh: &ScanShared<'_, 'a>, slot: Arc<DirSlot<'a>>, cap: usize, cancellable: bool) {
        let handle = lock(&slot.handle).clone();
        let enter = if handle.is_some() { Enter::Entered } else { Enter::Failed(Reason::BackingInaccessible) };
        let is_root = slot.is_root;
        let job = Job {
            slot,
            handle,
            own: None,
            enter,
            self_check: None,
            result: DirResult::empty(Enter::Entered),
            pending: 0,
            stage: Stage::Opened,
            cap,
            cancellable,
            abandoned: false,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.jobs[id] = Some(job);
                id
            }
            None => {
                self.jobs.push(Some(job));
                self.jobs.len() - 1
            }
        };
        self.live += 1;
        if is_root || enter != Enter::Entered {
            self.opened.push(id);
            return;
        }
        self.make_room(sh.aliases);
        let job = self.jobs[id].as_mut().expect("job");
        job.stage = Stage::Opening;
        job.pending = 1;
        let dirfd = job.handle.as_ref().map_or(-1, Handle::raw);
        let name = job.slot.name.as_ptr();
        // SAFETY: the name lives in the slot, which the job keeps alive until
        // the open's completion has been handled; `dirfd` stays open through
        // the job's `handle`.
        unsafe { self.pipe.push(Op::OpenAt { dirfd, path: name, flags: DIR_FLAGS }, tag(id, OPEN)) };
    }

    /// Reads every opened directory and queues its `statx`es.
    fn advance(&mut self, sh: &ScanShared<'_, 'a>) {
        while let Some(id) = self.opened.pop() {
            let job = self.jobs[id].as_mut().expect("job");
            job.stage = Stage::Pushing;
            if job.enter == Enter::Entered {
                self.read(sh, id);
            }
            let job = self.jobs[id].as_mut().expect("job");
            job.stage = Stage::Waiting;
            if job.pending == 0 {
                self.finished.push(id);
            }
        }
    }

    /// Reads job `id`'s directory and queues its `statx`es.
    fn read(&mut self, sh: &ScanShared<'_, 'a>, id: usize) {
        let (fd, is_root) = {
            let job = self.jobs[id].as_ref().expect("job");
            (job.fd(), job.slot.is_root)
        };
        if !is_root {
            self.make_room(sh.aliases);
            self.jobs[id].as_mut().expect("job").pending += 1;
            // SAFETY: static path; the descriptor is owned by the job, which
            // lives until this completion has been handled.
            unsafe {
                self.pipe.push(
                    Op::Statx { dirfd: fd, path: c"".as_ptr(), flags: libc::AT_EMPTY_PATH, mask: DIR_MASK },
                    tag(id, SELF),
                )
            };
        }
        let job = self.jobs[id].as_mut().expect("job");
        let depth_full = job.slot.depth >= sh.limits.max_depth;
        let cap = if depth_full { 1 } else { job.cap };
        if !read_names(sh, job, &mut self.dirents, cap) {
            job.abandoned = true;
            return;
        }
        let n = job.result.ends.len();
        job.result.classes = vec![Class::Unstatted; n];
        if depth_full {
            return;
        }
        let names = job.result.names.as_ptr();
        // Held aside while queueing (completions only touch `classes`).
        let ends = std::mem::take(&mut job.result.ends);
        for j in 0..n {
            let start = if j == 0 { 0 } else { ends[j - 1] as usize };
            self.make_room(sh.aliases);
            self.jobs[id].as_mut().expect("job").pending += 1;
            // SAFETY: `names` is complete and is not modified again while the
            // job lives, which is until every completion of it has been
            // handled; the descriptor is the job's (or a root's, borrowed for
            // the scan).
            unsafe {
                self.pipe.push(
                    Op::Statx {
                        dirfd: fd,
                        path: names.add(start).cast(),
                        flags: libc::AT_SYMLINK_NOFOLLOW,
                        mask: ENTRY_MASK,
                    },
                    tag(id, j as u32),
                )
            };
        }
        self.jobs[id].as_mut().expect("job").result.ends = ends;
    }

    /// Records every finished job's result in its slot. Returns the new
    /// subdirectories (in order) and how many jobs ended.
    fn finish(&mut self, sh: &ScanShared<'_, 'a>) -> (Vec<Arc<DirSlot<'a>>>, usize) {
        let mut children = Vec::new();
        let mut ended = 0;
        while let Some(id) = self.finished.pop() {
            let job = self.jobs[id].take().expect("job");
            self.free.push(id);
            self.live -= 1;
            ended += 1;
            self.record(sh, job, &mut children);
        }
        (children, ended)
    }

    fn record(&mut self, sh: &ScanShared<'_, 'a>, job: Job<'a>, children: &mut Vec<Arc<DirSlot<'a>>>) {
        let Job { slot, handle, mut own, enter, self_check, mut result, abandoned, .. } = job;
        if abandoned {
            if let Some(fd) = own {
                self.close(fd, sh.aliases);
            }
            return;
        }
        let enter = match (enter, slot.is_root, self_check) {
            (Enter::Entered, false, Some(true)) | (Enter::Entered, true, _) => Enter::Entered,
            // Not the directory its parent's statx saw (or its own statx
            // failed): replaced under us.
            (Enter::Entered, false, _) => Enter::Failed(Reason::BackingInaccessible),
            (other, _, _) => other,
        };
        if enter != Enter::Entered {
            result = DirResult::empty(enter);
        }
        result.enter = enter;
        let offends = match enter {
            Enter::Entered => {
                result.read_error
                    || result.classes.iter().any(|c| matches!(c, Class::Fail(_)))
                    || (!result.classes.is_empty() && slot.depth >= sh.limits.max_depth)
            }
            Enter::Vanished => false,
            Enter::Failed(_) => true,
        };
        if enter == Enter::Entered {
            let child_ids: Vec<(usize, PhysicalId)> = result
                .classes
                .iter()
                .take_while(|c| !matches!(c, Class::Fail(_) | Class::Unstatted))
                .enumerate()
                .filter_map(|(j, c)| if let Class::Dir(id) = c { Some((j, *id)) } else { None })
                .collect();
            let parent = match (child_ids.is_empty(), slot.is_root) {
                (true, _) => None,
                (false, true) => handle.clone(),
                (false, false) => own.take().map(|fd| Handle::Shared(Arc::new(fd))),
            };
            if let Some(parent) = parent {
                result.children = child_ids
                    .into_iter()
                    .map(|(j, id)| {
                        Arc::new(DirSlot {
                            name: CString::new(result.name(j)).unwrap_or_default(),
                            id,
                            depth: slot.depth + 1,
                            is_root: false,
                            read_before: AtomicBool::new(false),
                            handle: Mutex::new(Some(parent.clone())),
                            result: Mutex::new(None),
                        })
                    })
                    .collect();
                children.extend(result.children.iter().cloned());
            }
        }
        if let Some(fd) = own {
            self.close(fd, sh.aliases);
        }
        if offends {
            sh.cancel.store(true, Ordering::Relaxed);
        }
        let truncated = result.truncated;
        *lock(&slot.result) = Some(result);
        if !truncated && !slot.is_root {
            let kept = lock(&slot.handle).take();
            drop(kept);
            if let Some(Handle::Shared(parent)) = handle {
                if let Ok(fd) = Arc::try_unwrap(parent) {
                    self.close(fd, sh.aliases);
                }
            }
        }
    }

    /// Reads one directory to the end (phase 2): never cancelled.
    fn read_one(&mut self, sh: &ScanShared<'_, 'a>, slot: &Arc<DirSlot<'a>>, cap: usize) {
        self.begin(sh, slot.clone(), cap, false);
        loop {
            self.advance(sh);
            self.finish(sh);
            if self.live == 0 {
                return;
            }
            self.pump(sh.aliases, 1);
        }
    }
}

impl Drop for Walker<'_> {
    fn drop(&mut self) {
        // Submit and complete what is left (asynchronous closes) while the
        // jobs, whose names queued operations point into, still exist.
        let (jobs, opened, finished) = (&mut self.jobs, &mut self.opened, &mut self.finished);
        let none = HashSet::new();
        self.pipe.drain(&mut |t, res, st| on_completion(jobs, opened, finished, &none, t, res, st));
        for job in self.jobs.iter_mut().flatten() {
            // Opened descriptors of jobs that never finished (a panic).
            job.own.take();
        }
    }
}

/// Reads the names of `job`'s directory, at most `cap`. False when the scan
/// was cancelled meanwhile and the job is cancellable.
fn read_names(sh: &ScanShared<'_, '_>, job: &mut Job<'_>, dirents: &mut [MaybeUninit<u8>], cap: usize) -> bool {
    let fd = job.fd();
    // SAFETY: `fd` is open while the job lives (owned by it, or a root's
    // descriptor borrowed for the scan).
    let dir = unsafe { BorrowedFd::borrow_raw(fd) };
    if job.slot.read_before.swap(true, Ordering::Relaxed) && job.slot.is_root {
        // Phase 1 read part of it; read it again from the start.
        if rustix::fs::seek(dir, rustix::fs::SeekFrom::Start(0)).is_err() {
            job.result.read_error = true;
            return true;
        }
    }
    let mut iter = RawDir::new(dir, dirents);
    let mut since_check = 0u64;
    let r = &mut job.result;
    while let Some(entry) = iter.next() {
        let entry = match entry {
            Ok(e) => e,
            // Removed after it was opened (only an empty directory can be):
            // nothing more is in it, as the synchronous backend decides.
            Err(rustix::io::Errno::NOENT) => break,
            Err(_) => {
                r.read_error = true;
                break;
            }
        };
        let name = entry.file_name().to_bytes_with_nul();
        if name == b".\0" || name == b"..\0" {
            continue;
        }
        if r.ends.len() >= cap {
            r.truncated = true;
            break;
        }
        r.names.extend_from_slice(name);
        r.ends.push(u32::try_from(r.names.len()).unwrap_or(u32::MAX));
        since_check += 1;
        if since_check == 256 {
            if note_seen(sh, since_check) && job.cancellable {
                return false;
            }
            since_check = 0;
        }
    }
    !(note_seen(sh, since_check) && job.cancellable)
}

/// Counts names read; true when the scan is (now) cancelled.
fn note_seen(sh: &ScanShared<'_, '_>, n: u64) -> bool {
    let seen = sh.seen.fetch_add(n, Ordering::Relaxed) + n;
    if seen > sh.limits.max_entries {
        sh.cancel.store(true, Ordering::Relaxed);
    }
    sh.cancel.load(Ordering::Relaxed)
}

/// Handles one completion.
fn on_completion(
    jobs: &mut [Option<Job<'_>>],
    opened: &mut Vec<usize>,
    finished: &mut Vec<usize>,
    aliases: &HashSet<PhysicalId>,
    t: u64,
    res: i32,
    st: &libc::statx,
) {
    let (id, part) = ((t >> 32) as usize, t as u32);
    let Some(job) = jobs.get_mut(id).and_then(Option::as_mut) else { return };
    job.pending -= 1;
    match part {
        OPEN => {
            if res >= 0 {
                // SAFETY: a successful openat returned a new descriptor that
                // nothing else owns.
                job.own = Some(unsafe { OwnedFd::from_raw_fd(res) });
            } else {
                job.enter = match -res {
                    libc::ENOENT => Enter::Vanished,
                    libc::ELOOP => Enter::Failed(Reason::BackingSymlink),
                    _ => Enter::Failed(Reason::BackingInaccessible),
                };
            }
            job.stage = Stage::Opened;
            opened.push(id);
        }
        SELF => {
            job.self_check = Some(
                res == 0
                    && st.stx_mask & DIR_MASK == DIR_MASK
                    && FileType::from_raw_mode(u32::from(st.stx_mode)) == FileType::Directory
                    && physical(st) == job.slot.id,
            );
        }
        j => {
            if let Some(c) = job.result.classes.get_mut(j as usize) {
                *c = classify(res, st, aliases);
            }
        }
    }
    if job.pending == 0 && job.stage == Stage::Waiting {
        finished.push(id);
    }
}

fn physical(st: &libc::statx) -> PhysicalId {
    PhysicalId { dev: rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor), ino: st.stx_ino }
}

/// Classifies an entry's `statx` result exactly as the synchronous backend.
fn classify(res: i32, st: &libc::statx, aliases: &HashSet<PhysicalId>) -> Class {
    if res == -libc::ENOENT {
        return Class::Vanished;
    }
    if res < 0 || st.stx_mask & ENTRY_MASK != ENTRY_MASK {
        return Class::Fail(Reason::BackingInaccessible);
    }
    let kind = FileType::from_raw_mode(u32::from(st.stx_mode));
    match kind {
        FileType::RegularFile | FileType::Directory => {}
        FileType::Symlink => return Class::Fail(Reason::BackingSymlink),
        _ => return Class::Fail(Reason::BackingUnsupportedEntry),
    }
    let id = physical(st);
    if !aliases.is_empty() && aliases.contains(&id) {
        return Class::Fail(Reason::BackingAlias);
    }
    if kind == FileType::RegularFile {
        Class::File(st.stx_size)
    } else {
        Class::Dir(id)
    }
}

/// Runs phase 1: the calling thread as worker 0, helpers spawned once
/// there is more work than one worker keeps in flight.
fn run_phase1<'a>(sh: &ScanShared<'_, 'a>, walker: &mut Walker<'a>) {
    let threads = sh.config.thread_count();
    let workers: Vec<Worker<Arc<DirSlot<'a>>>> = (0..threads).map(|_| Worker::new_lifo()).collect();
    let stealers: Vec<Stealer<Arc<DirSlot<'a>>>> = workers.iter().map(Worker::stealer).collect();
    let mut workers = workers.into_iter();
    let mine = workers.next().expect("one worker");
    std::thread::scope(|s| {
        let mut helpers = Some(workers);
        work_loop(sh, &mine, 0, &stealers, walker, &mut |local_len| {
            if local_len > 1 {
                if let Some(rest) = helpers.take() {
                    for (k, w) in rest.enumerate() {
                        let stealers = &stealers;
                        s.spawn(move || {
                            let mut walker = Walker::new(sh.config, sh.pipes.clone());
                            work_loop(sh, &w, k + 1, stealers, &mut walker, &mut |_| {});
                        });
                    }
                }
            }
        });
    });
}

fn work_loop<'a>(
    sh: &ScanShared<'_, 'a>,
    local: &Worker<Arc<DirSlot<'a>>>,
    me: usize,
    stealers: &[Stealer<Arc<DirSlot<'a>>>],
    walker: &mut Walker<'a>,
    after_round: &mut dyn FnMut(usize),
) {
    let in_flight = sh.config.batch_dirs.max(1);
    loop {
        let cancelled = sh.cancel.load(Ordering::Relaxed);
        if !cancelled {
            while walker.live < in_flight {
                let Some(t) = local.pop().or_else(|| steal(sh, local, me, stealers)) else { break };
                walker.begin(sh, t, usize::MAX, true);
            }
        }
        walker.advance(sh);
        if walker.live == 0 {
            if cancelled || sh.outstanding.load(Ordering::Acquire) == 0 {
                return;
            }
            sh.sleepers.fetch_add(1, Ordering::AcqRel);
            let guard = lock(&sh.idle);
            let _ = sh.wake.wait_timeout(guard, Duration::from_micros(200));
            sh.sleepers.fetch_sub(1, Ordering::AcqRel);
            continue;
        }
        if walker.finished.is_empty() {
            walker.pump_some(sh.aliases);
            walker.advance(sh);
        }
        let (children, ended) = walker.finish(sh);
        // Count the new work before it becomes visible to thieves, so
        // `outstanding` never drops to zero while work exists.
        sh.outstanding.fetch_add(children.len(), Ordering::AcqRel);
        for child in children.iter().rev() {
            local.push(child.clone());
        }
        if !children.is_empty() && sh.sleepers.load(Ordering::Acquire) > 0 {
            sh.wake.notify_all();
        }
        let left = sh.outstanding.fetch_sub(ended, Ordering::AcqRel) - ended;
        if left == 0 {
            sh.wake.notify_all();
        }
        after_round(local.len());
    }
}

fn steal<'a>(
    sh: &ScanShared<'_, 'a>,
    local: &Worker<Arc<DirSlot<'a>>>,
    me: usize,
    stealers: &[Stealer<Arc<DirSlot<'a>>>],
) -> Option<Arc<DirSlot<'a>>> {
    loop {
        let mut retry = false;
        match sh.injector.steal_batch_and_pop(local) {
            crossbeam_deque::Steal::Success(t) => return Some(t),
            crossbeam_deque::Steal::Retry => retry = true,
            crossbeam_deque::Steal::Empty => {}
        }
        for (k, s) in stealers.iter().enumerate() {
            if k == me {
                continue;
            }
            match s.steal_batch_and_pop(local) {
                crossbeam_deque::Steal::Success(t) => return Some(t),
                crossbeam_deque::Steal::Retry => retry = true,
                crossbeam_deque::Steal::Empty => {}
            }
        }
        if !retry {
            return None;
        }
    }
}

/// Counts of the replay.
#[derive(Default)]
struct Tally {
    entries: u64,
    directories: u64,
    files: u64,
    bytes: u64,
    max_depth: u32,
}

type Failure = (Reason, PathBuf);

/// A directory on the replay's current chain.
struct Frame<'a> {
    slot: Arc<DirSlot<'a>>,
    result: DirResult<'a>,
    next: usize,
}

fn chain_path(root: &Path, stack: &[Frame<'_>], extra: &[&[u8]]) -> PathBuf {
    let mut p = root.to_path_buf();
    for f in stack.iter().skip(1) {
        p.push(OsStr::from_bytes(f.slot.name.as_bytes()));
    }
    for e in extra {
        p.push(OsStr::from_bytes(e));
    }
    p
}

/// Phase 2: replays the synchronous order over the results.
fn resolve<'a>(
    sh: &ScanShared<'_, 'a>,
    roots: &[ScanRoot],
    slots: &[Option<Arc<DirSlot<'a>>>],
    walker: &mut Walker<'a>,
) -> (Tally, Option<Failure>) {
    let mut t = Tally::default();
    for (root, slot) in roots.iter().zip(slots) {
        let Some(slot) = slot else { continue };
        let mut stack: Vec<Frame<'a>> = Vec::new();
        if let Err(f) = visit(sh, walker, &root.path, &mut stack, slot.clone(), &mut t) {
            return (t, Some(f));
        }
        while let Some(top) = stack.last_mut() {
            if top.next == top.result.children.len() {
                stack.pop();
                continue;
            }
            let child = top.result.children[top.next].clone();
            top.next += 1;
            if let Err(f) = visit(sh, walker, &root.path, &mut stack, child, &mut t) {
                return (t, Some(f));
            }
        }
    }
    (t, None)
}

/// Counts one directory's entries in order; pushes it on `stack` when its
/// subdirectories are to be entered.
fn visit<'a>(
    sh: &ScanShared<'_, 'a>,
    walker: &mut Walker<'a>,
    root: &Path,
    stack: &mut Vec<Frame<'a>>,
    slot: Arc<DirSlot<'a>>,
    t: &mut Tally,
) -> Result<(), Failure> {
    let limits = sh.limits;
    let mut cap = usize::try_from(limits.max_entries.saturating_sub(t.entries)).unwrap_or(usize::MAX).saturating_add(1);
    loop {
        let mut result = lock(&slot.result).take();
        if result.is_none() {
            walker.read_one(sh, &slot, cap);
            result = lock(&slot.result).take();
        }
        let result = result.unwrap_or_else(|| DirResult::empty(Enter::Failed(Reason::BackingInaccessible)));
        let dir_path = |stack: &[Frame<'_>]| {
            if slot.is_root {
                root.to_path_buf()
            } else {
                chain_path(root, stack, &[slot.name.as_bytes()])
            }
        };
        match result.enter {
            Enter::Entered => {}
            Enter::Vanished => return Ok(()),
            Enter::Failed(r) => return Err((r, dir_path(stack))),
        }
        let saved = (t.entries, t.directories, t.files, t.bytes, t.max_depth);
        let child_depth = slot.depth + 1;
        for (j, class) in result.classes.iter().enumerate() {
            let fail = |r: Reason, stack: &[Frame<'_>]| {
                let mut p = dir_path(stack);
                p.push(OsStr::from_bytes(result.name(j)));
                Err((r, p))
            };
            t.entries += 1;
            if t.entries > limits.max_entries {
                return fail(Reason::BackingScanLimit, stack);
            }
            t.max_depth = t.max_depth.max(child_depth);
            if child_depth > limits.max_depth {
                return fail(Reason::BackingScanLimit, stack);
            }
            match *class {
                Class::Vanished => t.entries -= 1,
                Class::Unstatted => return fail(Reason::BackingScanLimit, stack),
                Class::Fail(r) => return fail(r, stack),
                Class::File(size) => {
                    t.files += 1;
                    t.bytes = t.bytes.saturating_add(size);
                }
                Class::Dir(_) => t.directories += 1,
            }
        }
        if result.truncated {
            // Entries vanished: the cap was too tight. Read it again wider.
            (t.entries, t.directories, t.files, t.bytes, t.max_depth) = saved;
            cap = cap.saturating_mul(2);
            continue;
        }
        if result.read_error {
            return Err((Reason::BackingInaccessible, dir_path(stack)));
        }
        stack.push(Frame { slot, result, next: 0 });
        return Ok(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::scan_paths;

    #[test]
    fn tags_round_trip() {
        let t = tag(3, 7);
        assert_eq!(((t >> 32) as usize, t as u32), (3, 7));
        assert_eq!(tag(1, SELF) as u32, SELF);
    }

    #[test]
    fn names_split() {
        let mut r = DirResult::empty(Enter::Entered);
        for n in [&b"a\0"[..], b"bc\0", b"\xff\0"] {
            r.names.extend_from_slice(n);
            r.ends.push(r.names.len() as u32);
        }
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
        let _ = super::super::probe::probe();
        let t = tempfile::tempdir().unwrap();
        for i in 0..5 {
            std::fs::create_dir_all(t.path().join(format!("d{i}/e"))).unwrap();
            std::fs::write(t.path().join(format!("d{i}/f")), vec![0u8; i]).unwrap();
        }
        let roots = vec![t.path().to_path_buf()];
        let want = scan_paths(&SyncBackend, &roots, ScanLimits::default(), &HashSet::new());
        let got = std::thread::spawn(move || {
            if super::super::probe::tests::deny_io_uring_setup(libc::EPERM).is_err() {
                eprintln!("skipping: cannot install a seccomp filter here");
                return None;
            }
            let inputs = super::super::probe::gather();
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
