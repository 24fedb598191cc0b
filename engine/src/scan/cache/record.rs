//! One directory as the cache keeps it: its identity, its change and
//! modification times, when it was read, and its entries; and the rule that
//! says when such a record may stand for the directory without reading it
//! again.
//!
//! # The racy rule
//!
//! A record is taken as follows: the clock (`CLOCK_REALTIME`) is read, the
//! directory is `statx`ed (identity, `ctime`, `mtime`, birth time), and only
//! then are its entries read. Every change to the directory after that
//! `statx` sets its `ctime` to the time of the change; so if a later `statx`
//! finds the same identity and the same `ctime`, the entries read are still
//! the entries, **provided** that a change after the read cannot have been
//! given the very `ctime` the record holds. That fails only when the
//! record's `ctime` lies within one timestamp granule of the read: the
//! kernel stamps changes with the coarse clock (one tick, `clock_getres`
//! of `CLOCK_REALTIME_COARSE`), truncated to the filesystem's granularity.
//! So a record is **settled** (trusted later) only when
//! `ctime + window < read_start`, with `window` = two coarse ticks when the
//! `ctime` carries nanoseconds, and one second plus a tick when it does not
//! (a filesystem that stores whole seconds, ext4 with 128-byte inodes, say).
//! An unsettled record is read again at its next use, where it usually
//! settles.
//!
//! The kernel's multigrain timestamps (Linux 6.13+, on ext4, xfs, btrfs
//! and tmpfs, exactly the filesystems the lean scan trusts) make a change
//! to an inode whose `ctime` was queried get a fine-grained, strictly later
//! stamp, which narrows the window for the *same* inode to zero; but a
//! directory *replaced* by a new inode (which nobody queried) is still
//! stamped with the coarse clock (raised to the floor of fine-grained
//! stamps handed out), so the window that also covers replacements stays
//! one coarse tick. The rule above holds with and without multigrain
//! timestamps; on 6.13+ it is the same window for this reason.
//!
//! # References
//! - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)
//! - [`clock_getres(2)`](https://man7.org/linux/man-pages/man2/clock_getres.2.html)
//! - Documentation/filesystems/multigrain-ts.rst in the kernel tree

use std::ffi::{CStr, CString};
use std::os::fd::BorrowedFd;

use rustix::fs::{AtFlags, FileType, StatxFlags, StatxTimestamp};
use rustix::io::Errno;
use rustix::time::{ClockId, Timespec};

use super::super::tally::physical;
use super::handle::Handle;
use crate::error::Reason;
use winx_release_kernel::identity::PhysicalId;

/// What a directory's `statx` must return.
const REQUIRED: StatxFlags = StatxFlags::TYPE.union(StatxFlags::INO);
/// What a record needs besides: without both times it is never kept.
const TIMES: StatxFlags = StatxFlags::CTIME.union(StatxFlags::MTIME);
/// What a directory's `statx` asks for (the birth time is optional).
const ASKED: StatxFlags = REQUIRED.union(TIMES).union(StatxFlags::BTIME);

/// A time as (seconds, nanoseconds).
pub(crate) type Stamp = (i64, u32);

fn stamp(t: StatxTimestamp) -> Stamp {
    (t.tv_sec, t.tv_nsec)
}

/// A directory's identity and times, from one `statx`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DirStat {
    pub(crate) id: PhysicalId,
    /// Birth time, where the filesystem reports it: with the inode number it
    /// tells a directory from another that reuses its inode number.
    pub(crate) btime: Option<Stamp>,
    pub(crate) ctime: Stamp,
    pub(crate) mtime: Stamp,
    /// Both times were returned.
    pub(crate) complete: bool,
}

/// `statx`es the directory `path` below `dir` (`dir` itself when `path` is
/// empty) without following a final link. `Err(ENOTDIR)` when it is not a
/// directory, `Err(EIO)` when its type or inode is missing.
pub(crate) fn stat_dir(dir: BorrowedFd<'_>, path: &CStr) -> Result<DirStat, Errno> {
    let flags = if path.is_empty() { AtFlags::EMPTY_PATH } else { AtFlags::SYMLINK_NOFOLLOW };
    let st = rustix::fs::statx(dir, path, flags, ASKED)?;
    if st.stx_mask & REQUIRED.bits() != REQUIRED.bits() {
        return Err(Errno::IO);
    }
    if FileType::from_raw_mode(u32::from(st.stx_mode)) != FileType::Directory {
        return Err(Errno::NOTDIR);
    }
    Ok(DirStat {
        id: physical(st.stx_dev_major, st.stx_dev_minor, st.stx_ino),
        btime: (st.stx_mask & StatxFlags::BTIME.bits() != 0).then(|| stamp(st.stx_btime)),
        ctime: stamp(st.stx_ctime),
        mtime: stamp(st.stx_mtime),
        complete: st.stx_mask & TIMES.bits() == TIMES.bits(),
    })
}

/// What one entry is, without regard to any alias set (aliases are applied
/// when a scan is evaluated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A regular file with this identity.
    File(PhysicalId),
    /// A directory with this identity.
    Dir(PhysicalId),
    /// Fails closed with this reason (link, unsupported, inaccessible).
    Fail(Reason),
}

/// One entry of a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Its name (no NUL).
    pub(crate) name: Box<[u8]>,
    pub(crate) kind: Kind,
}

/// One directory as read.
#[derive(Debug)]
pub(crate) struct DirRecord {
    /// Its path below the root (empty for the root), for `statx`.
    pub(crate) rel: CString,
    /// Its depth (the root is 0; its entries are at `depth + 1`).
    pub(crate) depth: u32,
    /// The `statx` taken before its entries were read.
    pub(crate) stat: DirStat,
    /// `CLOCK_REALTIME` before that `statx`.
    pub(crate) read_start: Stamp,
    /// Its entries, in directory order (getdents64 order).
    pub(crate) entries: Vec<Entry>,
    /// The reading ended with this failure after `entries` (only in a record
    /// that is never kept).
    pub(crate) failed: Option<Reason>,
    /// Whether it may be kept: read leanly on a trusted filesystem, without
    /// failure, and its `statx` complete.
    pub(crate) keep: bool,
    /// What evaluation needs of `entries` without walking them
    /// ([`Summary`]).
    pub(crate) summary: Summary,
    /// The descriptor it was read through, kept while the budget allows
    /// (`handle.rs`); `None` for the root, a record that is not kept, or
    /// beyond the budget.
    pub(crate) handle: Option<Handle>,
}

/// A record's entries summed up once, when it is read, so that a scan
/// whose records all hold can be evaluated per directory instead of per
/// entry (`eval.rs`).
#[derive(Debug, Default)]
pub(crate) struct Summary {
    /// Regular files among the entries.
    pub(crate) files: u64,
    /// Directories among the entries.
    pub(crate) dirs: u64,
    /// Some entry fails closed on its own (`Kind::Fail`).
    pub(crate) offends: bool,
    /// The identities of the files and directories, sorted: an alias is
    /// looked up by binary search.
    pub(crate) ids: Box<[PhysicalId]>,
    /// The least and the greatest of `ids` (`None` when there are none),
    /// kept beside the counts: an alias outside them is passed over
    /// without touching `ids` (a warm scan's binary searches were cache
    /// misses, one per probe: benches/log/2026-12.md, stop 44).
    pub(crate) span: Option<(PhysicalId, PhysicalId)>,
}

impl Summary {
    /// The summary of `entries`.
    pub(crate) fn of(entries: &[Entry]) -> Summary {
        let mut s = Summary::default();
        let mut ids = Vec::with_capacity(entries.len());
        for e in entries {
            match e.kind {
                Kind::File(id) => {
                    s.files += 1;
                    ids.push(id);
                }
                Kind::Dir(id) => {
                    s.dirs += 1;
                    ids.push(id);
                }
                Kind::Fail(_) => s.offends = true,
            }
        }
        ids.sort_unstable();
        s.span = ids.first().zip(ids.last()).map(|(lo, hi)| (*lo, *hi));
        s.ids = ids.into_boxed_slice();
        s
    }

    /// Whether a file or directory among the entries has an identity in
    /// `aliases`.
    pub(crate) fn holds_any(&self, aliases: &[PhysicalId]) -> bool {
        let Some((lo, hi)) = self.span else { return false };
        aliases.iter().any(|a| lo <= *a && *a <= hi && self.ids.binary_search(a).is_ok())
    }
}

/// The current `CLOCK_REALTIME`.
pub(crate) fn now() -> Stamp {
    let t: Timespec = rustix::time::clock_gettime(ClockId::Realtime);
    (t.tv_sec, u32::try_from(t.tv_nsec).unwrap_or(0))
}

/// One coarse clock tick in nanoseconds (at least 1 ms, at most 1 s when
/// the kernel does not say).
pub(crate) fn coarse_tick_ns() -> i128 {
    let r = rustix::time::clock_getres(ClockId::RealtimeCoarse);
    let ns = i128::from(r.tv_sec) * 1_000_000_000 + i128::from(r.tv_nsec);
    if ns <= 0 {
        1_000_000_000
    } else {
        ns.max(1_000_000)
    }
}

fn ns(s: Stamp) -> i128 {
    i128::from(s.0) * 1_000_000_000 + i128::from(s.1)
}

/// The racy rule (module docs): whether a record whose directory had
/// `ctime` when a read starting at `read_start` began may be trusted later,
/// with one coarse tick of `tick_ns`.
pub(crate) fn settled(ctime: Stamp, read_start: Stamp, tick_ns: i128) -> bool {
    let window = if ctime.1 == 0 { 1_000_000_000 + tick_ns } else { 2 * tick_ns };
    ns(ctime) + window < ns(read_start)
}

/// One look at a directory outside the cache (the execution runtime's at
/// `D/executions`): its `statx`, taken after the clock and before its
/// entries are read, that says by the racy rule whether a later look finds
/// it unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirLook {
    stat: DirStat,
    read_start: Stamp,
}

impl DirLook {
    /// Looks at the opened directory `dir`; `None` when it cannot be
    /// `statx`ed or the times are missing.
    pub fn take(dir: BorrowedFd<'_>) -> Option<DirLook> {
        let read_start = now();
        let stat = stat_dir(dir, c"").ok().filter(|s| s.complete)?;
        Some(DirLook { stat, read_start })
    }

    /// Whether the directory `later` looked at is this one (device, inode,
    /// birth time) with no entry changed since this look: same change and
    /// modification times, and this look settled (module docs).
    pub fn unchanged_at(&self, later: &DirLook) -> bool {
        self.stat == later.stat && settled(self.stat.ctime, self.read_start, coarse_tick_ns())
    }
}

impl DirRecord {
    /// Whether this record may stand for the directory whose `statx` is
    /// `now`: kept, same identity (device, inode and birth time), same
    /// change and modification times, and settled.
    pub(crate) fn still_valid(&self, now: &DirStat, tick_ns: i128) -> bool {
        self.keep && self.stat.complete && *now == self.stat && settled(self.stat.ctime, self.read_start, tick_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn racy_window() {
        let tick = 4_000_000;
        // Nanosecond stamps: two ticks.
        assert!(!settled((100, 5), (100, 8_000_005), tick));
        assert!(settled((100, 5), (100, 8_000_006), tick));
        // Whole seconds: one second and a tick.
        assert!(!settled((100, 0), (101, 4_000_000), tick));
        assert!(settled((100, 0), (101, 4_000_001), tick));
        // A stamp after the read (a clock stepped back) is never settled.
        assert!(!settled((200, 1), (100, 0), tick));
    }

    /// Every identity among the entries is found, the least and the
    /// greatest included, on any device; nothing else is, inside the span
    /// or outside it; an empty directory holds nothing.
    #[test]
    fn an_alias_is_found_wherever_it_lies_in_the_span() {
        let id = |dev, ino| PhysicalId { dev, ino };
        let entry = |kind| Entry { name: b"e".to_vec().into_boxed_slice(), kind };
        let entries = [
            entry(Kind::File(id(8, 40))),
            entry(Kind::Dir(id(8, 12))),
            entry(Kind::File(id(9, 3))),
            entry(Kind::Fail(Reason::BackingSymlink)),
            entry(Kind::File(id(8, 25))),
        ];
        let s = Summary::of(&entries);
        assert_eq!(s.span, Some((id(8, 12), id(9, 3))));
        for held in [id(8, 12), id(8, 25), id(8, 40), id(9, 3)] {
            assert!(s.holds_any(&[id(1, 1), held]), "{held:?} not found");
        }
        for other in [id(8, 11), id(8, 26), id(8, 41), id(9, 2), id(9, 4), id(7, 40), id(10, 0)] {
            assert!(!s.holds_any(&[other]), "{other:?} found");
        }
        assert!(!Summary::of(&[entry(Kind::Fail(Reason::BackingSymlink))]).holds_any(&[id(8, 12)]));
        assert!(!Summary::of(&[]).holds_any(&[id(0, 0)]));
    }
}
