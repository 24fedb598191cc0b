//! A running guardian: started, waited for until its ready line, stopped.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::Value;

use crate::harness::read_line::read_line_timeout;

/// A running guardian and its ready line.
pub struct GuardianProc {
    child: Child,
    /// Its ready line.
    pub ready: Value,
}

impl GuardianProc {
    /// Spawns `cmd` (a `guardian` command; its stdout is piped here) and
    /// waits up to `timeout` for its ready line, a JSON object whose
    /// `event` is `ready`. Without one it kills and reaps the process.
    pub fn spawn(mut cmd: Command, timeout: Duration) -> anyhow::Result<GuardianProc> {
        let mut child = cmd.stdout(Stdio::piped()).spawn().context("start the guardian")?;
        let stdout = child.stdout.take().context("guardian stdout")?;
        let ready = read_line_timeout(stdout, timeout)
            .map_err(|e| anyhow::anyhow!("the guardian printed no ready line ({e})"))
            .and_then(|line| {
                let v: Value = serde_json::from_str(line.trim_end()).context("guardian ready line")?;
                anyhow::ensure!(v["event"] == "ready", "unexpected guardian line: {}", line.trim_end());
                Ok(v)
            });
        match ready {
            Ok(ready) => Ok(GuardianProc { child, ready }),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(e)
            }
        }
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
