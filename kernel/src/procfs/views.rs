//! One process's or thread's views in `/proc`, as the holder sweep reads
//! them: its descriptor table (`/proc/<view>/fd`), its memory map
//! (`/proc/<view>/maps`) and its threads (`/proc/<pid>/task`), where a view
//! is a process (`<pid>`) or one of its threads (`<pid>/task/<tid>`: a
//! thread that unshared its descriptor table has a table of its own).
//!
//! # References
//! - [`proc_pid_fd(5)`](https://man7.org/linux/man-pages/man5/proc_pid_fd.5.html)
//! - [`proc_pid_maps(5)`](https://man7.org/linux/man-pages/man5/proc_pid_maps.5.html)
//! - [`proc_pid_task(5)`](https://man7.org/linux/man-pages/man5/proc_pid_task.5.html)
//! - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)

use std::collections::HashSet;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags, StatxFlags};

use super::{is_gone, read_file};
use crate::identity::PhysicalId;

/// How a holder holds a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HowHeld {
    /// Open as this descriptor number.
    Fd(u32),
    /// Mapped into its memory.
    Mapped,
    /// Its descriptors or mappings cannot be read: it could hold one.
    Uninspectable,
}

/// A process found holding a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    /// The process.
    pub pid: i32,
    /// How.
    pub how: HowHeld,
    /// Which target.
    pub target: PhysicalId,
}

/// The targets a sweep looks for, and their devices (a mapping on another
/// device is passed over before its inode number is parsed).
pub(super) struct Wanted<'a> {
    /// The targets.
    pub ids: &'a HashSet<PhysicalId>,
    /// Their devices.
    pub devs: HashSet<u64>,
}

impl<'a> Wanted<'a> {
    /// The targets `ids`.
    pub fn new(ids: &'a HashSet<PhysicalId>) -> Wanted<'a> {
        Wanted { ids, devs: ids.iter().map(|t| t.dev).collect() }
    }
}

/// Looks for targets among the descriptors (`VIEW/fd`) and, when `maps`,
/// the mappings (`VIEW/maps`) of `view`, a process (`pid`) or one of its
/// threads (`pid/task/tid`), calling `hit` with each holding descriptor or
/// mapping until it returns `true`. Returns whether `hit` did, and how
/// many descriptors the view has (0 for a zombie leader, whose descriptor
/// table is gone).
pub(super) fn holders_in(
    proc: &OwnedFd,
    pid: i32,
    view: &str,
    wanted: &Wanted<'_>,
    maps: bool,
    buf: &mut Vec<u8>,
    hit: &mut dyn FnMut(Holder) -> bool,
) -> Result<(bool, usize), rustix::io::Errno> {
    let Wanted { ids: targets, devs } = wanted;
    let (done, fds) = fds_of(proc, pid, view, targets, &[], hit)?;
    if done || !maps {
        return Ok((done, fds));
    }
    match read_file(proc, &format!("{view}/maps"), buf)? {
        Some(n) => {
            let done = mapped(&buf[..n], devs, targets).any(|target| hit(Holder { pid, how: HowHeld::Mapped, target }));
            Ok((done, fds))
        }
        None => Ok((false, fds)),
    }
}

/// The thread ids of `pid` (`/proc/<pid>/task`); empty when it is gone.
pub(super) fn threads_of(proc: &OwnedFd, pid: i32) -> Vec<i32> {
    let Ok(fd) = rustix::fs::openat(
        proc,
        format!("{pid}/task").as_str(),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return Vec::new();
    };
    let Ok(mut dir) = rustix::fs::Dir::new(fd) else { return Vec::new() };
    let mut v = Vec::new();
    while let Some(Ok(entry)) = dir.read() {
        if let Some(t) = entry.file_name().to_str().ok().and_then(|s| s.parse::<i32>().ok()) {
            v.push(t);
        }
    }
    v
}

/// Looks through `/proc/<view>/fd`, not counting the descriptors `skip`
/// names, calling `hit` with each descriptor of a target until it returns
/// `true`. Returns whether `hit` did, and how many descriptors were seen.
/// A descriptor whose open file cannot be identified is passed to `hit` as
/// [`HowHeld::Uninspectable`] (naming one of the targets): it could hold
/// any of them.
pub(super) fn fds_of(
    proc: impl AsFd,
    pid: i32,
    view: &str,
    targets: &HashSet<PhysicalId>,
    skip: &[u32],
    hit: &mut dyn FnMut(Holder) -> bool,
) -> Result<(bool, usize), rustix::io::Errno> {
    let fd_dir = rustix::fs::openat(
        proc,
        format!("{view}/fd").as_str(),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut dir = rustix::fs::Dir::new(fd_dir)?;
    let mut seen = 0;
    while let Some(entry) = dir.read() {
        let entry = entry?;
        let Some(n) = entry.file_name().to_str().ok().and_then(|s| s.parse::<u32>().ok()) else { continue };
        seen += 1;
        if skip.contains(&n) {
            continue;
        }
        // Follow the magic link: the identity of the open file itself. The
        // device and inode number never change, so the attributes the
        // kernel has cached will do: `AT_STATX_DONT_SYNC` keeps a
        // descriptor of a file on a hung network or FUSE mount from
        // blocking the check.
        let st = match rustix::fs::statx(dir.fd()?, entry.file_name(), AtFlags::STATX_DONT_SYNC, StatxFlags::INO) {
            Ok(st) => st,
            // Closed meanwhile.
            Err(e) if is_gone(e) => continue,
            Err(rustix::io::Errno::ACCESS) | Err(rustix::io::Errno::PERM) => return Err(rustix::io::Errno::ACCESS),
            // An open file that cannot be identified (a stale network
            // handle, a broken FUSE inode): it could be a target, so the
            // process could hold one.
            Err(_) => {
                let Some(&target) = targets.iter().next() else { continue };
                if hit(Holder { pid, how: HowHeld::Uninspectable, target }) {
                    return Ok((true, seen));
                }
                continue;
            }
        };
        let id = PhysicalId { dev: rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor), ino: st.stx_ino };
        if targets.contains(&id) && hit(Holder { pid, how: HowHeld::Fd(n), target: id }) {
            return Ok((true, seen));
        }
    }
    Ok((false, seen))
}

/// The targets among the lines of a `maps` file, in its order (a target
/// mapped twice comes twice): `start-end perms offset major:minor inode
/// path`, device numbers in hex, inode decimal.
pub(super) fn mapped<'a>(
    maps: &'a [u8],
    devs: &'a HashSet<u64>,
    targets: &'a HashSet<PhysicalId>,
) -> impl Iterator<Item = PhysicalId> + 'a {
    maps.split(|&b| b == b'\n').filter_map(move |line| {
        let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
        let (Some(_), Some(_), Some(_), Some(dev), Some(ino)) =
            (fields.next(), fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return None;
        };
        if ino == b"0" {
            return None;
        }
        let colon = dev.iter().position(|&b| b == b':')?;
        let (major, minor) = (hex(&dev[..colon])?, hex(&dev[colon + 1..])?);
        let dev = rustix::fs::makedev(major, minor);
        if !devs.contains(&dev) {
            return None;
        }
        let ino = std::str::from_utf8(ino).ok()?.parse::<u64>().ok()?;
        let id = PhysicalId { dev, ino };
        targets.contains(&id).then_some(id)
    })
}

fn hex(s: &[u8]) -> Option<u32> {
    u32::from_str_radix(std::str::from_utf8(s).ok()?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_maps_lines() {
        let target = PhysicalId { dev: rustix::fs::makedev(0xfd, 1), ino: 1234 };
        let targets: HashSet<_> = [target].into();
        let devs: HashSet<_> = [target.dev].into();
        let maps =
            b"55d0-55d1 r--p 00000000 fd:01 99 /usr/bin/x\n7f00-7f01 r--s 00000000 fd:01 1234    /tmp/h (deleted)\n";
        assert_eq!(mapped(maps, &devs, &targets).next(), Some(target));
        assert_eq!(mapped(b"7f00-7f01 rw-p 00000000 00:00 0 \n", &devs, &targets).next(), None);
    }

    /// A descriptor whose open file cannot be identified (here a link that
    /// loops, `ELOOP`, in a `/proc` stand-in) could be a target: it is a
    /// hit, as an uninspectable holder, not passed over; a closed one
    /// (`ENOENT`) is passed over.
    #[test]
    fn a_descriptor_that_cannot_be_identified_could_hold_a_target() {
        let tmp = tempfile::tempdir().unwrap();
        let fd_dir = tmp.path().join("42/fd");
        std::fs::create_dir_all(&fd_dir).unwrap();
        std::os::unix::fs::symlink("3", fd_dir.join("3")).unwrap();
        std::os::unix::fs::symlink("/nonexistent/winx", fd_dir.join("4")).unwrap();
        let proc =
            rustix::fs::open(tmp.path(), OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).unwrap();
        let target = PhysicalId { dev: 1, ino: 2 };
        let targets: HashSet<_> = [target].into();
        let mut hits = Vec::new();
        let (done, seen) = fds_of(&proc, 42, "42", &targets, &[], &mut |h| {
            hits.push(h);
            false
        })
        .unwrap();
        assert_eq!((done, seen), (false, 2));
        assert_eq!(hits, [Holder { pid: 42, how: HowHeld::Uninspectable, target }]);
        // Skipped by number, it is not looked at.
        hits.clear();
        fds_of(&proc, 42, "42", &targets, &[3], &mut |h| {
            hits.push(h);
            false
        })
        .unwrap();
        assert!(hits.is_empty(), "{hits:?}");
    }
}
