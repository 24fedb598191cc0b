//! Exact generations: a file deleted and recreated with the same bytes under
//! the same (reused) inode number within one change-time tick is another
//! generation, and a pin of the first never releases the second.

use std::fs;
use std::os::unix::fs::MetadataExt;

use crate::common::{pin, snapshot, Fixture};
use winx_release_engine::release::{Status, Target};
use winx_release_engine::Reason;

/// Recreates `h` with the same bytes until its inode number is `ino` again;
/// false when the filesystem never reuses it within `tries`.
fn recreate_until_inode_repeats(h: &std::path::Path, bytes: &[u8], ino: u64, tries: usize) -> bool {
    for _ in 0..tries {
        fs::remove_file(h).unwrap();
        fs::write(h, bytes).unwrap();
        if fs::metadata(h).unwrap().ino() == ino {
            return true;
        }
    }
    false
}

#[test]
fn recreated_file_under_a_reused_inode_within_one_tick_requires_a_new_read() {
    let fx = Fixture::new();
    let h = fx.helper("h.py", b"print('same')\n");
    let old = pin(&h);
    if old.generation.is_none() && old.btime.is_none() {
        eprintln!("skipped: this filesystem reports neither a generation number nor a birth time");
        return;
    }
    if !recreate_until_inode_repeats(&h, b"print('same')\n", old.ino, 10_000) {
        eprintln!("skipped: the inode number was not reused");
        return;
    }
    let now = pin(&h);
    assert_eq!((now.dev, now.ino, now.size, now.sha256), (old.dev, old.ino, old.size, old.sha256));
    // What the first read pinned, as a coarse change-time clock (kernels
    // before 6.13: one 1-4 ms tick) stamps it when the recreation falls in
    // the same tick: everything but birth time and generation is equal.
    let stale = winx_release_engine::Pin { ctime_sec: now.ctime_sec, ctime_nsec: now.ctime_nsec, ..old };
    assert!(stale.generation != now.generation || stale.btime != now.btime, "{stale:?} {now:?}");

    let before = snapshot(fx.ws());
    let t = [Target::new(&h, stale)];
    let r = fx.release(&t);
    assert_eq!(r.status, Status::Denied, "{r:?}");
    assert_eq!(r.error_code, Some(Reason::ReadRequired), "{r:?}");
    assert!(!r.touched);
    assert_eq!(snapshot(fx.ws()), before, "the recreated file survives untouched");
    assert_eq!(fs::read(&h).unwrap(), b"print('same')\n");

    // A fresh read of the recreated file releases it.
    let t = [Target::new(&h, now)];
    let r = fx.release(&t);
    assert_eq!(r.status, Status::Completed, "{r:?}");
    assert!(!h.exists());
}
