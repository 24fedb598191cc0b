//! `winx-release guardian`.

use std::path::PathBuf;

use clap::Args;
use winx_release_guardian::{serve_with, ServeOptions};
use winx_release_runtime::LivenessChoice;

use crate::common::EXIT_OK;

/// Arguments of `winx-release guardian`.
#[derive(Args, Debug)]
pub struct GuardianArgs {
    /// Socket path (default: `$WINX_GUARDIAN_SOCKET`, `$XDG_RUNTIME_DIR/winx/guardian.sock`,
    /// `/run/user/<uid>/winx/guardian.sock`, `/tmp/winx-<uid>/guardian.sock`,
    /// `D/run/guardian.sock`, `<cache>/winx-<hash>/guardian.sock`).
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Resolved executions whose payloads are kept in `D/executions`; older
    /// ones are removed (running or unresolved ones never are).
    #[arg(long, value_name = "N", default_value_t = winx_release_engine::retention::DEFAULT_KEEP_EXECUTIONS)]
    pub keep_executions: usize,
    /// Days mutation receipts in `D/receipts` are kept.
    #[arg(long, value_name = "N", default_value_t = winx_release_engine::retention::DEFAULT_KEEP_RECEIPTS_DAYS,
        value_parser = clap::value_parser!(u64).range(0..=36_500))]
    pub keep_receipts_days: u64,
    /// How the guardian tells that a command still runs: `auto` (a cgroup per execution where a delegated
    /// cgroup v2 subtree can be had, else the /proc signals) or `proc` (the /proc signals only).
    #[arg(long, value_enum, default_value_t = Liveness::Auto, env = "WINX_LIVENESS")]
    pub liveness: Liveness,
    /// Instead of running a guardian, ask the one answering on the socket (after the trust checks a
    /// frontend makes) to stop as on SIGTERM; refused, naming them, while an execution runs.
    #[arg(long)]
    pub stop: bool,
    /// With --stop: stop even while executions run (they keep running; nothing is signalled).
    #[arg(long, requires = "stop")]
    pub force: bool,
}

/// `--liveness`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// cgroup where it can be had, else /proc.
    Auto,
    /// /proc only.
    Proc,
}

/// Runs the guardian in the foreground until SIGTERM or SIGINT (or, with
/// `--stop`, stops the running one).
pub fn run(args: &GuardianArgs) -> anyhow::Result<u8> {
    let socket = args.socket.clone().unwrap_or_else(winx_release_engine::layout::default_socket_path);
    if args.stop {
        return stop(&socket, args.force);
    }
    let data_dir = winx_release_engine::layout::default_data_dir();
    let retention = winx_release_engine::retention::RetentionPolicy {
        keep_executions: args.keep_executions,
        keep_receipts: std::time::Duration::from_secs(args.keep_receipts_days * 86_400),
    };
    let liveness = match args.liveness {
        Liveness::Auto => LivenessChoice::Auto,
        Liveness::Proc => LivenessChoice::Proc,
    };
    serve_with(&socket, &data_dir, &ServeOptions { retention, liveness })?;
    Ok(EXIT_OK)
}

/// `--stop`: asks the guardian at `socket` to stop, then waits (up to 30 s)
/// until it no longer answers. A refusal (`execution_active`) is one line
/// naming what runs, exit 1.
fn stop(socket: &std::path::Path, force: bool) -> anyhow::Result<u8> {
    use winx_release_protocol::client::{ClientError, GuardianClient};
    let (mut client, hello) = GuardianClient::connect_hello(socket, crate::common::quick())
        .map_err(|e| anyhow::anyhow!("no guardian to stop at {}: {e}", socket.display()))?;
    let pid = hello.pid.map_or_else(|| "?".to_owned(), |p| p.to_string());
    match client.stop(force) {
        Ok(reply) => {
            drop(client);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while GuardianClient::connect(socket, crate::common::quick()).is_ok() {
                anyhow::ensure!(
                    std::time::Instant::now() < deadline,
                    "the guardian (pid {pid}) still answers at {} 30 s after it was asked to stop",
                    socket.display()
                );
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            let left = if reply.running.is_empty() {
                String::new()
            } else {
                format!("; {} execution(s) it ran keep running", reply.running.len())
            };
            outln!("the guardian (pid {pid}) at {} stopped{left}", socket.display())?;
            Ok(EXIT_OK)
        }
        Err(ClientError::Remote { code, message }) => {
            anyhow::bail!("the guardian (pid {pid}) refused to stop ({}): {message}", code.as_str())
        }
        Err(e) => Err(anyhow::anyhow!("stop: {e}")),
    }
}
