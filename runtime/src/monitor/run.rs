//! The monitor's own process: what runs after [`super::enter`] saw
//! [`super::ARG`].
//!
//! Its arguments: the execution's directory, the leader's standard input
//! (`null`, or `out`: the monitor's standard output, a terminal's
//! follower), whether the leader gets a process group of its own (`1`, when
//! no `setsid` program does that), and the leader's argv. Its standard
//! input is the control socket; its standard output and error are the
//! leader's.
//!
//! The monitor starts nothing before the runtime's word on the control
//! socket (`G`, or a shell's descriptors): the runtime records the monitor
//! durably in between (`Runtime::spawn_monitor`), so that the record names
//! the monitor before anything of the execution runs.
//!
//! A shell's monitor (`out`) first receives, on the control socket, the
//! runtime's end of the shell's hook socket and the terminal's controller
//! (when the runtime keeps it), and holds them for the shell's life: a
//! runtime that dies leaves the shell neither a hangup (`SIGHUP`) nor a
//! broken hook (`EPIPE`). It listens on an abstract socket of its
//! execution ([`super::socket_name`]) for the next runtime (`attach.rs`).

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use rustix::process::{wait, WaitOptions};

use super::names::EXIT_FILE;

/// Runs the monitor; returns its exit status.
pub(super) fn main(args: Vec<OsString>) -> i32 {
    let [dir, stdin, group, leader @ ..] = args.as_slice() else {
        eprintln!("winx-release monitor: usage: DIR null|out 0|1 PROGRAM [ARG...]");
        return 2;
    };
    let Some((program, leader_args)) = leader.split_first() else { return 2 };
    let mut control = std::io::stdin().as_fd().try_clone_to_owned().ok().map(UnixStream::from);
    // Out of the runtime's session and process group: nothing sent to the
    // guardian's group reaches the monitor.
    let _ = rustix::process::setsid();
    if let Err(e) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        say(&mut control, &format!("E cannot become a child subreaper: {e}"));
        return 126;
    }
    let shell = stdin == "out";
    // Nothing starts before the runtime's word: it records this monitor
    // first, so that a runtime that dies at any point leaves a record
    // naming the monitor of whatever runs. A runtime gone before it
    // (the socket closed) leaves nothing started.
    let held = match control.as_ref().map(super::fds::recv) {
        Some(Ok((line, fds))) if shell && line == "F\n" && !fds.is_empty() => fds,
        Some(Ok((line, fds))) if !shell && line == "G\n" && fds.is_empty() => fds,
        _ => {
            let what = if shell { "no terminal and hook descriptors came" } else { "the runtime did not say to start" };
            say(&mut control, &format!("E {what}: nothing started"));
            return 126;
        }
    };
    // The execution's marker, on the leader alone: the monitor carries
    // none (it is no member of its execution).
    let id = Path::new(dir).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut cmd = Command::new(program);
    cmd.args(leader_args).env(crate::liveness::MARKER, &id);
    if shell {
        match std::io::stdout().as_fd().try_clone_to_owned() {
            Ok(fd) => cmd.stdin(Stdio::from(fd)),
            Err(e) => {
                say(&mut control, &format!("E cannot pass the terminal on: {e}"));
                return 126;
            }
        };
    } else {
        cmd.stdin(Stdio::null());
    }
    if group == "1" {
        cmd.process_group(0);
    }
    let leader = match cmd.spawn() {
        Ok(child) => child.id() as i32,
        Err(e) => {
            say(&mut control, &format!("E cannot start {}: {e}", Path::new(program).display()));
            record_exit(Path::new(dir), Some(127));
            return 127;
        }
    };
    say(&mut control, &format!("L {leader}"));
    let attach = if shell { super::attach::listen(&id, Path::new(dir), leader, held) } else { None };
    let mut code = None;
    loop {
        match wait(WaitOptions::empty()) {
            Ok(Some((pid, status))) => {
                if pid.as_raw_nonzero().get() == leader {
                    code = status.exit_status().or_else(|| status.terminating_signal().map(|s| 128 + s));
                    let shown = code.map_or_else(|| "?".to_owned(), |c| c.to_string());
                    say(&mut control, &format!("X {shown}"));
                    if let Some(a) = &attach {
                        a.leader_exited(code);
                    }
                }
            }
            Ok(None) | Err(rustix::io::Errno::INTR) => {}
            // No child left: the whole subtree has exited.
            Err(_) => break,
        }
    }
    record_exit(Path::new(dir), code);
    0
}

/// One line to the runtime, if one listens (a runtime that is gone is no
/// reason to stop: the exit is recorded on disk).
fn say(control: &mut Option<UnixStream>, line: &str) {
    if let Some(c) = control {
        if c.write_all(format!("{line}\n").as_bytes()).is_err() {
            *control = None;
        }
    }
}

/// Records the leader's exit status durably, the monitor's last act.
fn record_exit(dir: &Path, code: Option<i32>) {
    let text = code.map_or_else(|| "?\n".to_owned(), |c| format!("{c}\n"));
    if let Err(e) = winx_release_kernel::sys::write_durable(&dir.join(EXIT_FILE), text.as_bytes()) {
        eprintln!("winx-release monitor: cannot record the exit in {}: {e}", dir.display());
    }
}
