//! The monitor of an execution: a small process of its own between the
//! runtime and the execution's leader, as conmon is for a container.
//!
//! Every execution (a one-shot or background command, a thread's shell, a
//! background shell) starts under a monitor. The monitor leaves the
//! runtime's session (`setsid(2)`), makes itself a child subreaper
//! (`PR_SET_CHILD_SUBREAPER`), waits for the runtime's word (the runtime
//! records the monitor durably first, so that the record names it before
//! anything of the execution runs), spawns the leader with the standard streams
//! and environment the runtime prepared, tells the runtime the leader's pid
//! and, later, its exit status on a control socket (its standard input),
//! reaps every process reparented to it, and exits only when it has no
//! child left, after recording the leader's exit status durably in
//! `D/executions/<id>/monitor.exit` ([`EXIT_FILE`]).
//!
//! So an execution runs while its monitor has any descendant: ancestry the
//! kernel keeps, which no `setsid`, double fork, `env -i`, cgroup move or
//! marker changes (`runtime/union.rs`). The runtime's other evidence (its
//! cgroup, the `/proc` signals, remembered members) stays: a monitor that
//! is killed (by a command of its own execution, say) leaves its
//! processes to the runtime's subreaper (an orphan, counted for every
//! session) or, when no guardian runs, to init, where only that evidence
//! finds them.
//!
//! The monitor is a program the runtime starts: [`enter`] is the first call
//! of a binary's `main` (`winx-release` makes it; so does the runtime's
//! own `winx-release-monitor`, a few hundred kilobytes). Which program is
//! used: [`RuntimeOptions::monitor`](crate::RuntimeOptions::monitor), else
//! [`program`]'s search. A runtime that finds none starts nothing (every
//! start fails, saying why).
//!
//! # References
//! - [`PR_SET_CHILD_SUBREAPER`](https://man7.org/linux/man-pages/man2/PR_SET_CHILD_SUBREAPER.2const.html)
//! - [`setsid(2)`](https://man7.org/linux/man-pages/man2/setsid.2.html)
//! - [`wait(2)`](https://man7.org/linux/man-pages/man2/wait.2.html)
//! - conmon, the container monitor of CRI-O and Podman (its design, not its code):
//!   <https://github.com/containers/conmon>

mod attach;
mod control;
pub(crate) mod fds;
mod names;
mod run;

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

pub(crate) use control::{command, start_monitored, Control, LeaderIo, Monitored};
pub use names::{socket_name, ARG, EXIT_FILE, PROTOCOL};

/// The variable that names the monitor program, ahead of [`program`]'s
/// search.
pub const PROGRAM_VAR: &str = "WINX_RELEASE_MONITOR";

/// The name of the runtime's own monitor binary, looked for beside this
/// program.
pub const BINARY: &str = "winx-release-monitor";

static ENTERED: AtomicBool = AtomicBool::new(false);

/// The first call of a program that can be a monitor: when its first
/// argument is [`ARG`], it runs as one and never returns; otherwise it
/// returns at once, and [`program`] may name this program
/// (`/proc/self/exe`) as the monitor.
pub fn enter() {
    let mut args = std::env::args_os();
    let _ = args.next();
    if args.next().as_deref() == Some(ARG.as_ref()) {
        let rest: Vec<OsString> = args.collect();
        std::process::exit(run::main(rest));
    }
    ENTERED.store(true, Ordering::SeqCst);
}

/// The monitor program: the variable [`PROGRAM_VAR`]; else
/// [`BINARY`] beside this program (in its directory or the one above, as
/// cargo lays out tests and examples); else this program, when it called
/// [`enter`]. `None`: no monitor can be started.
pub fn program() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(PROGRAM_VAR).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    if let Ok(exe) = std::env::current_exe() {
        for dir in exe.ancestors().skip(1).take(2) {
            let p = dir.join(BINARY);
            if is_executable(&p) {
                return Some(p);
            }
        }
    }
    ENTERED.load(Ordering::SeqCst).then(|| PathBuf::from("/proc/self/exe"))
}

fn is_executable(p: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
