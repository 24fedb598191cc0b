//! Which process holds a set of files open or mapped: the sweep of every
//! process of the user (one view of a process is read by `views`, what the
//! exempt processes hold themselves by `exempt`).
//!
//! For every process of the caller's user except the exempt ones, each
//! `/proc/<pid>/fd/<n>` link is `statx`ed (following the magic link to the
//! open file itself, so a renamed or unlinked file is still recognised)
//! and each mapping's device and inode columns of `/proc/<pid>/maps` are
//! compared with the targets' physical identities.
//!
//! A prefilter spares most of that work: when the caller gives its own
//! read-only descriptor of every target ([`find_holder_of`]), the kernel is
//! asked first, through a write lease taken and dropped at once, whether
//! any other open file description of a target exists anywhere. A mapping
//! keeps one alive, so when none exists no process maps a target or has it
//! open for reading or writing, and only the descriptor tables are read
//! (for `O_PATH` descriptors, which the lease does not count); the memory
//! maps, about two thirds of the cost, are skipped. When a target is open
//! elsewhere, or the lease cannot be tried (leases disabled, a filesystem
//! without them), every view is read as before.
//!
//! A zombie leader (its main thread called `pthread_exit`) has no
//! descriptor table or memory map of its own any more: its live threads'
//! views (`/proc/<pid>/task/<tid>/fd`, `.../maps`) are read instead. A
//! process of the user whose views cannot be read, a process whose owner
//! cannot be read, and a descriptor whose open file cannot be identified
//! count as holding a target ([`HowHeld::Uninspectable`]): doubt is "in
//! use". A process that
//! holds a capability the caller lacks (the sandbox's init) is a more
//! privileged principal, judged like another user's process.
//!
//! A non-dumpable process of the user has root-owned views (and, on some
//! kernels, a root-owned `/proc/<pid>`, whose owner is then read from
//! `Status: Uid`): they are unreadable to a guardian that is not root, so
//! the process counts as holding a target. So are a zombie's (it has no
//! memory map any more), but a process whose every thread is a zombie has
//! exited and holds nothing: it is passed over.
//!
//! A thread that unshared its descriptor table (`unshare(CLONE_FILES)`)
//! has a table of its own, which `/proc/<pid>/fd` does not show: a sweep
//! with [`Sweep::threads`] reads every thread's `/proc/<pid>/task/<tid>/fd`
//! too (the release's `in_use` step asks for it whenever the kernel
//! refused a lease, the one case where such a table can matter). On
//! stacked filesystems (overlayfs) a mapping shows the underlying file's
//! device, which may differ from the device the target was identified on.
//!
//! # References
//! - [`proc_pid_fd(5)`](https://man7.org/linux/man-pages/man5/proc_pid_fd.5.html)
//! - [`proc_pid_maps(5)`](https://man7.org/linux/man-pages/man5/proc_pid_maps.5.html)
//! - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)
//! - [`F_SETLEASE(2const)`](https://man7.org/linux/man-pages/man2/f_setlease.2const.html)

use std::collections::HashSet;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::exited::has_exited;
pub(crate) use super::exited::unexeced_fork_of;
use super::table::{list_pids, owner_of};
use super::views::{holders_in, threads_of, Wanted};
pub use super::views::{Holder, HowHeld};
use super::{is_gone, open_proc, ProcError};
use crate::identity::PhysicalId;

/// The result of [`find_holder`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HolderScan {
    /// The first holder found, if any.
    pub holder: Option<Holder>,
    /// Processes of the user that were looked at.
    pub inspected: usize,
    /// Processes of the user whose descriptors could not be read
    /// (non-dumpable); skipped.
    pub uninspectable: usize,
    /// Whether memory maps were read: `false` when the kernel said that no
    /// target is open or mapped anywhere else (see [`find_holder_of`]).
    pub maps_read: bool,
    /// Kernel threads that an earlier sweep found and that were passed
    /// over, unread (see the module's docs).
    pub kernel_threads_passed: usize,
}

/// Finds a process of `uid` other than `exempt` that holds one of
/// `targets` open or mapped, reading every process's descriptors and
/// memory map.
///
/// Returns at the first holder. Processes that end while they are looked at
/// are skipped. Fails when `/proc` cannot be listed.
///
/// # References
/// - [`proc_pid_fd(5)`](https://man7.org/linux/man-pages/man5/proc_pid_fd.5.html)
/// - [`proc_pid_maps(5)`](https://man7.org/linux/man-pages/man5/proc_pid_maps.5.html)
pub fn find_holder(targets: &HashSet<PhysicalId>, uid: u32, exempt: &[i32]) -> Result<HolderScan, ProcError> {
    sweep(targets, uid, exempt, Sweep { maps: true, threads: false })
}

/// What a [`sweep`] reads of each process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sweep {
    /// Its memory map (`/proc/<pid>/maps`) besides its descriptors.
    pub maps: bool,
    /// Every thread's own descriptor table (`/proc/<pid>/task/<tid>/fd`),
    /// for threads that unshared theirs.
    pub threads: bool,
}

/// Like [`find_holder`], but first asks the kernel whether any target is
/// open or mapped anywhere else, through `files`: the caller's one
/// read-only descriptor of each target (see the module's docs). When none
/// is, memory maps are not read.
///
/// Caveats: a target that the caller holds through a second open file
/// description, or that `files` does not cover, makes every process's
/// descriptors and memory map be read (the answer is the same, only
/// slower; threads' own tables are read only by [`sweep`] with
/// [`Sweep::threads`]).
///
/// # References
/// - [`F_SETLEASE(2const)`](https://man7.org/linux/man-pages/man2/f_setlease.2const.html)
/// - [`proc_pid_fd(5)`](https://man7.org/linux/man-pages/man5/proc_pid_fd.5.html)
/// - [`proc_pid_maps(5)`](https://man7.org/linux/man-pages/man5/proc_pid_maps.5.html)
pub fn find_holder_of(
    targets: &HashSet<PhysicalId>,
    files: &[BorrowedFd<'_>],
    uid: u32,
    exempt: &[i32],
) -> Result<HolderScan, ProcError> {
    sweep(targets, uid, exempt, Sweep { maps: !closed_elsewhere(targets, files), threads: false })
}

/// Whether `files` covers every target and the kernel granted a lease on
/// each: no target has an open file description besides the caller's.
fn closed_elsewhere(targets: &HashSet<PhysicalId>, files: &[BorrowedFd<'_>]) -> bool {
    let mut covered = HashSet::with_capacity(files.len());
    for fd in files {
        let Ok(st) = rustix::fs::fstat(fd) else { return false };
        covered.insert(PhysicalId { dev: st.st_dev, ino: st.st_ino });
        if crate::sys::open_elsewhere(*fd) != crate::sys::OpenElsewhere::No {
            return false;
        }
    }
    targets.iter().all(|t| covered.contains(t))
}

/// The number of processes to look at from which a sweep is split across
/// threads. Below it, starting a thread (tens of microseconds) costs about
/// what the second half of the sweep would save.
const SPLIT_FROM: usize = 64;

/// Finds a process of `uid` other than `exempt` that holds one of
/// `targets` open or mapped, reading what `how` says of each process.
///
/// Returns at the first holder. Processes that end while they are looked
/// at are skipped. Fails when `/proc` cannot be listed.
///
/// # References
/// - [`proc_pid_fd(5)`](https://man7.org/linux/man-pages/man5/proc_pid_fd.5.html)
/// - [`proc_pid_maps(5)`](https://man7.org/linux/man-pages/man5/proc_pid_maps.5.html)
/// - [`proc_pid_task(5)`](https://man7.org/linux/man-pages/man5/proc_pid_task.5.html)
pub fn sweep(targets: &HashSet<PhysicalId>, uid: u32, exempt: &[i32], how: Sweep) -> Result<HolderScan, ProcError> {
    let first = std::sync::Mutex::new(None);
    let hit = |proc: &OwnedFd, h: Holder| {
        // A fork of an exempt process that has not called `exec` yet holds
        // its parent's descriptors, not its own.
        if h.how != HowHeld::Uninspectable && unexeced_fork_of(proc, h.pid, exempt) {
            return false;
        }
        crate::sys::lock(&first).get_or_insert(h);
        true
    };
    let mut scan = sweep_with(targets, uid, exempt, how, &hit)?;
    scan.holder = first.into_inner().unwrap_or_else(|e| e.into_inner());
    Ok(scan)
}

/// What a sweep found holding a target: called with each holder (a
/// process's descriptor or mapping of a target, or a process that cannot
/// be read, with any target), from any of the sweep's threads, until it
/// returns `true`. It decides what a hold counts for (the exempt processes'
/// unexec'd forks are not passed over by the sweep itself).
pub(crate) type Hit<'a> = dyn Fn(&OwnedFd, Holder) -> bool + Sync + 'a;

/// Reads what `how` says of every process of `uid` but `exempt` and calls
/// `hit` with what holds one of `targets`, until `hit` returns `true` (see
/// [`Hit`]). The scan's [`HolderScan::holder`] is left `None`: the holders
/// went to `hit`.
///
/// Processes that end while they are looked at are skipped. Fails when
/// `/proc` cannot be listed.
pub(crate) fn sweep_with(
    targets: &HashSet<PhysicalId>,
    uid: u32,
    exempt: &[i32],
    how: Sweep,
    hit: &Hit<'_>,
) -> Result<HolderScan, ProcError> {
    let Sweep { maps, threads } = how;
    let proc = open_proc()?;
    let listed = list_pids(&proc)?;
    if targets.is_empty() {
        return Ok(HolderScan::default());
    }
    // Kernel threads that an earlier sweep found, still alive: passed over.
    // (Only where this `/proc` is of this process's PID namespace.)
    let ours = super::kthreads::proc_is_ours(&proc);
    let known = if ours { super::kthreads::alive() } else { HashSet::new() };
    let mut passed = 0;
    let pids: Vec<i32> = listed
        .into_iter()
        .filter(|p| !exempt.contains(p))
        .filter(|p| {
            let known = known.contains(p);
            passed += usize::from(known);
            !known
        })
        .collect();
    // Both halves at once: the cost is system calls into /proc, and the
    // machine's cores can make them side by side; a short list is not worth
    // starting a thread for.
    let workers = if pids.len() < SPLIT_FROM { 1 } else { crate::sys::cores().clamp(1, 4) };
    let (stop, next) = (AtomicBool::new(false), AtomicUsize::new(0));
    let look = Look { targets, uid, maps, threads, stop: &stop, remember: ours, hit, pids: &pids, next: &next };
    let results: Vec<Result<HolderScan, ProcError>> = std::thread::scope(|s| {
        // The workers take the processes a few at a time from one list, so
        // none idles while another still has many (the first pids are the
        // system's daemons, with the most descriptors); a worker no thread
        // can be had for (the user's task limit) leaves its share to the
        // others, this thread among them.
        let handles: Vec<_> = (1..workers)
            .filter_map(|_| {
                let (proc, look) = (&proc, &look);
                std::thread::Builder::new().spawn_scoped(s, move || scan_part(proc, look)).ok()
            })
            .collect();
        let mut results = vec![scan_part(&proc, &look)];
        for h in handles {
            results.push(h.join().unwrap_or_else(|_| {
                Err(ProcError::Unavailable(std::io::Error::other("a /proc scan worker panicked")))
            }));
        }
        results
    });
    let mut total = HolderScan { maps_read: maps, kernel_threads_passed: passed, ..HolderScan::default() };
    for r in results {
        let r = r?;
        total.inspected += r.inspected;
        total.uninspectable += r.uninspectable;
    }
    Ok(total)
}

/// What every worker of one scan looks for, and how.
struct Look<'a> {
    targets: &'a HashSet<PhysicalId>,
    uid: u32,
    /// Whether memory maps are read.
    maps: bool,
    /// Whether every thread's descriptor table is read too.
    threads: bool,
    /// Set by the worker whose `hit` said to stop.
    stop: &'a AtomicBool,
    /// Whether kernel threads found are remembered (`/proc` is of this
    /// process's PID namespace).
    remember: bool,
    /// Told of each holder.
    hit: &'a Hit<'a>,
    /// The processes to look at, and the index of the next one to take.
    pids: &'a [i32],
    next: &'a AtomicUsize,
}

/// Processes a worker takes from the shared list at a time.
const TAKE: usize = 8;

/// Looks through the processes of `look.pids` it takes, a few at a time,
/// until none is left, `look.hit` says to stop or `stop` is set by another
/// worker.
fn scan_part(proc: &OwnedFd, look: &Look<'_>) -> Result<HolderScan, ProcError> {
    let Look { targets, uid, stop, .. } = *look;
    let wanted = Wanted::new(targets);
    let mut scan = HolderScan::default();
    let mut buf = Vec::new();
    let mut hit = |h: Holder| {
        let done = (look.hit)(proc, h);
        if done {
            stop.store(true, Ordering::Relaxed);
        }
        done
    };
    let taken = std::iter::from_fn(|| {
        let start = look.next.fetch_add(TAKE, Ordering::Relaxed);
        look.pids.get(start..(start + TAKE).min(look.pids.len()))
    });
    for pid in taken.flatten().copied() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        match owner_of(proc, pid) {
            Ok(Some(owner)) if owner == uid => {}
            // A non-dumpable process shows root as the owner of its
            // `/proc/<pid>`: the real uid of its `status` tells whether it
            // is the user's (its views are then unreadable: in use).
            Ok(Some(0)) if uid != 0 && super::real_uid(proc, pid) == Some(uid) => {}
            // Another user's process, or gone.
            Ok(_) => continue,
            // Whose it is cannot be read: it could be the user's and hold
            // a target (doubt is "in use").
            Err(_) => {
                scan.uninspectable += 1;
                if hit(Holder { pid, how: HowHeld::Uninspectable, target: any_of(targets) }) {
                    return Ok(scan);
                }
                continue;
            }
        }
        scan.inspected += 1;
        // The process's own view, then, for a zombie leader (its main
        // thread called `pthread_exit`: its own descriptor table and memory
        // map are gone), each of its live threads' views.
        // (An empty descriptor table is a kernel thread, a process that
        // closed every descriptor, or such a zombie: only then is `stat`
        // read, and a kernel thread is remembered, to be passed over by the
        // next sweeps.)
        let mut views = vec![format!("{pid}")];
        if look.threads {
            // Threads share the memory map: their views are descriptor
            // tables only (`holders_in` reads maps of the first view alone).
            let others = threads_of(proc, pid).into_iter().filter(|t| *t != pid);
            views.extend(others.map(|t| format!("{pid}/task/{t}")));
        }
        let mut i = 0;
        while i < views.len() {
            let view = &views[i];
            i += 1;
            let maps = look.maps && (i == 1 || !look.threads);
            match holders_in(proc, pid, view, &wanted, maps, &mut buf, &mut hit) {
                Ok((true, _)) => return Ok(scan),
                Ok((false, 0)) if i == 1 => {
                    let mut stat = None;
                    let mut read = || {
                        stat = super::stat::read_stat(proc, pid).ok().flatten();
                        stat.is_some_and(|st| st.is_kernel_thread())
                    };
                    if look.remember {
                        super::kthreads::remember_if(pid, read);
                    } else {
                        read();
                    }
                    if matches!(stat, Some(st) if st.is_zombie()) && !look.threads {
                        let threads = threads_of(proc, pid).into_iter().filter(|t| *t != pid);
                        views.extend(threads.map(|t| format!("{pid}/task/{t}")));
                    }
                }
                Ok((false, _)) => {}
                Err(e) if is_gone(e) => break,
                // A process of this user whose descriptors or mappings
                // cannot be read (an LSM, a race with a credential change):
                // it could hold a target, so it counts as holding one.
                // A process that has exited holds nothing: every thread
                // of it dropped its descriptor table and memory map before
                // it became a zombie, whose views are root's (no memory
                // map: `task_dump_owner`) until its parent reaps it.
                Err(rustix::io::Errno::ACCESS) | Err(rustix::io::Errno::PERM) if has_exited(proc, pid) => break,
                Err(rustix::io::Errno::ACCESS) | Err(rustix::io::Errno::PERM) => {
                    scan.uninspectable += 1;
                    if super::more_privileged(proc, pid) {
                        // Not the user's to judge: like another user's.
                        break;
                    }
                    if hit(Holder { pid, how: HowHeld::Uninspectable, target: any_of(targets) }) {
                        return Ok(scan);
                    }
                    break;
                }
                Err(e) => return Err(ProcError::Unreadable { pid, file: "fd", error: e.into() }),
            }
        }
    }
    Ok(scan)
}

/// One of `targets`, for a holder that could hold any of them.
fn any_of(targets: &HashSet<PhysicalId>) -> PhysicalId {
    targets.iter().next().copied().unwrap_or(PhysicalId { dev: 0, ino: 0 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::{Mode, OFlags};
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;

    fn id_of(p: &std::path::Path) -> PhysicalId {
        let m = std::fs::metadata(p).unwrap();
        PhysicalId { dev: m.dev(), ino: m.ino() }
    }

    #[test]
    fn finds_a_child_holding_a_file_and_exempts_this_process() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("held");
        std::fs::write(&p, b"x").unwrap();
        let targets: HashSet<_> = [id_of(&p)].into();
        let uid = rustix::process::geteuid().as_raw();
        let me = std::process::id() as i32;
        // This process holds it open itself: exempt.
        let _mine = std::fs::File::open(&p).unwrap();
        let scan = find_holder(&targets, uid, &[me]).unwrap();
        assert_eq!(scan.holder, None, "{scan:?}");
        // A child holding it open on stdin is found.
        let mut child =
            std::process::Command::new("sleep").arg("5").stdin(std::fs::File::open(&p).unwrap()).spawn().unwrap();
        let scan = find_holder(&targets, uid, &[me]).unwrap();
        let h = scan.holder.expect("the child holds it");
        assert_eq!((h.pid, h.how), (child.id() as i32, HowHeld::Fd(0)));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(find_holder(&targets, uid, &[me]).unwrap().holder, None);
    }

    #[test]
    fn a_second_sweep_passes_over_the_kernel_threads_the_first_found() {
        let uid = rustix::process::geteuid().as_raw();
        let proc = open_proc().unwrap();
        let kernel_threads = list_pids(&proc)
            .unwrap()
            .into_iter()
            .filter(|p| matches!(super::super::stat::read_stat(&proc, *p), Ok(Some(st)) if st.is_kernel_thread()))
            .count();
        if uid != 0 || kernel_threads == 0 {
            eprintln!("skipped: needs root and visible kernel threads (uid {uid}, {kernel_threads} kernel threads)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("held");
        std::fs::write(&p, b"x").unwrap();
        let targets: HashSet<_> = [id_of(&p)].into();
        let me = std::process::id() as i32;
        let _ = find_holder(&targets, uid, &[me]).unwrap();
        let scan = find_holder(&targets, uid, &[me]).unwrap();
        assert!(scan.kernel_threads_passed > 0, "{scan:?} ({kernel_threads} kernel threads)");
        // Passing them over changes no answer: a holder is still found.
        let mut child =
            std::process::Command::new("sleep").arg("5").stdin(std::fs::File::open(&p).unwrap()).spawn().unwrap();
        let scan = find_holder(&targets, uid, &[me]).unwrap();
        assert_eq!(scan.holder.map(|h| h.pid), Some(child.id() as i32), "{scan:?}");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn with_the_callers_descriptors_an_o_path_holder_is_found_without_reading_maps() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("held");
        std::fs::write(&p, b"x").unwrap();
        let targets: HashSet<_> = [id_of(&p)].into();
        let mine = std::fs::File::open(&p).unwrap();
        let files = [mine.as_fd()];
        let uid = rustix::process::geteuid().as_raw();
        let me = std::process::id() as i32;
        let scan = find_holder_of(&targets, &files, uid, &[me]).unwrap();
        assert_eq!((scan.holder, scan.maps_read), (None, false), "{scan:?}");
        // A child whose stdin is an O_PATH descriptor of the target: the
        // lease does not count it, the descriptor table shows it.
        let path_fd: OwnedFd = rustix::fs::open(&p, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()).unwrap();
        let mut child = std::process::Command::new("sleep").arg("30").stdin(path_fd).spawn().unwrap();
        let scan = find_holder_of(&targets, &files, uid, &[me]).unwrap();
        assert!(!scan.maps_read);
        let h = scan.holder.expect("the O_PATH holder is found");
        assert_eq!((h.pid, h.how), (child.id() as i32, HowHeld::Fd(0)));
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn with_the_callers_descriptors_a_mapping_without_a_descriptor_is_found() {
        // The target is a copy of `sleep` that a child runs: the program
        // image is mapped, and no descriptor of it is open.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("helper-sleep");
        std::fs::copy("/bin/sleep", &p).unwrap();
        let targets: HashSet<_> = [id_of(&p)].into();
        let mine = std::fs::File::open(&p).unwrap();
        let files = [mine.as_fd()];
        let uid = rustix::process::geteuid().as_raw();
        let me = std::process::id() as i32;
        // Another test thread's fork may briefly hold the copy's write
        // descriptor (ETXTBSY): try again.
        let mut child = (0..50)
            .find_map(|_| match std::process::Command::new(&p).arg("30").spawn() {
                Ok(c) => Some(c),
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    None
                }
                Err(e) => panic!("{e}"),
            })
            .expect("the copy runs");
        // Until its image is mapped, the child runs the test binary's image.
        let scan = (0..100)
            .map(|_| {
                std::thread::sleep(std::time::Duration::from_millis(10));
                find_holder_of(&targets, &files, uid, &[me]).unwrap()
            })
            .find(|s| s.holder.is_some())
            .expect("the running copy is found");
        assert!(scan.maps_read, "the lease was refused: maps are read");
        let h = scan.holder.unwrap();
        assert_eq!((h.pid, h.how), (child.id() as i32, HowHeld::Mapped));
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// A process whose owner cannot be read (here every read of a `/proc`
    /// stand-in that is not a directory fails, `ENOTDIR`) could be the
    /// user's and hold a target: the sweep counts it as an uninspectable
    /// holder, not as another user's process.
    #[test]
    fn a_process_whose_owner_cannot_be_read_could_hold_a_target() {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        let proc: OwnedFd = tmp.reopen().unwrap().into();
        let targets: HashSet<_> = [PhysicalId { dev: 1, ino: 2 }].into();
        let found = std::sync::Mutex::new(Vec::new());
        let hit = |_: &OwnedFd, h: Holder| {
            found.lock().unwrap().push(h);
            true
        };
        let (stop, next) = (AtomicBool::new(false), AtomicUsize::new(0));
        let look = Look {
            targets: &targets,
            uid: rustix::process::geteuid().as_raw(),
            maps: true,
            threads: false,
            stop: &stop,
            remember: false,
            hit: &hit,
            pids: &[42],
            next: &next,
        };
        let scan = scan_part(&proc, &look).unwrap();
        assert_eq!(scan.uninspectable, 1, "{scan:?}");
        let found = found.into_inner().unwrap();
        assert_eq!(found, [Holder { pid: 42, how: HowHeld::Uninspectable, target: PhysicalId { dev: 1, ino: 2 } }]);
    }
}
