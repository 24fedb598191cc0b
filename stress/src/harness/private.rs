//! The stress tool's use of the harness: its private directory (with gate
//! files and logs besides), and the guardian and MCP frontends of a run,
//! all this same executable, all with an environment that points only into
//! the private directory.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;

use crate::harness::client::McpClient;
use crate::harness::dirs::PrivateDirs;
use crate::harness::guardian::GuardianProc;

/// A variable naming a command the guardian is started through, for
/// profiling. It must exec its arguments, so that the process the tool
/// signals and measures is the guardian; the wrapper runs in the private
/// environment too.
pub const GUARDIAN_WRAPPER: &str = "WINX_STRESS_GUARDIAN_WRAPPER";

/// How long the guardian may take to print its ready line.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The private directory of a run.
pub struct Private {
    /// The directories of every child (workspaces in `dirs.ws`).
    pub dirs: PrivateDirs,
    /// Gate files that hold blocking commands.
    pub gates: PathBuf,
    /// Logs of the children.
    pub logs: PathBuf,
    exe: PathBuf,
}

impl Private {
    /// Creates the private directory below `base` (default: the system
    /// temporary directory).
    pub fn create(base: Option<&Path>) -> anyhow::Result<Private> {
        let dirs = PrivateDirs::create("winx-stress-", base).with_context(|| {
            format!("private directory in {}", base.map_or_else(std::env::temp_dir, Path::to_path_buf).display())
        })?;
        let p = Private {
            gates: dirs.root.join("gates"),
            logs: dirs.root.join("logs"),
            exe: std::env::current_exe().context("current executable")?,
            dirs,
        };
        for d in [&p.dirs.data, &p.gates, &p.logs] {
            std::fs::create_dir_all(d).with_context(|| format!("{}", d.display()))?;
        }
        Ok(p)
    }

    /// A command running this executable with `args` in the private
    /// environment: `XDG_DATA_HOME` and `HOME` private, `XDG_RUNTIME_DIR` and
    /// `WINX_GUARDIAN_SOCKET` unset, its own process group (a terminal's
    /// Ctrl-C reaches only the stress tool, which then stops everything in
    /// order), stdin null, stderr appended to `logs/<log>.log`.
    pub fn command(&self, args: &[&str], log: &str) -> anyhow::Result<Command> {
        self.command_through(&[], args, log)
    }

    /// [`Private::command`] run through `wrapper` (a command that execs its
    /// arguments; empty for none).
    fn command_through(&self, wrapper: &[&str], args: &[&str], log: &str) -> anyhow::Result<Command> {
        let mut cmd = self.dirs.command(wrapper, &self.exe, args);
        cmd.stdin(Stdio::null()).process_group(0);
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "warn");
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.logs.join(format!("{log}.log")))
            .context("log file")?;
        cmd.stderr(log);
        Ok(cmd)
    }

    /// Starts `guardian --socket <socket> <extra>` and waits for its ready
    /// line. With [`GUARDIAN_WRAPPER`] set, the guardian runs through it
    /// (words split at spaces), e.g. a script that execs a profiler.
    pub fn start_guardian(&self, extra: &[&str]) -> anyhow::Result<GuardianProc> {
        let socket = self.dirs.sock.to_str().context("socket path is not UTF-8")?;
        let mut args = vec!["guardian", "--socket", socket];
        args.extend_from_slice(extra);
        let wrapper = std::env::var(GUARDIAN_WRAPPER).unwrap_or_default();
        let wrapper: Vec<&str> = wrapper.split_whitespace().collect();
        GuardianProc::spawn(self.command_through(&wrapper, &args, "guardian")?, READY_TIMEOUT)
            .map_err(|e| anyhow::anyhow!("{e:#}; see logs/guardian.log"))
    }

    /// Ends what the run's guardians leave behind: every execution's monitor
    /// and its shell outlive the guardian by design (a stopped guardian's
    /// successor takes them over), so a run that is over SIGKILLs every
    /// process whose command line names its private directory (monitors
    /// and shells do; what a shell ran dies with its terminal or ends with
    /// its gate). Returns how many were signalled.
    pub fn end_leftovers(&self) -> usize {
        let mut root = self.dirs.root.as_os_str().as_encoded_bytes().to_vec();
        root.push(b'/');
        let me = std::process::id();
        let mut n = 0;
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            if pid == me {
                continue;
            }
            let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else { continue };
            if !cmdline.windows(root.len()).any(|w| w == root.as_slice()) {
                continue;
            }
            if let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) {
                if rustix::process::kill_process(pid, rustix::process::Signal::KILL).is_ok() {
                    n += 1;
                }
            }
        }
        n
    }

    /// Runs this executable with `args` to completion and parses its stdout
    /// as one JSON object.
    pub fn run_json(&self, args: &[&str], log: &str) -> anyhow::Result<(i32, Value)> {
        let out = self.command(args, log)?.stdout(Stdio::piped()).output().context("run")?;
        let code = out.status.code().unwrap_or(-1);
        let v = serde_json::from_slice(&out.stdout)
            .with_context(|| format!("{args:?} printed no JSON (exit {code}); see logs/{log}.log"))?;
        Ok((code, v))
    }

    /// Starts an MCP frontend (`mcp --socket <socket>` plus `extra`).
    pub fn spawn_frontend(&self, name: &str, extra: &[&str], timeout: Duration) -> anyhow::Result<McpClient> {
        let socket = self.dirs.sock.to_str().context("socket path is not UTF-8")?;
        let mut args = vec!["mcp", "--socket", socket];
        args.extend_from_slice(extra);
        let child = self
            .command(&args, name)?
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("start {name}"))?;
        let client = McpClient::new(name, child, timeout)?;
        client.initialize().map_err(|e| anyhow::anyhow!("{name}: MCP initialize: {e} (see logs/{name}.log)"))?;
        Ok(client)
    }
}
