//! What a tool result says in one line, and whether it is an MCP error.

use serde_json::{json, Value};

use crate::tool::Tool;

/// Whether a tool result is an error for MCP (`isError`): `status` is
/// `denied`, `invalid_input` or `failed`.
pub fn is_error(result: &Value) -> bool {
    matches!(result.get("status").and_then(Value::as_str), Some("denied" | "invalid_input" | "failed"))
}

/// A one-line text summary of a tool result, for the MCP text content.
pub fn summary(tool: &str, result: &Value) -> String {
    let s = |k: &str| result.get(k).and_then(Value::as_str).unwrap_or("");
    let status = s("status");
    let mut out = if is_error(result) && !s("errorCode").is_empty() {
        format!("{tool}: {status} ({})", s("errorCode"))
    } else {
        format!("{tool}: {status}")
    };
    let count = |k: &str| result.get(k).and_then(Value::as_array).map_or(0, Vec::len);
    match Tool::from_name(tool) {
        Some(Tool::Initialize) if !is_error(result) => {
            let tr = &result["temporary_release"];
            out.push_str(&format!(
                "; thread {} in {}; helpers in {}; temporary release {}",
                s("thread_id"),
                s("workspace_root"),
                s("temporary_artifact_dir"),
                if tr["available"] == json!(true) {
                    "available".to_owned()
                } else {
                    format!("unavailable ({})", tr["reason"].as_str().unwrap_or("unknown"))
                }
            ));
        }
        Some(Tool::ReadFiles) => out.push_str(&format!("; {} read, {} failed", count("files"), count("failed_files"))),
        Some(Tool::EditFiles) => {
            let files = result.get("files").and_then(Value::as_array).cloned().unwrap_or_default();
            let mut tally: Vec<(String, usize)> = Vec::new();
            for f in &files {
                let o = f.get("outcome").and_then(Value::as_str).unwrap_or("?").to_owned();
                match tally.iter_mut().find(|(k, _)| *k == o) {
                    Some((_, n)) => *n += 1,
                    None => tally.push((o, 1)),
                }
            }
            let parts: Vec<String> = tally.iter().map(|(k, n)| format!("{n} {k}")).collect();
            out.push_str(&format!("; {}", parts.join(", ")));
            if s("operation") == crate::wire::RELEASE_MODE {
                out.push_str(&format!("; {} bytes reclaimed", result["bytes_reclaimed"].as_u64().unwrap_or(0)));
                if !s("receipt_id").is_empty() {
                    out.push_str(&format!("; receipt {}", s("receipt_id")));
                }
                if result["replayed"] == json!(true) {
                    out.push_str(" (replayed: nothing touched)");
                }
            }
        }
        Some(Tool::BashCommand) if !is_error(result) => {
            out.push_str(&format!("; command {}", s("command_id")));
            if let Some(c) = result.get("exit_code").and_then(Value::as_i64) {
                out.push_str(&format!(", exit code {c}"));
            }
        }
        _ => {}
    }
    if !s("message").is_empty() {
        out.push_str(&format!(" — {}", s("message")));
    }
    out
}
