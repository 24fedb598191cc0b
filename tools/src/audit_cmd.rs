//! `winx-release audit`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::common::{print_json, EXIT_OK};

/// Arguments of `winx-release audit`.
#[derive(Args, Debug)]
pub struct AuditArgs {
    /// The workspace root to audit.
    #[arg(long)]
    workspace: PathBuf,
    /// The guardian socket whose liveness mode and threads are reported (default as for `mcp`).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// One JSON object (the default when standard output is not a terminal); else a table.
    #[arg(long)]
    json: bool,
}

/// Audits the workspace and prints its report; deletes nothing.
pub fn run(args: &AuditArgs) -> anyhow::Result<u8> {
    let meta = std::fs::metadata(&args.workspace).with_context(|| format!("workspace {}", args.workspace.display()))?;
    anyhow::ensure!(meta.is_dir(), "workspace {} is not a directory", args.workspace.display());
    let ws = std::fs::canonicalize(&args.workspace).context("canonical workspace")?;
    let report = winx_release_engine::audit::audit(&ws).with_context(|| format!("audit of {}", ws.display()))?;
    let mut v = serde_json::to_value(&report)?;
    // How much of the shared 50,000-entry scan bound the backing roots use
    // (contract section 6b), with a warning past 80 %.
    let data_dir = winx_release_engine::layout::default_data_dir();
    let layout = winx_release_engine::Layout::new(ws.clone(), data_dir).map_err(|d| anyhow::anyhow!("{d}"))?;
    let usage = winx_release_engine::retention::backing_usage(&layout);
    if let (Some(obj), serde_json::Value::Object(extra)) = (v.as_object_mut(), serde_json::to_value(&usage)?) {
        obj.extend(extra);
    }
    // How the guardian that owns the sessions tells that a command runs:
    // "cgroup", "proc", or null when no guardian answers.
    let socket = winx_release_protocol::resolve_socket_path(args.socket.as_deref());
    let timeouts =
        winx_release_protocol::client::Timeouts { io: std::time::Duration::from_secs(2), ..Default::default() };
    let mut threads = std::collections::HashMap::new();
    let liveness = match winx_release_protocol::GuardianClient::connect_hello(&socket, timeouts) {
        Ok((mut c, h)) => {
            // Which thread each session directory is, as far as that
            // guardian has them registered.
            if let Ok(st) = c.guardian_status() {
                threads.extend(st.sessions.into_iter().map(|s| (s.session_dir, s.thread_id)));
            }
            h.liveness
        }
        Err(_) => None,
    };
    if let Some(obj) = v.as_object_mut() {
        obj.insert("liveness".into(), serde_json::json!(liveness));
    }
    // Sessions with nothing in them are counted, not listed: a session
    // directory stays after its helpers are released (the audit deletes
    // nothing), and would otherwise be listed for ever.
    let now = std::time::SystemTime::now();
    let mut empty = 0u64;
    if let Some(list) = v.get_mut("sessions").and_then(serde_json::Value::as_array_mut) {
        list.retain(|s| {
            let none = ["files", "quarantined_entries", "other_entries"].iter().all(|k| s[*k] == 0);
            empty += u64::from(none);
            !none
        });
        for s in list.iter_mut() {
            let path = s["path"].as_str().unwrap_or_default().to_owned();
            s["thread_id"] = serde_json::json!(threads.get(&path));
            s["helpers"] = serde_json::json!(helpers(std::path::Path::new(&path), now)?);
        }
    }
    v["empty_sessions"] = serde_json::json!(empty);
    // Which data directory `D` was looked at (contract section 1: it falls
    // back to the password database's home when HOME is unset).
    v["data_dir"] = serde_json::json!(layout.data_dir());
    use std::io::IsTerminal;
    if args.json || !std::io::stdout().is_terminal() {
        print_json(&v)?;
    } else {
        print_table(&v)?;
    }
    Ok(EXIT_OK)
}

/// The helpers of one session directory (`audit::helpers_of`): path, size
/// and age (seconds since the last modification).
fn helpers(dir: &std::path::Path, now: std::time::SystemTime) -> anyhow::Result<Vec<serde_json::Value>> {
    let listed = winx_release_engine::audit::helpers_of(dir).with_context(|| format!("listing {}", dir.display()))?;
    Ok(listed
        .into_iter()
        .map(|h| {
            let age = h.modified.and_then(|t| now.duration_since(t).ok()).map(|d| d.as_secs());
            serde_json::json!({"path": h.path, "size": h.size, "age_seconds": age})
        })
        .collect())
}

/// A duration for a person: `42s`, `17m`, `5h`, `3d`.
fn age(secs: Option<u64>) -> String {
    match secs {
        None => "?".into(),
        Some(s) if s < 120 => format!("{s}s"),
        Some(s) if s < 7200 => format!("{}m", s / 60),
        Some(s) if s < 172_800 => format!("{}h", s / 3600),
        Some(s) => format!("{}d", s / 86_400),
    }
}

fn print_table(v: &serde_json::Value) -> std::io::Result<()> {
    use winx_release_engine::quota;
    outln!(
        "workspace {} (liveness {})",
        v["workspace"].as_str().unwrap_or("?"),
        v["liveness"].as_str().unwrap_or("no guardian")
    )?;
    let sessions = v["sessions"].as_array().cloned().unwrap_or_default();
    for s in &sessions {
        outln!()?;
        outln!(
            "{}  thread {}  {}/{} files  {}/{} bytes{}{}",
            s["session"].as_str().unwrap_or("?"),
            s["thread_id"].as_str().unwrap_or("(not registered with a guardian)"),
            s["files"],
            quota::MAX_SESSION_FILES,
            s["bytes"],
            quota::MAX_SESSION_BYTES,
            if s["over_quota"] == true { "  OVER QUOTA" } else { "" },
            if s["past_ttl"] == true { "  past the 24 h TTL" } else { "" },
        )?;
        for h in s["helpers"].as_array().into_iter().flatten() {
            outln!(
                "  {:>10}  {:>5}  {}",
                h["size"],
                age(h["age_seconds"].as_u64()),
                h["path"].as_str().unwrap_or("?")
            )?;
        }
    }
    outln!()?;
    outln!(
        "{} session(s) listed, {} empty not listed; {}/{} helper bytes in the workspace{}; backing entries {}/50000",
        sessions.len(),
        v["empty_sessions"],
        v["total_bytes"],
        quota::MAX_WORKSPACE_BYTES,
        if v["workspace_over_quota"] == true { " (OVER QUOTA)" } else { "" },
        v["backing_entries"],
    )?;
    outln!("nothing was deleted (deletion_deferred: runtime_protection_unknown); release with `winx-release release`")?;
    Ok(())
}
