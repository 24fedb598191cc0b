//! The `winx-release` command: guardian, MCP frontend, scan, audit,
//! recover, release, status and stress.
#![deny(unsafe_code)]
#![deny(missing_docs)]

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

#[macro_use]
mod common;

mod audit_cmd;
mod guardian_cmd;
mod mcp;
mod recover_cmd;
mod release_cmd;
mod scan_cmd;
mod status_cmd;
mod stress_cmd;

pub use common::{EXIT_FAILURE, EXIT_FAIL_CLOSED, EXIT_OK};
/// Sets what `winx-release mcp` calls once it has been idle for a moment
/// after answering (the binary gives the allocator's free memory back to
/// the system there); the first call wins.
pub use mcp::set_idle_hook;

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
    /// Release helpers of a registered thread through the guarded path EditFiles takes; print the outcomes.
    Release(release_cmd::ReleaseArgs),
    /// Say whether a guardian answers on the socket a frontend would use: pid, liveness, sessions, executions.
    Status(status_cmd::StatusArgs),
    /// Drive a real guardian and MCP frontends with an adversarial workload; check every invariant.
    Stress(winx_release_stress::Config),
    /// Run the frontend: an MCP server on stdio with Initialize, ReadFiles, EditFiles and BashCommand.
    Mcp(mcp::McpArgs),
    /// Print a shell completion script to stdout (for example `winx-release completions bash`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) to stdout: `winx-release man | man -l -`.
    Man,
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
        Command::Release(a) => release_cmd::run(&a),
        Command::Status(a) => status_cmd::run(&a),
        Command::Mcp(a) => mcp::run(&a),
        Command::Completions { shell } => completions(shell),
        Command::Man => man_page(),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        // The reader of standard output went away (`| head`): nothing
        // more to say, and nothing failed that the user asked for.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::from(EXIT_OK)
        }
        Err(e) => {
            eprintln!("winx-release: {e:#}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

/// Writes the completion script of `shell` to stdout.
fn completions(shell: clap_complete::Shell) -> anyhow::Result<u8> {
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, "winx-release", &mut std::io::stdout().lock());
    Ok(EXIT_OK)
}

/// Writes the manual page to stdout: the command, then each subcommand's
/// synopsis and options.
fn man_page() -> anyhow::Result<u8> {
    use std::io::Write;
    let cmd = Cli::command();
    let mut out = Vec::new();
    // The whole page, without clap_mangen's list of per-subcommand pages
    // (`winx-release-scan(1)`, ...), which are not installed: every
    // subcommand has a section of this page instead.
    let top = clap_mangen::Man::new(cmd.clone());
    top.render_title(&mut out)?;
    top.render_name_section(&mut out)?;
    top.render_synopsis_section(&mut out)?;
    top.render_description_section(&mut out)?;
    top.render_options_section(&mut out)?;
    top.render_version_section(&mut out)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let sub = sub.clone().bin_name(format!("winx-release {}", sub.get_name()));
        writeln!(out, ".SH \"WINX-RELEASE {}\"", sub.get_name().to_uppercase())?;
        let man = clap_mangen::Man::new(sub);
        man.render_description_section(&mut out)?;
        man.render_synopsis_section(&mut out)?;
        man.render_options_section(&mut out)?;
    }
    std::io::stdout().lock().write_all(&out)?;
    Ok(EXIT_OK)
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal();
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr).try_init();
}
