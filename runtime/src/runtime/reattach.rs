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

use serde::{Deserialize, Serialize};

use super::Runtime;
use crate::execution::{ExecState, Execution};
use crate::monitor::{fds, socket_name, PROTOCOL};
use crate::shell::command::{unfinished_of, CommandRecord};
use crate::shell::{Core, OutputSink, Shell, State};
use winx_release_kernel::sys::lock;

/// The hook's last report, in the shell's execution directory.
pub(crate) const PROMPT_FILE: &str = "prompt.json";

/// How long a monitor may take to answer.
const ATTACH_WAIT: Duration = Duration::from_secs(5);

#[derive(Default, Serialize, Deserialize)]
struct Prompt {
    prompts: u64,
    binary: Option<(u64, u64)>,
    held: Vec<String>,
}

/// Writes what a report left in `st` to `dir/prompt.json` (not durably: a
/// runtime that dies leaves the page cache; a machine that dies, no shell).
pub(crate) fn save_prompt(dir: &Path, st: &State) {
    let p = Prompt { prompts: st.prompts, binary: st.binary, held: st.held.clone() };
    if let Ok(bytes) = serde_json::to_vec(&p) {
        let _ = fs::write(dir.join(PROMPT_FILE), bytes);
    }
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
    /// and whose monitor still runs.
    pub fn shells_to_reattach(&self) -> Vec<Arc<Execution>> {
        let _ = self.adopt();
        let mut v: Vec<Arc<Execution>> = self
            .executions()
            .into_iter()
            .filter(|e| e.adopted && e.state().is_unresolved())
            .filter(|e| e.terminal.load(std::sync::atomic::Ordering::SeqCst))
            .filter(|e| lock(&self.shells).get(&e.id).is_none_or(|c| c.strong_count() == 0))
            .filter(|e| e.monitor().is_some_and(|m| crate::probe::start_time_of(m.pid) == Some(m.start_time)))
            .collect();
        v.sort_by_key(|e| e.started_unix);
        v
    }

    /// Takes over the shell of execution `e` from its monitor: the same
    /// process, its terminal (every chunk it prints from now on goes to
    /// `sink`) and its hook. A monitor that speaks another version of the
    /// socket's protocol is left as it is (an error says so): the shell
    /// keeps running, and counts as running until it ends.
    pub fn reattach_shell(self: &Arc<Self>, e: &Arc<Execution>, sink: Option<OutputSink>) -> io::Result<Reattached> {
        use std::os::linux::net::SocketAddrExt;
        let name = socket_name(&e.id);
        let conn = UnixStream::connect_addr(&std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?)?;
        // The socket's owner must be the monitor recorded (an abstract name
        // can be taken by anyone).
        let cred = rustix::net::sockopt::socket_peercred(&conn)?;
        let recorded = e.monitor();
        let same = recorded.is_some_and(|m| {
            cred.pid.as_raw_nonzero().get() == m.pid && crate::probe::start_time_of(m.pid) == Some(m.start_time)
        });
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
        if pid.is_none() || pid != e.leader().map(|l| l.pid) {
            return Err(io::Error::other(format!("the monitor of shell {} names another process ({line:?})", e.id)));
        }
        let mut got = got.into_iter();
        let (Some(follower), Some(hook)) = (got.next(), got.next()) else {
            return Err(io::Error::other(format!("the monitor of shell {} sent no terminal", e.id)));
        };
        let controller: Option<OwnedFd> = got.next();
        let saved: Prompt =
            fs::read(e.dir.join(PROMPT_FILE)).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
        let current = unfinished_of(&self.data_dir, &e.id);
        let at_prompt = saved.prompts > current.as_ref().map_or(0, |c| c.prompts_before);
        let state =
            State { at_prompt, prompts: saved.prompts, held: saved.held, binary: saved.binary, ..State::default() };
        let core =
            Arc::new(Core { execution: e.clone(), controller, follower, state: Mutex::new(state), cv: Condvar::new() });
        lock(&self.shells).insert(e.id.clone(), Arc::downgrade(&core));
        e.set(ExecState::Running);
        let named = |what: &str| format!("winx-shell-{what}");
        {
            let (core, hook) = (core.clone(), UnixStream::from(hook));
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
