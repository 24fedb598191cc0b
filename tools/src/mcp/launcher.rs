//! Starting a durable guardian when `Initialize` finds none.
//!
//! The guardian is this same executable run as `guardian --socket PATH`, in
//! a process group of its own (a terminal's signals meant for the frontend
//! do not reach it), with stdin closed, stderr appended to
//! `guardian.log` beside the socket, and stdout piped until its ready line:
//! the launcher returns only once the guardian listens. It then outlives
//! the frontend that started it.

use std::io::{self, BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use rustix::fs::{Mode, OFlags};
use winx_release_protocol::trust;

/// How long a new guardian may take to print its ready line.
pub const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// Name of the guardian's log file, in the socket's directory.
pub const LOG_NAME: &str = "guardian.log";

/// Starts `current_exe() guardian --socket <socket>` detached and waits for
/// its ready line.
///
/// When the new guardian exits without one (another frontend started one
/// first, say) but a guardian now answers at `socket`, that is success too.
///
/// Refuses (`PermissionDenied`, naming the failed check) before writing
/// anything or starting anything unless the socket's directory passes
/// [`trust::trusted_socket_dir`] (a missing one is created 0700).
pub fn launch_guardian(socket: &Path) -> io::Result<()> {
    // The socket's directory must be trusted (created 0700 here, or owned by
    // this user with mode 0700 and not a link) before a log is written into
    // it or a guardian is started there.
    let dir = trust::socket_dir(socket);
    let dir_fd = trust::trusted_socket_dir(dir, true)?;
    let exe = std::env::current_exe()?;
    let stderr = rustix::fs::openat(
        &dir_fd,
        LOG_NAME,
        OFlags::WRONLY | OFlags::CREATE | OFlags::APPEND | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::RUSR | Mode::WUSR,
    )
    .map(|fd| Stdio::from(std::fs::File::from(fd)))
    .unwrap_or_else(|_| Stdio::null());
    // Under a user manager, the guardian gets a delegated cgroup subtree of
    // its own (a scope with Delegate=yes): a cgroup per execution. Else it
    // is started plainly and says which liveness mode it could have.
    let mut cmd = if user_manager_answers() {
        let mut c = Command::new("systemd-run");
        c.args(["--user", "--scope", "--quiet", "--collect", "-p", "Delegate=yes", "--"]).arg(exe);
        c
    } else {
        Command::new(exe)
    };
    let mut child = cmd
        .arg("guardian")
        .arg("--socket")
        .arg(socket)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .process_group(0)
        .spawn()?;
    let pid = child.id();
    let stdout = child.stdout.take().ok_or_else(|| io::Error::other("guardian stdout was not piped"))?;

    // One thread reads the ready line, then drains stdout until the guardian
    // exits, and reaps it (no zombie while this frontend lives).
    let (tx, rx) = mpsc::channel::<io::Result<String>>();
    std::thread::Builder::new().name("winx-guardian-child".into()).spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let first = match reader.read_line(&mut line) {
            Ok(0) => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "guardian exited before it was ready")),
            Ok(_) => Ok(line.clone()),
            Err(e) => Err(e),
        };
        let _ = tx.send(first);
        let _ = io::copy(&mut reader, &mut io::sink());
        let status = child.wait();
        tracing::info!(pid, ?status, "launched guardian exited");
    })?;

    let outcome = match rx.recv_timeout(READY_TIMEOUT) {
        Ok(Ok(line)) => check_ready(&line),
        Ok(Err(e)) => Err(e),
        Err(_) => {
            // A guardian that never gets ready is not left behind.
            if let Some(p) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
            Err(io::Error::new(io::ErrorKind::TimedOut, "guardian did not become ready in time"))
        }
    };
    match outcome {
        Ok(()) => {
            tracing::info!(pid, socket = %socket.display(), "started a guardian");
            Ok(())
        }
        Err(e) if UnixStream::connect(socket).is_ok() => {
            tracing::info!(error = %e, "the launched guardian did not start, but one answers");
            Ok(())
        }
        Err(e) => {
            tracing::warn!(pid, error = %e, "could not start a guardian");
            Err(e)
        }
    }
}

/// Whether `systemd-run` is on `PATH` and the user's service manager
/// answers (`systemctl --user show-environment` within 2 s).
///
/// # References
/// - [`systemd-run(1)`](https://www.freedesktop.org/software/systemd/man/latest/systemd-run.html) (`--scope`)
/// - [`systemd.resource-control(5)`](https://www.freedesktop.org/software/systemd/man/latest/systemd.resource-control.html) (`Delegate=`)
fn user_manager_answers() -> bool {
    let on_path = |name: &str| {
        std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
    };
    if !on_path("systemd-run") || !on_path("systemctl") {
        return false;
    }
    let Ok(mut child) = Command::new("systemctl")
        .args(["--user", "show-environment"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    else {
        return false;
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.success(),
            Ok(None) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
}

fn check_ready(line: &str) -> io::Result<()> {
    let v: serde_json::Value = serde_json::from_str(line.trim_end())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("guardian ready line: {e}")))?;
    if v.get("event").and_then(serde_json::Value::as_str) == Some("ready") {
        Ok(())
    } else {
        Err(io::Error::new(io::ErrorKind::InvalidData, format!("unexpected guardian line: {}", line.trim_end())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_line_is_checked() {
        assert!(check_ready("{\"event\":\"ready\",\"socket\":\"/s\",\"pid\":1,\"capabilities\":[]}\n").is_ok());
        assert!(check_ready("{\"event\":\"other\"}\n").is_err());
        assert!(check_ready("not json\n").is_err());
    }
}
