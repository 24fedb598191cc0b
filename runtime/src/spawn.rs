//! Starting an execution's leader, under its monitor (`monitor/`):
//! `bash -c COMMAND` in its own session and
//! process group (through `setsid` when it is on `PATH`), marked with
//! `WINX_EXECUTION_ID` in its environment, stdin from `/dev/null`, stdout
//! and stderr appended to `D/executions/<id>/output`.
//!
//! In cgroup mode the leader is a small `sh` that first writes its own pid
//! into the execution's `cgroup.procs` and only then `exec`s the command:
//! the command's first instruction already runs inside its cgroup, and if
//! the write fails the command never runs (the shell exits 125 and says
//! why in the output).
//!
//! # References
//! - [`setsid(1)`](https://man7.org/linux/man-pages/man1/setsid.1.html),
//!   [`setsid(2)`](https://man7.org/linux/man-pages/man2/setsid.2.html)
//! - [cgroup v2 `cgroup.procs`](https://docs.kernel.org/admin-guide/cgroup-v2.html#core-interface-files)

use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use super::liveness::MARKER;
use super::monitor::{start_monitored, LeaderIo, Monitored};
use super::record::{Leader, OUTPUT_FILE};

/// The exit status of a cgroup-mode leader that could not join its cgroup.
pub const CGROUP_JOIN_FAILED: i32 = 125;

/// What to run, and where.
#[derive(Clone, Debug)]
pub struct CommandSpec {
    /// The command, run as `bash -c COMMAND`.
    pub command: String,
    /// Its working directory.
    pub cwd: PathBuf,
    /// Variables set for it (besides the marker).
    pub env: Vec<(OsString, OsString)>,
    /// Variables removed from what it inherits.
    pub env_remove: Vec<OsString>,
}

/// Finds `name` on `PATH`, as an executable regular file.
pub(crate) fn on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

pub(crate) fn not_found(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{what} not found on PATH (ENOENT)"))
}

/// Spawns the leader of the execution whose directory is `dir`, into
/// `cgroup` when given, under the monitor `monitor` (`monitor/`).
/// `spawn` runs the prepared command, the monitor's (a guardian records
/// the child's pid under its own lock there).
pub(crate) fn spawn_leader(
    dir: &Path,
    spec: &CommandSpec,
    cgroup: Option<&Path>,
    monitor: &Path,
    spawn: impl FnOnce(&mut Command) -> io::Result<Child>,
) -> io::Result<(Monitored, Leader)> {
    let out = OpenOptions::new().create(true).append(true).mode(0o600).open(dir.join(OUTPUT_FILE))?;
    let err = out.try_clone()?;
    let bash = on_path("bash").ok_or_else(|| not_found("bash"))?;
    let setsid = on_path("setsid");
    let mut argv: Vec<OsString> = Vec::new();
    if let Some(s) = &setsid {
        // `setsid` in a child that is not a process-group leader calls
        // setsid(2) and execs in place: same pid, new session and group.
        argv.push(s.clone().into());
        argv.push("--".into());
    }
    argv.push(bash.into());
    argv.push("-c".into());
    argv.push(spec.command.clone().into());
    let (mut cmd, control) = crate::monitor::command(monitor, dir, LeaderIo::Null, setsid.is_none())?;
    match cgroup {
        Some(cg) => {
            // POSIX puts `sh` at /bin/sh; PATH only where it does not.
            let sh = Some(PathBuf::from("/bin/sh")).filter(|p| p.exists()).or_else(|| on_path("sh"));
            let sh = sh.ok_or_else(|| not_found("sh"))?;
            cmd.arg(sh)
                .arg("-c")
                .arg(format!(
                    "echo $$ > \"$0/cgroup.procs\" || {{ echo \"winx: cannot join cgroup $0; not run\" >&2; exit {CGROUP_JOIN_FAILED}; }}; exec \"$@\""
                ))
                .arg(cg)
                .args(&argv);
        }
        None => {
            cmd.args(&argv);
        }
    }
    // The monitor sets the marker on the leader alone (`monitor/run.rs`):
    // the monitor is no member of its execution.
    cmd.current_dir(&spec.cwd).env_remove(MARKER).stdout(out).stderr(err);
    for var in &spec.env_remove {
        cmd.env_remove(var);
    }
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    let child = spawn(&mut cmd)?;
    // The monitor's end of the control socket is closed here: a monitor
    // that ends at once is seen at once.
    drop(cmd);
    let started = start_monitored(child, control, monitor.as_os_str(), &[])?;
    let pid = started.leader;
    Ok((started, super::probe::spawned_leader(pid, true, setsid.is_some())))
}
