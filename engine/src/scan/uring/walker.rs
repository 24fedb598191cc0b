//! Phase 1 of the io_uring backend: worker threads read directories in
//! parallel and record each one's result in its slot.
//!
//! A worker's [`Walker`] streams directories: new ones are opened and read
//! while earlier ones' `statx`es are still in flight on its ring. The
//! threads and their work queues are `workers.rs`.

use std::collections::HashSet;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rustix::fs::{FileType, RawDir};

use super::{DirResult, DirSlot, Enter, ScanShared, DIRENT_BUF, DIR_FLAGS, DIR_MASK, ENTRY_MASK};
use crate::error::Reason;
use crate::scan::lean::{from_dirent, Lean};
use crate::scan::tally::{classify_statx, physical, Class, Seen};
use winx_release_kernel::identity::PhysicalId;
use winx_release_kernel::sys::lock;
use winx_release_kernel::uring::owned::{Done, Name, Ops};
use winx_release_kernel::uring::ring::Shared;

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
struct Job {
    slot: Arc<DirSlot>,
    /// A clone of the slot's handle, held while the job lives.
    handle: Option<Arc<OwnedFd>>,
    /// The directory's own descriptor, for a non-root.
    own: Option<Arc<OwnedFd>>,
    enter: Enter,
    self_check: Option<bool>,
    result: DirResult,
    /// Each name's `d_type` and `d_ino`, for a lean read.
    dirents: Vec<(FileType, u64)>,
    /// Its operations in flight.
    pending: usize,
    stage: Stage,
    cap: usize,
    cancellable: bool,
    /// Reading stopped because the scan was cancelled: record nothing.
    abandoned: bool,
}

impl Job {
    /// The directory's descriptor, once entered.
    fn dir(&self) -> Option<&Arc<OwnedFd>> {
        match (&self.own, self.slot.is_root) {
            (Some(fd), _) => Some(fd),
            (None, true) => self.handle.as_ref(),
            (None, false) => None,
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

/// A worker's reading machinery: its operations (ring), its getdents
/// buffer, and the directories it has in flight.
pub(super) struct Walker {
    ops: Ops,
    dirents: Vec<MaybeUninit<u8>>,
    async_close: bool,
    jobs: Vec<Option<Job>>,
    free: Vec<usize>,
    /// Jobs whose `openat` completed, to be read.
    opened: Vec<usize>,
    /// Jobs with nothing left in flight, to be recorded.
    pub(super) finished: Vec<usize>,
    /// Jobs begun and not yet recorded.
    pub(super) live: usize,
    wait_divisor: usize,
    /// Which directories may be read from getdents64 alone.
    lean: Lean,
}

impl Walker {
    pub(super) fn new(sh: &ScanShared<'_>, shared: Arc<Shared>) -> Walker {
        let config = sh.config;
        let caps = if sh.syscalls { None } else { winx_release_kernel::uring::probe().ok() };
        let ops = if sh.syscalls { Ops::synchronous(&config.ring, shared) } else { Ops::new(&config.ring, shared) };
        Walker {
            ops,
            lean: Lean::new(sh.mounts.clone()),
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
            self.ops.close(fd);
        } else {
            drop(fd);
        }
    }

    /// Closes a shared directory descriptor if this was its last holder.
    fn release(&mut self, fd: Arc<OwnedFd>, aliases: &HashSet<PhysicalId>) {
        if let Ok(fd) = Arc::try_unwrap(fd) {
            self.close(fd, aliases);
        }
    }

    /// Waits for room in the pipeline, handling what completes meanwhile.
    fn make_room(&mut self, aliases: &HashSet<PhysicalId>) {
        if !self.ops.has_room() {
            let (jobs, opened, finished) = (&mut self.jobs, &mut self.opened, &mut self.finished);
            self.ops.make_room(&mut |t, done| on_completion(jobs, opened, finished, aliases, t, done));
        }
    }

    /// Submits what is queued and handles at least `want` completions
    /// (fewer only if fewer are in flight).
    fn pump(&mut self, aliases: &HashSet<PhysicalId>, want: usize) {
        let (jobs, opened, finished) = (&mut self.jobs, &mut self.opened, &mut self.finished);
        self.ops.reap(want, &mut |t, done| on_completion(jobs, opened, finished, aliases, t, done));
    }

    /// Handles a fraction of what is in flight (see
    /// [`winx_release_kernel::uring::RingConfig::wait_divisor`]).
    pub(super) fn pump_some(&mut self, aliases: &HashSet<PhysicalId>) {
        let want = (self.ops.outstanding() / self.wait_divisor).max(1);
        self.pump(aliases, want);
    }

    /// Starts reading the directory of `slot`, keeping at most `cap` names.
    pub(super) fn begin(&mut self, sh: &ScanShared<'_>, slot: Arc<DirSlot>, cap: usize, cancellable: bool) {
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
            dirents: Vec::new(),
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
        let parent = job.handle.clone().expect("entered");
        let name = Name::In(job.slot.names.clone(), job.slot.start);
        if self.ops.openat(&parent, name, DIR_FLAGS, tag(id, OPEN)).is_ok() {
            job.stage = Stage::Opening;
            job.pending = 1;
        } else {
            job.enter = Enter::Failed(Reason::BackingInaccessible);
            self.opened.push(id);
        }
    }

    /// Reads every opened directory and queues its `statx`es.
    pub(super) fn advance(&mut self, sh: &ScanShared<'_>) {
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
    fn read(&mut self, sh: &ScanShared<'_>, id: usize) {
        let Some(dir) = self.jobs[id].as_ref().expect("job").dir().cloned() else {
            self.jobs[id].as_mut().expect("job").enter = Enter::Failed(Reason::BackingInaccessible);
            return;
        };
        let is_root = self.jobs[id].as_ref().expect("job").slot.is_root;
        if !is_root {
            self.make_room(sh.aliases);
            let queued = self.ops.statx(&dir, Name::Empty, libc::AT_EMPTY_PATH, DIR_MASK, tag(id, SELF));
            let job = self.jobs[id].as_mut().expect("job");
            match queued {
                Ok(()) => job.pending += 1,
                Err(_) => job.self_check = Some(false),
            }
        }
        let job = self.jobs[id].as_mut().expect("job");
        let depth_full = job.slot.depth >= sh.limits.max_depth;
        let cap = if depth_full { 1 } else { job.cap };
        if !read_names(sh, job, &dir, &mut self.dirents, cap) {
            job.abandoned = true;
            return;
        }
        let n = job.result.ends.len();
        job.result.classes = vec![Class::Unstatted; n];
        if depth_full {
            return;
        }
        // Lean: entries classified from getdents64 where it can be trusted.
        let trusted = match (&job.slot, sh.sizes) {
            (slot, false) if slot.known && self.lean.trusts(dir.as_fd(), slot.id) => Some(slot.id.dev),
            _ => None,
        };
        let names = job.result.names.clone();
        for j in 0..n {
            let job = self.jobs[id].as_mut().expect("job");
            if let Some(dev) = trusted {
                let (kind, ino) = job.dirents[j];
                if let Some(c) = from_dirent(kind, ino, dev, sh.aliases) {
                    job.result.classes[j] = c;
                    continue;
                }
            }
            let start = job.result.start(j);
            self.make_room(sh.aliases);
            let queued = self.ops.statx(
                &dir,
                Name::In(names.clone(), start),
                libc::AT_SYMLINK_NOFOLLOW,
                ENTRY_MASK,
                tag(id, j as u32),
            );
            let job = self.jobs[id].as_mut().expect("job");
            match queued {
                Ok(()) => job.pending += 1,
                Err(_) => job.result.classes[j] = Class::Fail(Reason::BackingInaccessible),
            }
        }
    }

    /// Records every finished job's result in its slot. Returns the new
    /// subdirectories (in order) and how many jobs ended.
    pub(super) fn finish(&mut self, sh: &ScanShared<'_>) -> (Vec<Arc<DirSlot>>, usize) {
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

    fn record(&mut self, sh: &ScanShared<'_>, job: Job, children: &mut Vec<Arc<DirSlot>>) {
        let Job { slot, handle, mut own, enter, self_check, mut result, abandoned, .. } = job;
        if abandoned {
            if let Some(fd) = own {
                self.release(fd, sh.aliases);
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
                (false, false) => own.take(),
            };
            if let Some(parent) = parent {
                result.children = child_ids
                    .into_iter()
                    .map(|(j, id)| {
                        let start = result.start(j);
                        Arc::new(DirSlot {
                            names: result.names.clone(),
                            start,
                            end: result.ends[j] as usize - 1,
                            id,
                            known: true,
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
            self.release(fd, sh.aliases);
        }
        if offends {
            sh.cancel.store(true, Ordering::Relaxed);
        }
        let truncated = result.truncated;
        *lock(&slot.result) = Some(result);
        if !truncated && !slot.is_root {
            let kept = lock(&slot.handle).take();
            drop(kept);
            if let Some(parent) = handle {
                self.release(parent, sh.aliases);
            }
        }
    }

    /// Reads one directory to the end (phase 2): never cancelled.
    pub(super) fn read_one(&mut self, sh: &ScanShared<'_>, slot: &Arc<DirSlot>, cap: usize) {
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

impl Drop for Walker {
    fn drop(&mut self) {
        // Deliver what is left (asynchronous closes, opens of abandoned
        // jobs) before the jobs go.
        let (jobs, opened, finished) = (&mut self.jobs, &mut self.opened, &mut self.finished);
        let none = HashSet::new();
        self.ops.drain(&mut |t, done| on_completion(jobs, opened, finished, &none, t, done));
    }
}

/// Reads the names of `job`'s directory `dir`, at most `cap`. False when
/// the scan was cancelled meanwhile and the job is cancellable.
fn read_names(
    sh: &ScanShared<'_>,
    job: &mut Job,
    dir: &Arc<OwnedFd>,
    dirents: &mut [MaybeUninit<u8>],
    cap: usize,
) -> bool {
    let dir = dir.as_fd();
    if job.slot.read_before.swap(true, Ordering::Relaxed) && job.slot.is_root {
        // Phase 1 read part of it; read it again from the start.
        if rustix::fs::seek(dir, rustix::fs::SeekFrom::Start(0)).is_err() {
            job.result.read_error = true;
            return true;
        }
    }
    let mut names = Vec::new();
    let mut iter = RawDir::new(dir, dirents);
    let mut since_check = 0u64;
    let r = &mut job.result;
    let mut go_on = true;
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
        names.extend_from_slice(name);
        r.ends.push(u32::try_from(names.len()).unwrap_or(u32::MAX));
        job.dirents.push((entry.file_type(), entry.ino()));
        since_check += 1;
        if since_check == 256 {
            if note_seen(sh, since_check) && job.cancellable {
                go_on = false;
                break;
            }
            since_check = 0;
        }
    }
    r.names = Arc::new(names);
    go_on && !(note_seen(sh, since_check) && job.cancellable)
}

/// Counts names read; true when the scan is (now) cancelled.
fn note_seen(sh: &ScanShared<'_>, n: u64) -> bool {
    let seen = sh.seen.fetch_add(n, Ordering::Relaxed) + n;
    if seen > sh.limits.max_entries {
        sh.cancel.store(true, Ordering::Relaxed);
    }
    sh.cancel.load(Ordering::Relaxed)
}

/// Handles one completion.
fn on_completion(
    jobs: &mut [Option<Job>],
    opened: &mut Vec<usize>,
    finished: &mut Vec<usize>,
    aliases: &HashSet<PhysicalId>,
    t: u64,
    done: Done<'_>,
) {
    let (id, part) = ((t >> 32) as usize, t as u32);
    let Some(job) = jobs.get_mut(id).and_then(Option::as_mut) else { return };
    job.pending -= 1;
    match (part, done) {
        (OPEN, Done::Opened(res)) => {
            match res {
                Ok(fd) => job.own = Some(Arc::new(fd)),
                Err(e) => {
                    job.enter = match e {
                        libc::ENOENT => Enter::Vanished,
                        libc::ELOOP => Enter::Failed(Reason::BackingSymlink),
                        _ => Enter::Failed(Reason::BackingInaccessible),
                    }
                }
            }
            job.stage = Stage::Opened;
            opened.push(id);
        }
        (SELF, Done::Statx(res)) => {
            job.self_check = Some(res.is_ok_and(|st| {
                st.stx_mask & DIR_MASK == DIR_MASK
                    && FileType::from_raw_mode(u32::from(st.stx_mode)) == FileType::Directory
                    && statx_id(st) == job.slot.id
            }));
        }
        (j, Done::Statx(res)) => {
            if let Some(c) = job.result.classes.get_mut(j as usize) {
                let seen = res.map(|st| Seen {
                    complete: st.stx_mask & ENTRY_MASK == ENTRY_MASK,
                    mode: st.stx_mode,
                    id: statx_id(st),
                    size: st.stx_size,
                });
                *c = classify_statx(seen, true, aliases);
            }
        }
        (_, Done::Opened(_)) => {}
    }
    if job.pending == 0 && job.stage == Stage::Waiting {
        finished.push(id);
    }
}

fn statx_id(st: &libc::statx) -> PhysicalId {
    physical(st.stx_dev_major, st.stx_dev_minor, st.stx_ino)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip() {
        let t = tag(3, 7);
        assert_eq!(((t >> 32) as usize, t as u32), (3, 7));
        assert_eq!(tag(1, SELF) as u32, SELF);
    }
}
