//! The runtime's side of a monitor: the command that starts it, and the
//! control socket on which it names the leader and reports its exit.

use std::ffi::OsStr;
use std::io::{self, BufRead, BufReader};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long a monitor may take to name its leader.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// The leader's standard input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeaderIo {
    /// `/dev/null`.
    Null,
    /// The monitor's standard output (a terminal's follower).
    Stdout,
}

/// A monitor and its leader, started.
pub(crate) struct Monitored {
    /// The monitor (this process's child).
    pub(crate) child: Child,
    /// The leader's pid.
    pub(crate) leader: i32,
    /// What the monitor says next: the leader's exit.
    pub(crate) control: Control,
}

/// The monitor's control socket, after the handshake.
pub(crate) struct Control {
    reader: BufReader<UnixStream>,
}

impl Control {
    /// The control socket of a monitor this runtime attached to
    /// (`attach.rs`), after its first message.
    pub(crate) fn from_stream(stream: UnixStream) -> Control {
        Control { reader: BufReader::new(stream) }
    }

    /// Waits until the monitor reports the leader's exit: `Some` with its
    /// code (`None` when not known), or `None` when the monitor is gone
    /// without saying (killed: the leader may still run).
    pub(crate) fn leader_exit(mut self) -> Option<Option<i32>> {
        let _ = self.reader.get_ref().set_read_timeout(None);
        let mut line = String::new();
        loop {
            line.clear();
            match self.reader.read_line(&mut line) {
                Ok(0) | Err(_) => return None,
                Ok(_) => {
                    if let Some(code) = line.trim_end().strip_prefix("X ") {
                        return Some(code.parse().ok());
                    }
                }
            }
        }
    }
}

/// A command that starts `program` as the monitor of the execution whose
/// directory is `dir`, its leader to be appended (`.arg`s): the caller
/// sets the leader's working directory, environment, standard output and
/// error on it and spawns it, then calls [`start_monitored`].
pub(crate) fn command(program: &Path, dir: &Path, io: LeaderIo, own_group: bool) -> io::Result<(Command, UnixStream)> {
    let (ours, theirs) = UnixStream::pair()?;
    let mut cmd = Command::new(program);
    cmd.arg(super::names::ARG)
        .arg(dir)
        .arg(match io {
            LeaderIo::Null => "null",
            LeaderIo::Stdout => "out",
        })
        .arg(if own_group { "1" } else { "0" })
        .stdin(Stdio::from(OwnedFd::from(theirs)));
    Ok((cmd, ours))
}

/// After the spawn of a monitor command: waits for the monitor to name its
/// leader. An error when it could not start the leader (it says why) or
/// did not say in time (then it is not waited for here: the runtime's
/// reaper takes it).
///
/// The monitor starts the leader only on this word, sent first: a shell's
/// monitor is sent `held` (the hook socket's runtime end, then the
/// terminal's controller when the runtime keeps it), which it holds for
/// the shell's life; another monitor `G`. The caller recorded the monitor
/// before (`Runtime::spawn_monitor`).
pub(crate) fn start_monitored(
    child: Child,
    ours: UnixStream,
    program: &OsStr,
    held: &[BorrowedFd<'_>],
) -> io::Result<Monitored> {
    let ended = |why: &dyn std::fmt::Display| {
        io::Error::other(format!(
            "the monitor {} ended before starting the command ({why}; is it a program that calls \
             winx_release_runtime::monitor::enter?)",
            Path::new(program).display()
        ))
    };
    super::fds::send(&ours, if held.is_empty() { "G\n" } else { "F\n" }, held).map_err(|e| ended(&e))?;
    ours.set_read_timeout(Some(HANDSHAKE))?;
    let mut reader = BufReader::new(ours);
    let mut line = String::new();
    let got = reader.read_line(&mut line);
    let line = line.trim_end();
    match (got, line.strip_prefix("L ").and_then(|p| p.parse::<i32>().ok())) {
        (Ok(_), Some(leader)) => Ok(Monitored { child, leader, control: Control { reader } }),
        (Ok(0), _) => Err(ended(&"it said nothing")),
        (Ok(_), None) => Err(io::Error::other(format!(
            "the monitor could not start the command: {}",
            line.strip_prefix("E ").unwrap_or(line)
        ))),
        (Err(e), _) => Err(io::Error::new(e.kind(), format!("the monitor did not name the command's process: {e}"))),
    }
}
