//! Step `in_use`: no process but the exempt ones (the guardian and its
//! frontends) holds a target open or mapped, and the kernel knows of no
//! holder that a descriptor table does not show.
//!
//! The kernel's answer comes first. A write lease taken and dropped at once
//! on the release's own read-only descriptor of each target
//! (`sys::open_elsewhere`) is granted only when the target has no
//! other open file description anywhere: no process has it open for reading
//! or writing, runs it or maps it, no descriptor of it is in flight over a
//! Unix socket, no loop device is backed by it. Then:
//!
//! - every lease granted (on a filesystem where that rules out a mapping,
//!   `sys::lease`): only `O_PATH` descriptors (which the lease does not
//!   count) can hold a target, and only descriptor tables are read;
//! - a lease refused: every process of the user is read — descriptors,
//!   memory maps and, since a thread may have unshared its table, every
//!   thread's own table. A holder found is named. When none is, the exempt
//!   processes' own tables are read: a target one of them holds (other than
//!   through the release's own descriptor) is explained. A target that
//!   nothing explains is open somewhere no descriptor table shows, and the
//!   release is refused;
//! - a lease that cannot be tried (leases disabled, a filesystem without
//!   them), or granted where that does not rule out a mapping (overlayfs):
//!   every view is read, every thread's own table included.
//!
//! The sweep is shared by the releases that ask at once
//! (`procfs::shared`): a release waits for the next sweep
//! that starts after its leases, which answers each release it serves as
//! its own sweep would.
//!
//! A hold found is looked at again, the whole check, over about a quarter
//! of a second before it refuses the release: a child forked at that moment
//! (by another thread of this process or of an exempt one) holds a copy of
//! its parent's descriptors until its `exec` closes them.
//!
//! This is the one place the `in_use` rule lives; a release runs it under
//! its owner's admission barrier as late as possible before the first
//! rename.
//!
//! # References
//! - [`F_SETLEASE(2const)`](https://man7.org/linux/man-pages/man2/f_setlease.2const.html)
//! - [`proc_pid_fd(5)`](https://man7.org/linux/man-pages/man5/proc_pid_fd.5.html)
//! - [`proc_pid_maps(5)`](https://man7.org/linux/man-pages/man5/proc_pid_maps.5.html)
//! - [`unix(7)`](https://man7.org/linux/man-pages/man7/unix.7.html) (`SCM_RIGHTS`)

use std::collections::HashSet;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use winx_release_kernel::identity::PhysicalId;
use winx_release_kernel::procfs::{held_by, shared_sweep, HolderScan, HowHeld, Sweep};
use winx_release_kernel::sys::{open_elsewhere, OpenElsewhere};

/// The pauses before a hold found is looked at again (2 ms doubling to
/// 128 ms: about a quarter of a second in all, paid only by a release that
/// a hold refuses).
const RETRIES: [Duration; 7] = [
    Duration::from_millis(2),
    Duration::from_millis(4),
    Duration::from_millis(8),
    Duration::from_millis(16),
    Duration::from_millis(32),
    Duration::from_millis(64),
    Duration::from_millis(128),
];

/// One target as the `in_use` step sees it: its path (for the message), its
/// identity, and the release's own read-only descriptor of it.
pub struct Held<'a> {
    /// The path the request named.
    pub path: &'a str,
    /// Its physical identity.
    pub id: PhysicalId,
    /// The release's own descriptor of it (opened read-only).
    pub file: BorrowedFd<'a>,
}

/// Why the release must stop because a target is held: `Some(detail)` when a
/// process of this user other than `exempt` holds a target open or mapped,
/// when the kernel refused a lease on a target that no descriptor table
/// explains, or when `/proc` cannot tell; `None` when nothing holds one.
///
/// `exempt` are the processes whose own descriptors never make a target
/// in use: this process is always one of them.
///
/// # References
/// - [`F_SETLEASE(2const)`](https://man7.org/linux/man-pages/man2/f_setlease.2const.html)
/// - [`proc_pid_fd(5)`](https://man7.org/linux/man-pages/man5/proc_pid_fd.5.html)
pub fn in_use(targets: &[Held<'_>], exempt: &[i32]) -> Option<String> {
    let mut held = check(targets, exempt)?;
    // A hold can last a moment only: a child forked by another thread (of
    // this process or an exempt one) keeps a copy of every descriptor until
    // its `exec` closes it, and a lazy unmount lets go of its file a moment
    // later. The whole check runs again before a hold counts.
    for pause in RETRIES {
        std::thread::sleep(pause);
        held = check(targets, exempt)?;
    }
    Some(held)
}

/// One look: the leases, the sweep, the exempt processes' own tables.
fn check(targets: &[Held<'_>], exempt: &[i32]) -> Option<String> {
    let ids: HashSet<PhysicalId> = targets.iter().map(|t| t.id).collect();
    let mut refused: Vec<&Held<'_>> = Vec::new();
    let mut unsure = false;
    for t in targets {
        match open_elsewhere(t.file) {
            OpenElsewhere::No => {}
            OpenElsewhere::Yes => refused.push(t),
            OpenElsewhere::CannotTell(_) => unsure = true,
        }
    }
    let how = Sweep { maps: unsure || !refused.is_empty(), threads: unsure || !refused.is_empty() };
    let uid = rustix::process::geteuid().as_raw();
    // One sweep serves every release that asks while another runs (a
    // group commit; it starts after this release's leases above).
    match shared_sweep(&ids, uid, exempt, how) {
        Ok(HolderScan { holder: Some(h), .. }) => {
            let path = targets.iter().find(|t| t.id == h.target).map_or("a target", |t| t.path);
            return Some(match h.how {
                HowHeld::Fd(n) => format!("{path}: process {} holds it open (descriptor {n})", h.pid),
                HowHeld::Mapped => format!("{path}: process {} has it mapped", h.pid),
                HowHeld::Uninspectable => {
                    format!("process {}'s descriptors or mappings cannot be read; it could hold {path}", h.pid)
                }
            });
        }
        Ok(_) => {}
        Err(e) => return Some(format!("cannot tell whether a target is in use: {e}")),
    }
    if refused.is_empty() {
        return None;
    }
    // A lease was refused and no other process's table shows why: what the
    // exempt processes hold themselves explains it (not through this
    // process's own descriptors of the targets, which the lease counted).
    let me = std::process::id() as i32;
    let mut exempt: Vec<i32> = exempt.to_vec();
    if !exempt.contains(&me) {
        exempt.push(me);
    }
    let own: Vec<(i32, u32)> =
        targets.iter().filter_map(|t| u32::try_from(t.file.as_raw_fd()).ok()).map(|n| (me, n)).collect();
    let asked: HashSet<PhysicalId> = refused.iter().map(|t| t.id).collect();
    let explained = held_by(&exempt, &asked, &own);
    refused.iter().find(|t| !explained.contains(&t.id)).map(|t| {
        format!(
            "{}: open somewhere no descriptor table shows (the kernel refused a write lease on it: a descriptor \
             in flight over a Unix socket, a loop device backed by it, or a process this user cannot inspect)",
            t.path
        )
    })
}
