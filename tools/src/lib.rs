//! The `winx-release` command: guardian, MCP frontend, scan, audit,
//! recover and stress.
#![deny(unsafe_code)]
#![deny(missing_docs)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod audit_cmd;
mod guardian_cmd;
mod mcp;
mod recover_cmd;
mod scan_cmd;
mod stress_cmd;

/// Exit status for success.
pub const EXIT_OK: u8 = 0;
/// Exit status for any failure other than usage and a fail-closed scan.
pub const EXIT_FAILURE: u8 = 1;
/// Exit status for a scan that failed closed.
pub const EXIT_FAIL_CLOSED: u8 = 3;

#[derive(Parser, Debug)]
#[command(name = "winx-release", version, about = "Fail-closed release of temporary helpers left by coding agents")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Scan backing roots as a release does; print the report as JSON, exit 3 if it fails closed.
    Scan(scan_cmd::ScanArgs),
    /// Report a workspace's helper usage per session as JSON; deletes nothing.
    Audit(audit_cmd::AuditArgs),
    /// Run the durable guardian in the foreground.
    Guardian(guardian_cmd::GuardianArgs),
    /// Run crash recovery without starting a guardian.
    Recover(recover_cmd::RecoverArgs),
    /// Drive a real guardian and MCP frontends with an adversarial workload; check every invariant.
    Stress(winx_release_stress::Config),
    /// Run the frontend: an MCP server on stdio with Initialize, ReadFiles, EditFiles and BashCommand.
    Mcp(mcp::McpArgs),
}

/// Runs the command line and returns the process exit status.
pub fn main() -> ExitCode {
    init_tracing();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Scan(a) => scan_cmd::run(&a),
        Command::Audit(a) => audit_cmd::run(&a),
        Command::Stress(a) => stress_cmd::run(&a),
        Command::Guardian(a) => guardian_cmd::run(&a),
        Command::Recover(a) => recover_cmd::run(&a),
        Command::Mcp(a) => mcp::run(&a),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("winx-release: {e:#}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal();
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr).try_init();
}

/// Prints `value` as one JSON line on stdout.
pub(crate) fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}
