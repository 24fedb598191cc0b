//! The private directory and the real processes of a run: one guardian and
//! several MCP frontends, all this same executable, all with an environment
//! that points only into the private directory.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::Value;

use crate::harness::client::McpClient;

/// How long the guardian may take to print its ready line.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The private directory of a run.
pub struct Private {
    /// Its root (canonical).
    pub root: PathBuf,
    /// `XDG_DATA_HOME` of every child.
    pub xdg_data: PathBuf,
    /// The data directory `D` = `XDG_DATA_HOME/winx`.
    pub data_dir: PathBuf,
    /// `HOME` of every child.
    pub home: PathBuf,
    /// The guardian socket.
    pub socket: PathBuf,
    /// Gate files that hold blocking commands.
    pub gates: PathBuf,
    /// Logs of the children.
    pub logs: PathBuf,
    /// Workspaces live here.
    pub workspaces: PathBuf,
    exe: PathBuf,
    temp: Option<tempfile::TempDir>,
}

impl Private {
    /// Creates the private directory below `base` (default: the system
    /// temporary directory).
    pub fn create(base: Option<&Path>) -> anyhow::Result<Private> {
        let base = base.map_or_else(std::env::temp_dir, Path::to_path_buf);
        let temp = tempfile::Builder::new()
            .prefix("winx-stress-")
            .tempdir_in(&base)
            .with_context(|| format!("private directory in {}", base.display()))?;
        let root = std::fs::canonicalize(temp.path()).context("canonical private directory")?;
        let p = Private {
            xdg_data: root.join("data"),
            data_dir: root.join("data").join("winx"),
            home: root.join("home"),
            socket: root.join("run").join("g.sock"),
            gates: root.join("gates"),
            logs: root.join("logs"),
            workspaces: root.join("ws"),
            exe: std::env::current_exe().context("current executable")?,
            root,
            temp: Some(temp),
        };
        for d in [&p.data_dir, &p.home, &p.gates, &p.logs, &p.workspaces] {
            std::fs::create_dir_all(d).with_context(|| format!("{}", d.display()))?;
        }
        Ok(p)
    }

    /// Keeps the directory after the run instead of removing it.
    pub fn keep(&mut self) -> PathBuf {
        if let Some(t) = self.temp.take() {
            let _ = t.keep();
        }
        self.root.clone()
    }

    /// Removes the directory now (also done on drop unless kept).
    pub fn remove(&mut self) {
        if let Some(t) = self.temp.take() {
            let _ = t.close();
        }
    }

    /// A command running this executable with `args` in the private
    /// environment: `XDG_DATA_HOME` and `HOME` private, `XDG_RUNTIME_DIR` and
    /// `WINX_GUARDIAN_SOCKET` unset, its own process group (a terminal's
    /// Ctrl-C reaches only the stress tool, which then stops everything in
    /// order), stdin null, stderr appended to `logs/<log>.log`.
    pub fn command(&self, args: &[&str], log: &str) -> anyhow::Result<Command> {
        let mut cmd = Command::new(&self.exe);
        cmd.args(args)
            .env("XDG_DATA_HOME", &self.xdg_data)
            .env("HOME", &self.home)
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("WINX_GUARDIAN_SOCKET")
            .stdin(Stdio::null())
            .process_group(0);
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
        let socket = self.socket.to_str().context("socket path is not UTF-8")?;
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

/// The running guardian.
pub struct GuardianProc {
    child: Child,
    /// Its ready line.
    pub ready: Value,
}

impl GuardianProc {
    /// Starts `guardian --socket <socket>` and waits for its ready line.
    pub fn start(p: &Private) -> anyhow::Result<GuardianProc> {
        GuardianProc::start_with(p, &[])
    }

    /// Starts `guardian --socket <socket> <extra>` and waits for its ready
    /// line.
    pub fn start_with(p: &Private, extra: &[&str]) -> anyhow::Result<GuardianProc> {
        let socket = p.socket.to_str().context("socket path is not UTF-8")?;
        let mut args = vec!["guardian", "--socket", socket];
        args.extend_from_slice(extra);
        let mut child = p.command(&args, "guardian")?.stdout(Stdio::piped()).spawn().context("start the guardian")?;
        let stdout = child.stdout.take().context("guardian stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut line = String::new();
            let first = r.read_line(&mut line).map(|_| line.clone());
            let _ = tx.send(first);
            let _ = std::io::copy(&mut r.take(u64::MAX), &mut std::io::sink());
        });
        let line = match rx.recv_timeout(READY_TIMEOUT) {
            Ok(Ok(l)) if !l.is_empty() => l,
            other => {
                let _ = child.kill();
                let _ = child.wait();
                anyhow::bail!("the guardian printed no ready line ({other:?}); see logs/guardian.log");
            }
        };
        let ready: Value = serde_json::from_str(line.trim_end()).context("guardian ready line")?;
        anyhow::ensure!(ready["event"] == "ready", "unexpected guardian line: {}", line.trim_end());
        Ok(GuardianProc { child, ready })
    }

    /// The capabilities of its ready line.
    pub fn capabilities(&self) -> Vec<String> {
        self.ready["capabilities"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, as a crash would, and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits up to `grace` before SIGKILL. Returns its exit
    /// code when it exited by itself.
    pub fn stop(&mut self, grace: Duration) -> Option<i32> {
        if let Some(pid) = i32::try_from(self.child.id()).ok().and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + grace;
        loop {
            match self.child.try_wait() {
                Ok(Some(s)) => return s.code(),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return None;
                }
            }
        }
    }
}

impl Drop for GuardianProc {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.stop(Duration::from_secs(5));
        }
    }
}
