//! Reading `/proc`: the one module that reads processes' state: who runs
//! (a process runtime's liveness answer is made of these reads) and which
//! process holds an object open or mapped (a release's `in_use` step).
//!
//! One operation per file:
//! - [`stat`]: one process's `/proc/<pid>/stat` (state, parent, process
//!   group, session, start time);
//! - [`table`]: a snapshot of every process's `stat` and owner;
//! - [`children`]: the calling process's own children, from its threads'
//!   `children` files (a few files instead of every process's `stat`);
//! - [`environ`]: one variable of a process's initial environment
//!   (`/proc/<pid>/environ`), for execution markers;
//! - [`holders`]: which process holds a set of physical identities open
//!   (`/proc/<pid>/fd`) or mapped (`/proc/<pid>/maps`): the sweep;
//! - `views` (private): what a holder is, and one process's or thread's descriptor table, memory
//!   map and threads, as the sweep reads them;
//! - `shared` (private): one sweep for every release waiting at once
//!   (a group commit);
//! - `shared_table` (private): one table snapshot for every liveness
//!   answer waiting at once ([`snapshot_shared`]);
//! - `exempt` (private): what the exempt processes hold themselves
//!   ([`held_by`]);
//! - `kept` (private): the descriptors of `/proc/<pid>` and its `stat`
//!   kept from one snapshot to the next, so that a process read before is
//!   read again with a `statx` and a `pread`;
//! - `kthreads` (private): the kernel threads earlier sweeps found, each
//!   held by a pidfd, which [`holders`] passes over;
//! - `older` (private): the processes earlier snapshots found started
//!   before the bound they were asked for, each held by a pidfd, which a
//!   snapshot since that bound passes over ([`table::snapshot_since`]).
//!
//! These reads are snapshots: a process can start or end while they run.
//! Callers that need "nothing is left" must hold off whatever could start
//! new processes (a guardian's admission barrier) and treat any doubt as
//! alive. Nothing here signals or changes any process.
//!
//! # References
//! - [`proc(5)`](https://man7.org/linux/man-pages/man5/proc.5.html)
//! - [`proc_pid_stat(5)`](https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html)
//! - [`proc_pid_environ(5)`](https://man7.org/linux/man-pages/man5/proc_pid_environ.5.html)
//! - [`proc_pid_fd(5)`](https://man7.org/linux/man-pages/man5/proc_pid_fd.5.html)
//! - [`proc_pid_maps(5)`](https://man7.org/linux/man-pages/man5/proc_pid_maps.5.html)

pub mod children;
pub mod environ;
mod exempt;
mod exited;
pub mod holders;
mod kept;
mod kthreads;
mod older;
mod shared;
mod shared_table;
pub use kept::cap as kept_pairs_at_most;
pub use kthreads::max_remembered as kernel_threads_remembered_at_most;
pub mod stat;
pub mod table;
mod views;

use std::fmt;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{Mode, OFlags};

pub use children::own_children;
pub use environ::{env_var, EnvLookup};
pub use exempt::held_by;
pub use holders::{find_holder, find_holder_of, sweep, Holder, HolderScan, HowHeld, Sweep};
pub use shared::shared_sweep;
pub use shared_table::{snapshot_shared, snapshot_shared_since};
pub use stat::{read_stat, ProcStat};
pub use table::{snapshot, snapshot_since, ProcEntry, ProcTable};

/// Test-only: the tests that take snapshots and expect them to settle hold
/// this for reading; the test whose chain of processes keeps any snapshot
/// from settling holds it for writing, so that they never run at once (on
/// a machine with a thousand processes a snapshot's listing is slow enough
/// for that chain to keep every snapshot of the others from settling).
#[cfg(test)]
pub(crate) fn settling(write: bool) -> SettlingGuard {
    static SETTLING: std::sync::RwLock<()> = std::sync::RwLock::new(());
    if write {
        SettlingGuard::Write(SETTLING.write().unwrap_or_else(|e| e.into_inner()))
    } else {
        SettlingGuard::Read(SETTLING.read().unwrap_or_else(|e| e.into_inner()))
    }
}

/// What [`settling`] holds until it is dropped.
#[cfg(test)]
pub(crate) enum SettlingGuard {
    /// Held for reading.
    Read(#[allow(dead_code)] std::sync::RwLockReadGuard<'static, ()>),
    /// Held for writing.
    Write(#[allow(dead_code)] std::sync::RwLockWriteGuard<'static, ()>),
}

/// Why `/proc` could not answer.
#[derive(Debug)]
#[non_exhaustive]
pub enum ProcError {
    /// `/proc` itself cannot be opened or listed (not mounted, masked,
    /// unreadable). Callers must treat this as "cannot tell": refuse.
    Unavailable(std::io::Error),
    /// A file of a process that exists could not be read or parsed.
    Unreadable {
        /// The process.
        pid: i32,
        /// Which file (`stat`, `environ`, `fd`, `maps`).
        file: &'static str,
        /// The error.
        error: std::io::Error,
    },
}

impl fmt::Display for ProcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProcError::Unavailable(e) => write!(f, "/proc cannot be read: {e}"),
            ProcError::Unreadable { pid, file, error } => write!(f, "/proc/{pid}/{file} cannot be read: {error}"),
        }
    }
}

impl std::error::Error for ProcError {}

/// Opens `/proc` as a directory handle.
///
/// # References
/// - [`openat(2)`](https://man7.org/linux/man-pages/man2/openat.2.html)
pub fn open_proc() -> Result<OwnedFd, ProcError> {
    rustix::fs::open("/proc", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| ProcError::Unavailable(e.into()))
}

/// Whether an error means the process is gone (it exited while we looked).
pub(crate) fn is_gone(e: rustix::io::Errno) -> bool {
    e == rustix::io::Errno::NOENT || e == rustix::io::Errno::SRCH
}

/// Reads a whole `/proc` file `rel` (such as `"123/stat"`) beneath `proc`
/// into `buf`, which is scratch space kept between calls (its length only
/// grows). Returns how many bytes were read, or `None` when the process is
/// gone.
///
/// # References
/// - [`openat(2)`](https://man7.org/linux/man-pages/man2/openat.2.html)
/// - [`read(2)`](https://man7.org/linux/man-pages/man2/read.2.html)
pub fn read_file(proc: impl AsFd, rel: &str, buf: &mut Vec<u8>) -> Result<Option<usize>, rustix::io::Errno> {
    let fd = match rustix::fs::openat(proc, rel, OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY, Mode::empty()) {
        Ok(fd) => fd,
        Err(e) if is_gone(e) => return Ok(None),
        Err(e) => return Err(e),
    };
    // Large reads: each read(2) of a seq_file such as `maps` walks the
    // process's state again from where the last one stopped.
    if buf.len() < READ_CHUNK {
        buf.resize(READ_CHUNK, 0);
    }
    let mut len = 0;
    loop {
        if buf.len() - len < READ_CHUNK / 2 {
            let grown = buf.len() * 2;
            buf.resize(grown, 0);
        }
        match rustix::io::read(&fd, &mut buf[len..]) {
            Ok(0) => return Ok(Some(len)),
            Ok(n) => len += n,
            Err(rustix::io::Errno::INTR) => continue,
            // ESRCH: the process exited between open and read.
            Err(e) if is_gone(e) => return Ok(None),
            Err(e) => return Err(e),
        }
    }
}

/// The real uid of `pid` (`Uid:` of `/proc/<pid>/status`), if it can be
/// read.
///
/// # References
/// - [`proc_pid_status(5)`](https://man7.org/linux/man-pages/man5/proc_pid_status.5.html)
pub(crate) fn real_uid(proc: impl AsFd, pid: i32) -> Option<u32> {
    let mut buf = Vec::new();
    let n = read_file(proc, &format!("{pid}/status"), &mut buf).ok()??;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    text.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()
}

/// `CapPrm:` of a `status` file's text.
fn permitted_caps(status: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(status).ok()?;
    let v = text.lines().find_map(|l| l.strip_prefix("CapPrm:"))?;
    u64::from_str_radix(v.trim(), 16).ok()
}

/// Whether `pid` holds a permitted capability this process lacks: a more
/// privileged principal than the caller (the sandbox's init, say), whose
/// state the caller may not read and which the `/proc` rules treat like
/// another user's process. `false` when it cannot be told (fail closed:
/// then it counts as the user's).
///
/// # References
/// - [`proc_pid_status(5)`](https://man7.org/linux/man-pages/man5/proc_pid_status.5.html)
/// - [`ptrace(2)`](https://man7.org/linux/man-pages/man2/ptrace.2.html) ("Ptrace access mode checking")
pub fn more_privileged(proc: impl AsFd, pid: i32) -> bool {
    let mut buf = Vec::new();
    let theirs = match read_file(proc.as_fd(), &format!("{pid}/status"), &mut buf) {
        Ok(Some(n)) => permitted_caps(&buf[..n]),
        _ => None,
    };
    let ours = std::fs::read("/proc/self/status").ok().and_then(|b| permitted_caps(&b));
    matches!((theirs, ours), (Some(t), Some(o)) if t & !o != 0)
}

/// The size of one read of a `/proc` file.
const READ_CHUNK: usize = 64 * 1024;
