//! `winx-release mcp`: the frontend, an MCP server on stdio.
//!
//! The tools (`Initialize`, `ReadFiles`, `EditFiles`, `BashCommand`) are
//! implemented by `winx-release-mcp-tools`; this module only carries
//! them over MCP with the `rmcp` crate: it lists their JSON Schemas, hands
//! each call's raw argument object to the adapter on a blocking thread, and
//! wraps the adapter's JSON result as `structuredContent` plus one text
//! block: a rendering for a language model (`render.rs`; with
//! `--text-result json` the same object serialised as JSON, with
//! `--text-result summary` a one-line summary), with `isError` when the
//! status is `denied`, `invalid_input` or `failed`. `ReadFiles` replies are streamed as the helpers are read
//! (`stream.rs`, `transport.rs`).
//!
//! Stdout carries only the MCP protocol; logs go to stderr.

mod escape;
mod frame;
mod incoming;
mod launcher;
mod lines;
mod render;
mod result;
mod server;
mod stream;
mod tools;
mod transport;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use rmcp::ServiceExt;
use winx_release_mcp_tools::{Frontend, FrontendConfig};

pub use launcher::launch_guardian;
pub use result::TextResult;
pub use server::WinxServer;
pub use transport::set_idle_hook;

/// Longest JSON-RPC request line accepted on stdin for a `tools/call`
/// request (65 MiB): a 32 MiB helper's text written through `EditFiles`
/// fits even when every byte needs a two-character escape, with 1 MiB for
/// the rest of the request. Other lines may be 1 MiB
/// (`lines::SMALL_LINE`). A longer line is answered with an Invalid
/// Request error and skipped.
pub const MAX_REQUEST_LINE: usize = 65 * 1024 * 1024;

/// Arguments of `winx-release mcp`.
#[derive(Args, Debug)]
pub struct McpArgs {
    /// Guardian socket (default: `$WINX_GUARDIAN_SOCKET`, `$XDG_RUNTIME_DIR/winx/guardian.sock`,
    /// `/run/user/<uid>/winx/guardian.sock`, `/tmp/winx-<uid>/guardian.sock`,
    /// `D/run/guardian.sock`, `<cache>/winx-<hash>/guardian.sock`). A guardian is started
    /// there at `Initialize` when none answers.
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// What each tool result's text block holds: `text`, a rendering for a language model (status,
    /// labelled fields, contents and output unescaped in fences); `json`, the result object itself
    /// (the same as `structuredContent`); or `summary`, one line (for hosts that show the model
    /// `structuredContent`).
    #[arg(long, value_enum, default_value = "text")]
    pub text_result: TextResult,
    /// Run commands inside this process with no guardian (an embedded runtime: every release is
    /// denied with `embedded_runtime`).
    #[arg(long)]
    pub embedded: bool,
}

/// Runs the MCP server on stdio until the client closes stdin.
pub fn run(args: &McpArgs) -> anyhow::Result<u8> {
    let mut config = FrontendConfig::from_env(args.socket.as_deref(), args.embedded);
    if !args.embedded {
        config = config.with_launcher(Box::new(|path: &std::path::Path| launch_guardian(path)));
    }
    let socket = config.socket_path.clone();
    let frontend = Arc::new(Frontend::new(config).context("frontend")?);
    tracing::info!(socket = %socket.display(), embedded = args.embedded, "MCP frontend starting on stdio");

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("winx-mcp")
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let result = runtime.block_on(async move {
        let streams = transport::Streams::default();
        // Room for a whole 32 MiB helper written through EditFiles, with
        // JSON escaping; a longer line is answered and skipped.
        let transport = transport::Stdio::new(MAX_REQUEST_LINE, streams.clone()).context("stdio transport")?;
        let service = WinxServer::streaming(frontend, streams, args.text_result)
            .serve(transport)
            .await
            .map_err(|e| anyhow::anyhow!("MCP initialisation failed: {e}"))?;
        let reason = service.waiting().await.context("MCP service task")?;
        tracing::info!(?reason, "MCP client went away");
        anyhow::Ok(())
    });
    // A tool call still blocked in the adapter (a long command wait) must not
    // keep the process alive once the client is gone.
    runtime.shutdown_timeout(Duration::from_millis(200));
    result.map(|()| crate::common::EXIT_OK)
}
