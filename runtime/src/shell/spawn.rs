//! Starting a shell's leader on its terminal, under its monitor
//! (`monitor/`, which passes its standard output on as the leader's input).
//!
//! `sh -c WRAPPER` with the follower as standard input and output and the
//! engine's end of the hook socket as standard error. The wrapper moves
//! the socket to descriptor 3 and the terminal to 2, joins the cgroup in
//! cgroup mode (as every execution's leader does: before the shell's first
//! instruction; on failure the shell never runs, exit 125), then `exec`s
//! `setsid --ctty -- ARGV` (the host's [`super::ShellProgram`], by default
//! `bash --noprofile --rcfile HOOK -i`): `setsid(2)` in
//! place (the child is not a process-group leader, so the pid stays) and
//! the terminal on standard input becomes the controlling terminal
//! (`TIOCSCTTY`). No `pre_exec` closure, so no `unsafe` here.
//!
//! # References
//! - [`setsid(1)`](https://man7.org/linux/man-pages/man1/setsid.1.html) (`--ctty`)
//! - [`TIOCSCTTY`](https://man7.org/linux/man-pages/man2/TIOCSCTTY.2const.html)
//! - [`credentials(7)`](https://man7.org/linux/man-pages/man7/credentials.7.html), sessions and controlling terminals

use std::ffi::OsString;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::liveness::MARKER;
use crate::monitor::{start_monitored, LeaderIo, Monitored};
use crate::record::Leader;
use crate::spawn::{not_found, on_path, CGROUP_JOIN_FAILED};

/// What a shell's leader gets.
pub(crate) struct ShellSpec<'a> {
    /// The shell's command line ([`super::ShellProgram::argv`]).
    pub(crate) argv: &'a [OsString],
    pub(crate) cwd: &'a Path,
    pub(crate) env: &'a [(OsString, OsString)],
    pub(crate) env_remove: &'a [OsString],
    pub(crate) cgroup: Option<&'a Path>,
    /// The execution's directory.
    pub(crate) dir: &'a Path,
    /// The monitor program.
    pub(crate) monitor: &'a Path,
}

/// Variables every shell gets: a terminal type the renderers know, and
/// pagers that do not wait for a key (a pager would hold the shell busy).
const SHELL_ENV: [(&str, &str); 4] =
    [("TERM", "xterm-256color"), ("PAGER", "cat"), ("GIT_PAGER", "cat"), ("LESS", "-FRX")];

/// Spawns the shell through `spawn` (the runtime records the pid under its
/// lock there); its monitor holds `held` (the hook socket's runtime end,
/// the controller) for the shell's life.
pub(crate) fn spawn_shell(
    spec: &ShellSpec<'_>,
    follower: &OwnedFd,
    hook_end: OwnedFd,
    held: &[BorrowedFd<'_>],
    spawn: impl FnOnce(&mut Command) -> io::Result<Child>,
) -> io::Result<(Monitored, Leader)> {
    let setsid = on_path("setsid").ok_or_else(|| not_found("setsid (util-linux, for --ctty)"))?;
    let sh: PathBuf = Some(PathBuf::from("/bin/sh"))
        .filter(|p| p.exists())
        .or_else(|| on_path("sh"))
        .ok_or_else(|| not_found("sh"))?;
    let script = format!(
        "exec 3>&2 2>&1; if [ -n \"$1\" ]; then echo $$ > \"$1/cgroup.procs\" || {{ echo \"winx: cannot join cgroup $1; not run\"; exit {CGROUP_JOIN_FAILED}; }}; fi; shift; exec \"$@\""
    );
    let (mut cmd, control) = crate::monitor::command(spec.monitor, spec.dir, LeaderIo::Stdout, false)?;
    cmd.arg(sh)
        .arg("-c")
        .arg(script)
        .arg("winx-shell")
        .arg(spec.cgroup.map(|p| p.as_os_str().to_owned()).unwrap_or_default())
        .arg(setsid)
        .arg("--ctty")
        .arg("--")
        .args(spec.argv);
    cmd.current_dir(spec.cwd).stdout(Stdio::from(follower.try_clone()?)).stderr(Stdio::from(hook_end));
    for var in spec.env_remove {
        cmd.env_remove(var);
    }
    for (k, v) in SHELL_ENV {
        cmd.env(k, v);
    }
    for (k, v) in spec.env {
        cmd.env(k, v);
    }
    // Set by the monitor on the leader alone (`monitor/run.rs`).
    cmd.env_remove(MARKER);
    let child = spawn(&mut cmd)?;
    // The monitor's end of the control socket is closed here: a monitor
    // that ends at once is seen at once.
    drop(cmd);
    let started = start_monitored(child, control, spec.monitor.as_os_str(), held)?;
    let pid = started.leader;
    Ok((started, crate::probe::spawned_leader(pid, true, true)))
}
