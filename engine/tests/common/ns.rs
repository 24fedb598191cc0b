//! Private mount namespaces and mounts for tests that need root.
#![allow(dead_code)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Whether the tests run as root.
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Runs `f` on a thread with a private mount namespace (`/` made private
/// recursively), so every mount it makes goes away with the thread; `None`
/// when one cannot be made here.
pub fn in_mount_namespace<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    std::thread::spawn(move || {
        // SAFETY: unshare(2) with CLONE_NEWNS affects only this thread (and
        // the threads it starts); no memory is involved.
        if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
            return None;
        }
        mount(None, Path::new("/"), None, libc::MS_REC | libc::MS_PRIVATE, None).ok()?;
        Some(f())
    })
    .join()
    .unwrap()
}

/// mount(2) with optional source, type and data.
pub fn mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> std::io::Result<()> {
    let c = |b: &[u8]| CString::new(b).unwrap();
    let source = source.map(|p| c(p.as_os_str().as_bytes()));
    let target = c(target.as_os_str().as_bytes());
    let fstype = fstype.map(|t| c(t.as_bytes()));
    let data = data.map(|d| c(d.as_bytes()));
    let ptr = |o: &Option<CString>| o.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: every pointer is a NUL-terminated string that outlives the
    // call, or null where mount(2) allows it.
    let r = unsafe { libc::mount(ptr(&source), target.as_ptr(), ptr(&fstype), flags, ptr(&data).cast()) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// umount2(2) with `MNT_DETACH`.
pub fn detach(target: &Path) -> std::io::Result<()> {
    let t = CString::new(target.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path that outlives the call.
    if unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Fills the filesystem holding `dir` until it reports `ENOSPC`, with a
/// file `fill` in it.
pub fn fill(dir: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(dir.join("fill")).unwrap();
    let block = vec![0xa5u8; 4096];
    loop {
        if let Err(e) = f.write_all(&block) {
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
            break;
        }
    }
    let _ = f.sync_all();
}
