//! `winx-release release`: a person's guarded release of helpers.
//!
//! It goes through the path a model's `EditFiles` takes, in this process:
//! a [`Frontend`] of its own (its own token secret, so a later run cannot
//! replay this run's receipts), attached with `Initialize` to a thread the
//! guardian has registered, under the mode and `code_writer_config` the
//! guardian recorded at that thread's `Initialize`. It reads the named
//! helpers with `ReadFiles` (which pins each one and gives its token) and
//! releases them with `EditFiles` in batches of at most 100, so every check
//! of the contract applies, and a batch that touched anything leaves its
//! receipt. A batch that is not `completed` leaves the later ones
//! `not_attempted`. `--dry-run` sends each batch as a dry run: the guardian
//! runs every check under the barrier and captures nothing.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use serde_json::{json, Value};
use winx_release_mcp_tools::{Frontend, FrontendConfig};
use winx_release_protocol::client::GuardianClient;

use crate::common::{print_json, EXIT_FAILURE, EXIT_OK};

/// Most helpers per `EditFiles` release (the contract's bound).
pub const BATCH: usize = 100;

/// Arguments of `winx-release release`.
#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("targets").required(true).args(["paths", "all"]))]
pub struct ReleaseArgs {
    /// The workspace the thread was initialised in.
    #[arg(long)]
    pub workspace: PathBuf,
    /// The thread whose helpers to release (as `Initialize` returned it).
    #[arg(long)]
    pub thread: String,
    /// Helpers to release, as exact absolute paths.
    pub paths: Vec<PathBuf>,
    /// Every helper of the thread's session directory.
    #[arg(long, conflicts_with = "paths")]
    pub all: bool,
    /// Guardian socket (default: as for `mcp`).
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Run every guardian check under the barrier and capture nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// One JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs the release and prints its outcomes. Exit 0 when every helper was
/// released (with `--dry-run`: passed every check), else 1.
pub fn run(args: &ReleaseArgs) -> anyhow::Result<u8> {
    let socket = winx_release_protocol::resolve_socket_path(args.socket.as_deref());
    let ws = std::fs::canonicalize(&args.workspace)
        .with_context(|| format!("workspace {}", args.workspace.display()))?
        .into_os_string()
        .into_string()
        .map_err(|_| anyhow::anyhow!("the workspace path is not UTF-8"))?;
    let result = release(args, &socket, &ws)?;
    if args.json {
        print_json(&result)?;
    } else {
        print_table(&result)?;
    }
    Ok(if result["status"] == "completed" { EXIT_OK } else { EXIT_FAILURE })
}

/// Every path a refusal before any batch names, each `denied` with `code`.
fn refused(paths: &[String], code: &str, message: String, dry_run: bool) -> Value {
    let files: Vec<Value> = paths
        .iter()
        .map(|p| json!({"file_path": p, "outcome": "denied", "reason": code, "bytes_reclaimed": 0}))
        .collect();
    json!({"status": "denied", "errorCode": code, "message": message, "dry_run": dry_run, "files": files,
        "batches": [], "bytes_reclaimed": 0})
}

fn release(args: &ReleaseArgs, socket: &Path, ws: &str) -> anyhow::Result<Value> {
    let data_dir = winx_release_engine::layout::default_data_dir();
    let layout = winx_release_engine::Layout::new(ws, &data_dir).map_err(|d| anyhow::anyhow!("{d}"))?;
    let dir = layout.session_dir(&args.thread);
    let named: Vec<String> = if args.all {
        helpers_of(&dir)?
    } else {
        args.paths.iter().map(|p| p.to_string_lossy().into_owned()).collect()
    };
    // The owner: a guardian that answers, and has this thread registered.
    let (mut client, _hello) = match GuardianClient::connect_hello(socket, crate::common::quick()) {
        Ok(c) => c,
        Err(e) => {
            let msg = format!("no guardian answers at {}: {e}; nothing was released", socket.display());
            return Ok(refused(&named, "owner_unavailable", msg, args.dry_run));
        }
    };
    let status = match client.status(ws, &args.thread) {
        Ok(s) => s,
        Err(e) => {
            let code = e.reason().map_or("owner_unavailable", |r| r.as_str());
            return Ok(refused(&named, code, format!("status: {e}"), args.dry_run));
        }
    };
    if !status.known {
        let msg = format!(
            "thread {:?} is not registered by the guardian at {} in {ws} (releases are for threads a frontend \
             initialised with that guardian)",
            args.thread,
            socket.display()
        );
        return Ok(refused(&named, "thread_mismatch", msg, args.dry_run));
    }
    let Some(mode) = status.mode_name else {
        let msg = "the guardian recorded no mode for this thread (its frontend is older); Initialize it again";
        return Ok(refused(&named, "policy_denied", msg.into(), args.dry_run));
    };
    drop(client);
    if named.is_empty() {
        return Ok(json!({"status": "completed", "message": format!("no helpers in {}", dir.display()),
            "dry_run": args.dry_run, "files": [], "batches": [], "bytes_reclaimed": 0}));
    }

    let mut config = FrontendConfig::new(socket, layout.data_dir(), false);
    config.dry_run = args.dry_run;
    let frontend = Frontend::new(config).context("frontend")?;
    let mut init = json!({"any_workspace_path": ws, "thread_id": args.thread, "mode_name": mode});
    if let Some(c) = status.code_writer_config {
        init["code_writer_config"] = c;
    }
    let init = frontend.initialize(init);
    if init["temporary_release"]["available"] != json!(true) {
        let code =
            init["temporary_release"]["reason"].as_str().or(init["errorCode"].as_str()).unwrap_or("owner_unavailable");
        let msg = init["message"].as_str().unwrap_or("Initialize did not make releases available").to_owned();
        return Ok(refused(&named, code, msg, args.dry_run));
    }

    let (mut files, mut batches, mut bytes, mut stopped) = (Vec::new(), Vec::new(), 0u64, false);
    let mut all_done = true;
    for batch in named.chunks(BATCH) {
        if stopped {
            files.extend(batch.iter().map(|p| {
                json!({"file_path": p, "outcome": "not_attempted", "reason": "stopped_after_failure",
                    "bytes_reclaimed": 0})
            }));
            continue;
        }
        let (out, status, receipt) = release_batch(&frontend, ws, &args.thread, batch);
        bytes += out.iter().filter_map(|f| f["bytes_reclaimed"].as_u64()).sum::<u64>();
        files.extend(out);
        batches.push(json!({"status": status, "receipt_id": receipt, "files": batch.len()}));
        if status != "completed" {
            stopped = true;
            all_done = false;
        }
    }
    let status = if all_done {
        "completed"
    } else if batches.iter().any(|b| b["receipt_id"].is_string()) {
        "partial"
    } else {
        "denied"
    };
    Ok(json!({"status": status, "dry_run": args.dry_run, "files": files, "batches": batches,
        "bytes_reclaimed": bytes}))
}

/// One batch: `ReadFiles`, then one `EditFiles` of every helper in it. A
/// path that could not be read, or is not a helper of the session (no
/// token), is `denied` with its code, and so is the whole batch: every other
/// target is `denied` with that code and nothing is sent (no receipt).
fn release_batch(frontend: &Frontend, ws: &str, thread: &str, batch: &[String]) -> (Vec<Value>, String, Value) {
    let read = frontend.read_files(json!({"thread_id": thread, "file_paths": batch}));
    let mut own: Vec<Option<Value>> = vec![None; batch.len()];
    let mut entries = Vec::new();
    let mut order = Vec::new();
    for f in read["failed_files"].as_array().into_iter().flatten() {
        if let Some(i) = batch.iter().position(|p| f["file_path"] == json!(p)) {
            own[i] = Some(json!({"file_path": batch[i], "outcome": "denied", "reason": f["errorCode"],
                "bytes_reclaimed": 0}));
        }
    }
    for f in read["files"].as_array().into_iter().flatten() {
        let Some(i) = batch.iter().position(|p| f["file_path"] == json!(p)) else { continue };
        match f["temporary_artifact"]["artifact_generation"].as_str() {
            Some(token) => {
                entries.push(json!({"file_path": batch[i], "mode": "release_temporary",
                    "expected_revision": f["revision"], "artifact_generation": token}));
                order.push(i);
            }
            None => {
                own[i] = Some(json!({"file_path": batch[i], "outcome": "denied", "reason": "not_session_helper",
                    "bytes_reclaimed": 0}))
            }
        }
    }
    if read["status"] == "invalid_input" || read["status"] == "denied" {
        let code = read["errorCode"].clone();
        let out = batch
            .iter()
            .map(|p| json!({"file_path": p, "outcome": "denied", "reason": code, "bytes_reclaimed": 0}))
            .collect();
        return (out, "denied".into(), Value::Null);
    }
    // One request: a target refused here denies the whole batch, and the
    // others are not sent (the seed checks every target before any removal).
    if let Some(first) = own.iter().flatten().next().cloned() {
        let (code, named) = (first["reason"].clone(), first["file_path"].as_str().unwrap_or("?").to_owned());
        let message = format!("{named}: {}; nothing in this batch was released", code.as_str().unwrap_or("refused"));
        let out = own
            .into_iter()
            .zip(batch)
            .map(|(f, p)| {
                f.unwrap_or_else(|| json!({"file_path": p, "outcome": "denied", "reason": code, "bytes_reclaimed": 0}))
            })
            .map(|mut f| {
                f["message"] = json!(message);
                f
            })
            .collect();
        return (out, "denied".into(), Value::Null);
    }
    let mut status = "completed".to_owned();
    let mut receipt = Value::Null;
    if !entries.is_empty() {
        let r = frontend.edit_files(json!({"thread_id": thread, "workspace_root": ws,
            "operation": "release_temporary", "files": entries}));
        receipt = r["receipt_id"].clone();
        let result_status = r["status"].as_str().unwrap_or("failed").to_owned();
        let got = r["files"].as_array().cloned().unwrap_or_default();
        for (k, &i) in order.iter().enumerate() {
            let mut f = got.get(k).cloned().unwrap_or_else(
                || json!({"file_path": batch[i], "outcome": "failed", "reason": r["errorCode"], "bytes_reclaimed": 0}),
            );
            if f["reason"].is_null() && f["outcome"] == "denied" {
                f["reason"] = r["errorCode"].clone();
            }
            if let Some(m) = r["message"].as_str().filter(|_| f["outcome"] == "denied") {
                f["message"] = json!(m);
            }
            own[i] = Some(f);
        }
        status = result_status;
    }
    let out = own
        .into_iter()
        .zip(batch)
        .map(|(f, p)| f.unwrap_or_else(|| json!({"file_path": p, "outcome": "failed", "reason": "io_error"})))
        .collect();
    (out, status, receipt)
}

/// The helpers of the session directory `dir` (`audit::helpers_of`), sorted.
fn helpers_of(dir: &Path) -> anyhow::Result<Vec<String>> {
    let listed = winx_release_engine::audit::helpers_of(dir).with_context(|| format!("listing {}", dir.display()))?;
    Ok(listed.into_iter().map(|h| h.path.to_string_lossy().into_owned()).collect())
}

fn print_table(v: &Value) -> std::io::Result<()> {
    let dry = v["dry_run"] == json!(true);
    let files = v["files"].as_array().cloned().unwrap_or_default();
    let width = files.iter().filter_map(|f| f["file_path"].as_str()).map(str::len).max().unwrap_or(4).max(4);
    outln!("{:<width$}  {:<14}  {:<24}  {:>10}", "PATH", "OUTCOME", "REASON", "BYTES")?;
    for f in &files {
        let mut outcome = f["outcome"].as_str().unwrap_or("?").to_owned();
        if dry && outcome == "not_attempted" && f["reason"].is_null() {
            outcome = "would_release".into();
        }
        outln!(
            "{:<width$}  {:<14}  {:<24}  {:>10}",
            f["file_path"].as_str().unwrap_or("?"),
            outcome,
            f["reason"].as_str().unwrap_or("-"),
            f["bytes_reclaimed"].as_u64().unwrap_or(0)
        )?;
    }
    let receipts: Vec<&str> =
        v["batches"].as_array().into_iter().flatten().filter_map(|b| b["receipt_id"].as_str()).collect();
    outln!(
        "{}: {} helper(s), {} bytes reclaimed{}{}",
        v["status"].as_str().unwrap_or("?"),
        files.len(),
        v["bytes_reclaimed"],
        if receipts.is_empty() { String::new() } else { format!("; receipts {}", receipts.join(", ")) },
        if dry { " (dry run: nothing was captured)" } else { "" }
    )?;
    if let Some(m) = v["message"].as_str() {
        outln!("{m}")?;
    }
    Ok(())
}
