//! Taking over the shells an earlier runtime left (a guardian killed,
//! restarted or upgraded): each one's monitor (`monitor/attach.rs`) hands
//! over the terminal and the hook, and the shell goes on as it was.
//!
//! What the shell's state was is read back from what the earlier runtime
//! left: the hook's last report (`prompt.json`, written before each
//! acknowledgement: the prompt count, the program the shell ran, what it
//! held) and the command typed into it that is not back at its prompt
//! (its record). The shell is at its prompt when a report came after that
//! command was typed, or no command is unfinished.

use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::Runtime;
use crate::execution::{ExecState, Execution};
use crate::monitor::{fds, socket_name, PROTOCOL};
use crate::record::RecordState;
use crate::shell::command::{unfinished_of, CommandRecord};
use crate::shell::handle::{Core, State};
use crate::shell::prompt_file::{Prompt, PROMPT_FILE};
use crate::shell::{OutputSink, Shell};
use winx_release_kernel::sys::lock;

/// How long a monitor may take to answer.
const ATTACH_WAIT: Duration = Duration::from_secs(5);

/// Whether the shell process `pid` waits in `read(2)` on descriptor 3, the
/// hook's socket: only the hook reads it, waiting for the runtime's answer
/// to a report (`/proc/<pid>/syscall`: the call's number, then its first
/// argument). Elsewhere than x86-64 and aarch64, never.
///
/// # References
/// - [`proc_pid_syscall(5)`](https://man7.org/linux/man-pages/man5/proc_pid_syscall.5.html)
pub(crate) fn waits_for_answer(pid: i32) -> bool {
    #[cfg(target_arch = "x86_64")]
    const READ: &str = "0";
    #[cfg(target_arch = "aarch64")]
    const READ: &str = "63";
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    const READ: &str = "-";
    let Ok(text) = fs::read_to_string(format!("/proc/{pid}/syscall")) else { return false };
    let mut f = text.split_whitespace();
    f.next() == Some(READ) && f.next() == Some("0x3")
}

/// Whether process `pid` is the monitor of the shell whose execution
/// directory is `dir`, by its command line (`PROGRAM __winx-release-monitor
/// DIR out …`, `monitor/run.rs`): for a record that names no monitor (an
/// earlier build recorded the monitor with the leader, and died before).
///
/// # References
/// - [`proc_pid_cmdline(5)`](https://man7.org/linux/man-pages/man5/proc_pid_cmdline.5.html)
fn is_monitor_of(pid: i32, dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let mut args = cmdline.split(|&b| b == 0).skip(1);
    args.next() == Some(crate::monitor::ARG.as_bytes())
        && args.next() == Some(dir.as_os_str().as_bytes())
        && args.next() == Some(b"out".as_slice())
}

/// A shell taken over from an earlier runtime.
#[derive(Debug)]
pub struct Reattached {
    /// The shell, the same process.
    pub shell: Shell,
    /// The command typed into it that is not back at its prompt yet.
    pub current: Option<CommandRecord>,
}

impl Runtime {
    /// The shells an earlier runtime left that this one has not taken over
    /// and whose monitor still runs, or whose record names neither monitor
    /// nor leader (an earlier build's, left while it started the shell).
    pub fn shells_to_reattach(&self) -> Vec<Arc<Execution>> {
        let _ = self.adopt();
        let mut v: Vec<Arc<Execution>> = self
            .executions()
            .into_iter()
            .filter(|e| e.adopted && e.state().is_unresolved())
            .filter(|e| e.terminal.load(std::sync::atomic::Ordering::SeqCst))
            .filter(|e| lock(&self.shells).get(&e.id).is_none_or(|c| c.strong_count() == 0))
            .filter(|e| match e.monitor() {
                Some(m) => crate::probe::start_time_of(m.pid) == Some(m.start_time),
                // Recorded by an earlier build while it started the shell:
                // its monitor may listen (`reattach_shell` checks).
                None => e.leader().is_none(),
            })
            .collect();
        v.sort_by_key(|e| e.started_unix);
        v
    }

    /// Takes over the shell of execution `e` from its monitor: the same
    /// process, its terminal (every chunk it prints from now on goes to
    /// `sink`) and its hook. A monitor that speaks another version of the
    /// socket's protocol is left as it is (an error says so): the shell
    /// keeps running, and counts as running until it ends. A shell whose
    /// leader the earlier runtime did not record (it died after the
    /// monitor started it, `start.rs`) is the one its recorded monitor
    /// names, and its record is completed.
    pub fn reattach_shell(self: &Arc<Self>, e: &Arc<Execution>, sink: Option<OutputSink>) -> io::Result<Reattached> {
        use std::os::linux::net::SocketAddrExt;
        let name = socket_name(&e.id);
        let conn = UnixStream::connect_addr(&std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?)?;
        // The socket's owner must be the monitor recorded (an abstract name
        // can be taken by anyone).
        let cred = rustix::net::sockopt::socket_peercred(&conn)?;
        let peer = cred.pid.as_raw_nonzero().get();
        let same = match e.monitor() {
            Some(m) => peer == m.pid && crate::probe::start_time_of(m.pid) == Some(m.start_time),
            // A record an earlier build left while it started the shell
            // names neither: the owner is its monitor by its command line.
            None => e.leader().is_none() && is_monitor_of(peer, &e.dir),
        };
        if !same || cred.uid != rustix::process::getuid() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("@{name} is held by pid {:?}, not by the monitor of shell {}", cred.pid, e.id),
            ));
        }
        conn.set_read_timeout(Some(ATTACH_WAIT))?;
        let (line, got) = fds::recv(&conn)?;
        let mut words = line.split_whitespace();
        let (tag, version, pid) = (words.next(), words.next(), words.next().and_then(|p| p.parse::<i32>().ok()));
        if tag != Some("W") {
            return Err(io::Error::other(format!("@{name}: not a monitor's answer: {line:?}")));
        }
        if version != Some(&PROTOCOL.to_string()) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "the monitor of shell {} speaks version {} of the monitor socket, this guardian {PROTOCOL}: \
                     the shell is left running, not taken over",
                    e.id,
                    version.unwrap_or("?")
                ),
            ));
        }
        let unrecorded = match (pid, e.leader()) {
            (Some(p), Some(l)) if l.pid == p => None,
            // The earlier runtime died after the monitor (recorded, and
            // checked above) started the shell, before it recorded the
            // shell: the monitor names it.
            (Some(p), None) => Some(crate::probe::spawned_leader(p, true, true)),
            _ => {
                return Err(io::Error::other(format!("the monitor of shell {} names another process ({line:?})", e.id)))
            }
        };
        let mut got = got.into_iter();
        let (Some(follower), Some(hook)) = (got.next(), got.next()) else {
            return Err(io::Error::other(format!("the monitor of shell {} sent no terminal", e.id)));
        };
        let controller: Option<OwnedFd> = got.next();
        let saved: Prompt =
            fs::read(e.dir.join(PROMPT_FILE)).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
        let current = unfinished_of(&self.data_dir, &e.id);
        // The earlier runtime read a report and died before it answered
        // (whether or not it saved it): the hook waits for the answer, and
        // nothing else will come. Taken as a report of its own, exit code
        // unknown, and answered below.
        let unanswered = pid.is_some_and(waits_for_answer);
        let prompts = saved.prompts + u64::from(unanswered);
        let at_prompt = unanswered || saved.prompts > current.as_ref().map_or(0, |c| c.prompts_before);
        // An unanswered report's exit code was not saved: unknown.
        let last_exit = if unanswered { None } else { saved.last_exit };
        let state = State { at_prompt, prompts, held: saved.held, binary: saved.binary, last_exit, ..State::default() };
        // A restricted shell (`ShellProgram::restricted`) is named so in its
        // execution's command file (`ShellProgram::describe`): commands are
        // typed into it as `eval`, its `.` refusing a path with a slash.
        let restricted =
            fs::read_to_string(e.dir.join(crate::record::COMMAND_FILE)).is_ok_and(|c| c.contains(" -r -i"));
        let core = Arc::new(Core {
            execution: e.clone(),
            restricted,
            controller,
            follower,
            state: Mutex::new(state),
            cv: Condvar::new(),
        });
        if let Some(leader) = unrecorded {
            *lock(&e.leader) = Some(leader);
            lock(&e.monitor).get_or_insert_with(|| crate::probe::spawned_leader(peer, true, true));
            self.write(e, &e.record(RecordState::Running));
        }
        lock(&self.shells).insert(e.id.clone(), Arc::downgrade(&core));
        e.set(ExecState::Running);
        let named = |what: &str| format!("winx-shell-{what}");
        let hook = UnixStream::from(hook);
        if unanswered {
            use std::io::Write;
            let st = lock(&core.state);
            crate::shell::prompt_file::save_prompt(&core.execution.dir, &st);
            (&hook).write_all(format!("{prompts}\n").as_bytes())?;
        }
        {
            let core = core.clone();
            std::thread::Builder::new().name(named("hook")).spawn(move || crate::shell::read_reports(core, hook))?;
        }
        if let (Some(c), Some(sink)) = (&core.controller, sink) {
            let reader = c.try_clone()?;
            let e = e.clone();
            std::thread::Builder::new()
                .name(named("output"))
                .spawn(move || super::shell::read_output(&e, reader, sink))?;
        }
        {
            let (rt, e) = (self.clone(), e.clone());
            let _ = conn.set_read_timeout(None);
            std::thread::Builder::new().name(named("exit")).spawn(move || {
                let code = crate::monitor::Control::from_stream(conn).leader_exit().unwrap_or_else(|| {
                    super::wait_gone(e.leader());
                    None
                });
                rt.leader_ended(&e, code);
            })?;
        }
        tracing::info!(command_id = %e.id, at_prompt, "took over a shell an earlier guardian left");
        Ok(Reattached { shell: Shell { core }, current })
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    /// A shell whose hook waits for its answer (bash's `read -u 3`) is seen
    /// waiting; a process waiting otherwise is not.
    #[test]
    fn a_shell_reading_descriptor_3_waits_for_an_answer_another_process_does_not() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let mut hook = Command::new("sh")
            .args(["-c", "exec 3<&0 0</dev/null; exec bash -c 'read -r -u 3 x; [ \"$x\" = 7 ]'"])
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .spawn()
            .unwrap();
        let mut other = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = hook.id() as i32;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !super::waits_for_answer(pid) {
            assert!(Instant::now() < deadline, "never seen waiting");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!super::waits_for_answer(other.id() as i32));
        (&ours).write_all(b"7\n").unwrap();
        assert!(hook.wait().unwrap().success());
        other.kill().unwrap();
        other.wait().unwrap();
    }
}
