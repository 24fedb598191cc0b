//! The setup phase: fill the sessions to their quotas and the backing roots
//! to the scan bound, probe each quota and bound at its edge, and run every
//! scenario once as a named check. Nothing else runs meanwhile, so each
//! check has one expected answer.

use std::path::{Path, PathBuf};

use indicatif::ProgressBar;
use serde_json::{json, Value};

use crate::config::Config;
use crate::harness::client::{CallError, McpClient};
use crate::oracle::ledger::Ledger;
use crate::oracle::quota::{MAX_FILE_BYTES, MAX_SESSION_BYTES, MAX_SESSION_FILES, MAX_WORKSPACE_BYTES};
use crate::phases::edge_checks::{backing_entry_checks, bound_checks, owner_checks, shape_checks};
use crate::workload::backing::Backing;
use crate::workload::fill_plan::{self, FillPlan, TINY};
use crate::workload::opening::{check_denied, open_session, SCAN_BOUND};
use crate::workload::ops::{self, Written};
use crate::workload::scenarios::{self, Blocker};
use crate::workload::world::{Stats, TrackedSession, World};

pub(super) fn interrupted(w: &World) -> anyhow::Result<()> {
    anyhow::ensure!(!w.stopping(), "interrupted");
    Ok(())
}

/// Checks the keys of an `Initialize` result.
pub fn check_initialize(w: &World, v: &Value) {
    let quotas = [
        ("temporary_artifact_max_files", MAX_SESSION_FILES),
        ("temporary_artifact_max_session_bytes", MAX_SESSION_BYTES),
        ("temporary_artifact_max_file_bytes", MAX_FILE_BYTES),
        ("temporary_artifact_max_bytes", MAX_WORKSPACE_BYTES),
    ];
    let ok = quotas.iter().all(|(k, n)| v[*k] == json!(n));
    w.check(
        "Initialize reports the quotas",
        ok,
        quotas.iter().map(|(k, _)| format!("{k}={}", v[*k])).collect::<Vec<_>>().join(" "),
    );
    let tr = &v["temporary_release"];
    w.check("Initialize: temporary_release available with a guardian", tr["available"] == json!(true), tr.to_string());
    let dir = v["temporary_artifact_dir"].as_str().unwrap_or("");
    let mode =
        std::fs::symlink_metadata(dir).map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777);
    w.check("session directory is 0700", matches!(mode, Ok(0o700)), format!("{mode:?}"));
}

/// Source files (not helpers) in every workspace.
fn sources(w: &World) -> anyhow::Result<()> {
    for ws in &w.workspaces {
        let src = Path::new(&ws.root).join("src");
        std::fs::create_dir_all(&src)?;
        let mut l = ws.sources.lock().unwrap_or_else(|e| e.into_inner());
        for (name, text) in [("main.rs", "fn main() {}\n"), ("lib.rs", "pub fn f() {}\n")] {
            std::fs::write(src.join(name), text)?;
            l.add_path(&src.join(name))?;
        }
        std::fs::write(Path::new(&ws.root).join("README.md"), "workspace of the stress tool\n")?;
        l.add_path(&Path::new(&ws.root).join("README.md"))?;
    }
    Ok(())
}

/// Writes `files` in tool calls of at most 100; the first answer that is
/// not `Yes`, if any.
fn write_chunks(
    w: &World,
    sess: &mut TrackedSession,
    files: Vec<(PathBuf, String)>,
) -> anyhow::Result<Option<Written>> {
    for chunk in files.chunks(100) {
        let r = ops::write_files(w, sess, sess.home, chunk)?;
        if r != Written::Yes {
            return Ok(Some(r));
        }
    }
    Ok(None)
}

/// Fills `sess` up to `target` bytes and 128 files, then probes the
/// session quotas at their edge.
fn fill_session(w: &World, sess: &mut TrackedSession, target: u64, fill: bool) -> anyhow::Result<()> {
    let seed: Vec<(PathBuf, String)> = (0..40)
        .map(|_| {
            let n = sess.rng.range(64, 8192) as usize;
            (sess.fresh_path("seed"), sess.rng.text(n))
        })
        .collect();
    let refused = write_chunks(w, sess, seed)?;
    w.check(&format!("s{}: 40 helpers written by the tool", sess.idx), refused.is_none(), format!("{refused:?}"));
    if !fill {
        return Ok(());
    }
    let (files, bytes) = sess.ledger.usage();
    let plan = FillPlan::new(files, bytes, target);
    for (name, size) in [("bulk-a", plan.bulk[0]), ("bulk-b", plan.bulk[1])] {
        let p = sess.dir.join(format!("{name}.bin"));
        ops::bash_create(w, sess, &p, size, true)?;
    }
    let tiny_files: Vec<(PathBuf, String)> =
        (0..plan.tiny).map(|_| (sess.fresh_path("tiny"), sess.rng.text(TINY as usize))).collect();
    let refused = write_chunks(w, sess, tiny_files)?;
    let (files, bytes) = sess.ledger.usage();
    w.check(
        &format!("s{}: filled to the file quota by tool writes", sess.idx),
        refused.is_none() && files == MAX_SESSION_FILES && bytes == target,
        format!("{files} files, {bytes} bytes (planned {target}); refused: {refused:?}"),
    );
    // The 129th file.
    let p = sess.fresh_path("over");
    let r = ops::write_files(w, sess, sess.home, &[(p, String::new())])?;
    w.check(
        &format!("s{}: 129th file refused (quota_exceeded)", sess.idx),
        r == Written::QuotaRefused,
        format!("{r:?}"),
    );
    if let Some(p) = fill_plan::same_size_probe(&sess.ledger, &mut sess.rng) {
        if bytes == MAX_SESSION_BYTES {
            let r = ops::write_files(w, sess, sess.home, &[(p.clone(), "x".repeat(TINY as usize + 1))])?;
            w.check(
                &format!("s{}: one byte over 64 MiB refused", sess.idx),
                r == Written::QuotaRefused,
                format!("{r:?}"),
            );
        }
        let r = ops::write_files(w, sess, sess.home, &[(p.clone(), "y".repeat(TINY as usize))])?;
        // Same size: the session's usage is what the fill planned, so the
        // later sessions of the workspace fill against the planned total.
        let after = sess.ledger.usage();
        w.check(
            &format!("s{}: same-size rewrite at the limit accepted", sess.idx),
            r == Written::Yes && after == (files, bytes),
            format!("{r:?}; {} files, {} bytes after", after.0, after.1),
        );
    }
    Ok(())
}

/// Brings workspace 0 to exactly 256 MiB with filler sessions, then
/// probes the workspace quota and the per-file quota.
fn workspace_quota(
    w: &World,
    sessions: &[TrackedSession],
    extras: &mut Vec<TrackedSession>,
    cfg: &Config,
) -> anyhow::Result<()> {
    let mut total: u64 = sessions.iter().filter(|s| s.ws == 0).map(|s| s.ledger.usage().1).sum();
    let mut k = 0;
    while total < MAX_WORKSPACE_BYTES {
        interrupted(w)?;
        let thread = format!("stress-{}-filler-{k}", cfg.seed());
        let (mut f, _) = open_session(w, 1000 + k, 0, &thread, 0, 0, None, crate::workload::rng::Rng::new(k as u64))?;
        k += 1;
        let mut in_session = 0;
        while total < MAX_WORKSPACE_BYTES && in_session < MAX_SESSION_BYTES {
            let n = (MAX_WORKSPACE_BYTES - total).min(MAX_FILE_BYTES).min(MAX_SESSION_BYTES - in_session);
            let p = f.fresh_path("filler");
            ops::bash_create(w, &mut f, &p, n, true)?;
            total += n;
            in_session += n;
        }
        extras.push(f);
    }
    let thread = format!("stress-{}-probe", cfg.seed());
    let (mut probe, _) = open_session(w, 2000, 0, &thread, 0, 0, None, crate::workload::rng::Rng::new(7))?;
    let p = probe.fresh_path("ws");
    let r = ops::write_files(w, &mut probe, 0, &[(p, "z".to_owned())])?;
    w.check(
        "workspace at 256 MiB: one more byte refused",
        r == Written::QuotaRefused,
        format!("{r:?} (workspace {total} bytes)"),
    );
    let p = probe.fresh_path("ws");
    let r = ops::write_files(w, &mut probe, 0, &[(p, String::new())])?;
    w.check("workspace at 256 MiB: an empty file accepted", r == Written::Yes, format!("{r:?}"));
    // 32 MiB + 1 byte in one tool write: more than the per-file quota, and
    // more than an MCP stdio line may carry (16 MiB in rmcp); refused
    // either way, and never written.
    let p = probe.fresh_path("big");
    let args = json!({"thread_id": probe.thread_id, "workspace_root": w.workspaces[0].root,
        "files": [{"file_path": p.to_string_lossy(), "mode": "replace", "content": "b".repeat(MAX_FILE_BYTES as usize + 1)}]});
    // rmcp drops an oversized line without an answer. A ping sent after it
    // is answered once the line has been read; an accepted write would be
    // answered soon after that.
    let client = &w.frontends[0];
    let long = std::time::Duration::from_secs(120);
    let (id, rx) = client.start("tools/call", json!({"name": "EditFiles", "arguments": args}))?;
    client.request("ping", json!({}), long)?;
    let r = client
        .wait(id, &rx, std::time::Duration::from_secs(1))
        .and_then(|v| McpClient::tool_reply("EditFiles", &v, std::time::Duration::ZERO));
    let written = p.exists();
    let detail = match &r {
        Ok(reply) => format!("{} {}", reply.status(), reply.error_code().unwrap_or("-")),
        Err(CallError::Timeout(_)) => "no answer: the MCP transport dropped the oversized line".to_owned(),
        Err(e) => e.to_string(),
    };
    let refused = match &r {
        Ok(reply) => reply.error_code() == Some("quota_exceeded"),
        Err(CallError::Timeout(_) | CallError::Rpc { .. }) => true,
        Err(e) => anyhow::bail!("the 32 MiB + 1 byte write: {e}"),
    };
    if written || r.as_ref().is_ok_and(|reply| reply.status() == "completed") {
        w.findings
            .quota_violation(json!({"quota": "file_bytes", "path": p.to_string_lossy(), "bytes": MAX_FILE_BYTES + 1,
            "detail": "a 32 MiB + 1 byte tool write was accepted"}));
    }
    w.check("a 32 MiB + 1 byte tool write is refused", refused && !written, detail);
    // The frontend still answers.
    ops::read(w, &probe, 0, &[])?;
    extras.push(probe);
    Ok(())
}

fn scenario_checks(w: &World, sessions: &mut [TrackedSession]) -> anyhow::Result<()> {
    let s = &mut sessions[0];
    let r = scenarios::identical_replacement(w, s)?;
    check_denied(w, "identical-text replacement after the read: read_required", &r, &["read_required"]);
    let r = scenarios::changed_content(w, s)?;
    check_denied(w, "changed content after the read: read_required", &r, &["read_required", "revision_mismatch"]);
    if s.home != s.other {
        let r = scenarios::cross_frontend(w, s)?;
        check_denied(w, "a token of another frontend process: read_required", &r, &["read_required"]);
    }
    let r = scenarios::blocked_release(w, s, Blocker::Background)?;
    check_denied(w, "a running background command: execution_active", &r, &["execution_active"]);
    let r = scenarios::blocked_release(w, s, Blocker::InlineWait)?;
    check_denied(w, "an inline wait returned, command still running: execution_active", &r, &["execution_active"]);
    let r = scenarios::blocked_release(w, s, Blocker::Queued)?;
    check_denied(w, "a foreground command, another refused meanwhile: execution_active", &r, &["execution_active"]);
    let r = scenarios::source_release(w, s)?;
    check_denied(w, "a source file: not_session_helper", &r, &["not_session_helper"]);
    if let Some(peer) = s.peer.clone() {
        let r = scenarios::other_session_release(w, s, &peer)?;
        check_denied(w, "another session's helper: other_session", &r, &["other_session"]);
    }
    let r = scenarios::racing_replacement(w, s)?;
    w.check("a replacement racing the release survives", r.is_some(), "");
    ops::verify(w, s, "scenario checks");

    // Replays: the same request again, after a new file took a released
    // name, through the same frontend and through a fresh process.
    let before = (Stats::get(&w.stats.replays), w.findings.violations());
    let home = s.home;
    let r = scenarios::new_file_at_released_name(w, s, home)?;
    ops::verify(w, s, "replay");
    let after = (Stats::get(&w.stats.replays), w.findings.violations());
    w.check(
        "a replay after a new file took a released name: replayed, the new file kept",
        r.is_some() && after.0 == before.0 + 1 && after.1 == before.1,
        format!("{:?}", r.map(|v| v["status"].clone())),
    );
    if let Some(rec) = s.recorded.last().cloned() {
        let fresh = w.worker_frontends + 1;
        let before = (Stats::get(&w.stats.replays), w.findings.violations());
        ops::replay(w, fresh, &rec)?;
        ops::verify(w, s, "replay through a fresh frontend");
        let after = (Stats::get(&w.stats.replays), w.findings.violations());
        w.check(
            "a replay through a frontend process that never saw the request: replayed",
            after.0 == before.0 + 1 && after.1 == before.1,
            "",
        );
    }
    Ok(())
}

/// The whole setup phase. Filler, probe and policy sessions go to `extras`.
pub fn run(
    w: &World,
    sessions: &mut [TrackedSession],
    extras: &mut Vec<TrackedSession>,
    backing: &mut Backing,
    cfg: &Config,
    pb: &ProgressBar,
) -> anyhow::Result<()> {
    sources(w)?;
    let targets = fill_plan::session_targets(&sessions.iter().map(|s| s.ws).collect::<Vec<_>>());
    let n = sessions.len();
    for (s, target) in sessions.iter_mut().zip(targets) {
        interrupted(w)?;
        pb.set_message(format!("filling session {}/{n} to its quotas", s.idx + 1));
        fill_session(w, s, target, cfg.fill)?;
    }
    w.phase("fill sessions");
    if cfg.fill {
        pb.set_message("filling workspace 0 to 256 MiB");
        workspace_quota(w, sessions, extras, cfg)?;
        w.phase("workspace and per-file quotas");
    }
    interrupted(w)?;
    if cfg.bound_check {
        pb.set_message("backing roots at the scan bound");
        bound_checks(w, &mut sessions[0], backing)?;
        w.phase("scan bound 50,000 / 50,001");
    }
    let level = cfg.backing_entries.min(SCAN_BOUND - 500);
    pb.set_message(format!("backing roots: {level} entries"));
    backing.set_total(level)?;
    w.phase("fill backing roots");
    interrupted(w)?;
    pb.set_message("setup checks");
    backing_entry_checks(w, &mut sessions[0])?;
    shape_checks(w, &mut sessions[0])?;
    owner_checks(w, extras, cfg)?;
    interrupted(w)?;
    scenario_checks(w, sessions)?;
    for ws in 0..w.workspaces.len() {
        let v = ops::audit(w, ws, "audit")?;
        w.check(
            &format!("audit of workspace {ws} deletes nothing"),
            v["deleted_files"] == json!(0)
                && v["deleted_bytes"] == json!(0)
                && v["deletion_deferred"] == "runtime_protection_unknown",
            format!("{} sessions, {} files", v["sessions"].as_array().map_or(0, Vec::len), v["total_files"]),
        );
    }
    for s in sessions.iter_mut().chain(extras.iter_mut()) {
        ops::verify(w, s, "end of setup");
    }
    let got = backing.set_total(cfg.backing_entries.min(SCAN_BOUND - 100))?;
    pb.set_message(format!("backing roots: {got} entries"));
    w.phase("checks");
    Ok(())
}

/// Files of `ledger` verified fully (every byte re-hashed).
pub fn full_verify(w: &World, ledger: &mut Ledger, context: &str) {
    ledger.verify(&w.findings, context, true);
}
