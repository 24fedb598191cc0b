//! What a monitor and the runtimes that start it or find it again agree
//! on: the argument that makes a program a monitor, the file of its
//! leader's exit, and the socket on which it hands a shell over.

/// The hidden first argument that makes a program that calls
/// [`enter`](super::enter) a monitor.
pub const ARG: &str = "__winx-release-monitor";

/// The file in `D/executions/<id>/` where a monitor records, durably and
/// as its last act, the leader's exit status (`<code>\n`, `?` when it is
/// not known): a monitor that is gone without it was killed.
pub const EXIT_FILE: &str = "monitor.exit";

/// The abstract Unix socket name (no file: the data directory is a backing
/// root every release scans, where a socket fails the scan closed) on which
/// a shell's monitor hands the shell's terminal and hook to the next
/// runtime (docs/PROTOCOL.md, "The monitor socket"): `winx-release/monitor/<id>`.
pub fn socket_name(id: &str) -> String {
    format!("winx-release/monitor/{id}")
}

/// The version of that socket's protocol this build speaks.
pub const PROTOCOL: u32 = 1;
