//! Tool operations with their checks: each call goes to a real frontend,
//! and each answer is held against the contract and the ledger.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};

use crate::harness::client::{CallError, ToolReply};
use crate::oracle::ledger::record;
use crate::oracle::quota::{self, Usage};
use crate::workload::interrupted;
use crate::workload::kills::inc;
use crate::workload::world::{Pinned, Recorded, Stats, TrackedSession, World};

/// Statuses for which `isError` must be true.
const ERROR_STATUSES: &[&str] = &["denied", "invalid_input", "failed"];

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// Calls `tool` on frontend `fe`; a transport failure is an error of the
/// run, a JSON-RPC error is returned as such.
pub fn call(w: &World, fe: usize, tool: &str, args: Value) -> anyhow::Result<Result<ToolReply, CallError>> {
    let client = &w.frontends[fe];
    match client.call_tool(tool, args) {
        Ok(r) => {
            let want_error = ERROR_STATUSES.contains(&r.status());
            if r.is_error != want_error {
                w.findings.mismatch(
                    &format!("{tool} isError"),
                    &format!("isError {want_error} for status {:?}", r.status()),
                    json!({"isError": r.is_error, "status": r.status()}),
                );
            }
            Ok(Ok(r))
        }
        Err(e @ CallError::Rpc { .. }) => Ok(Err(e)),
        Err(e) => Err(anyhow::anyhow!("{} {tool}: {e}", client.name())),
    }
}

/// Calls `tool` and treats a JSON-RPC error as an error of the run too.
pub fn call_ok(w: &World, fe: usize, tool: &str, args: Value) -> anyhow::Result<ToolReply> {
    call(w, fe, tool, args)?.map_err(|e| anyhow::anyhow!("{} {tool}: {e}", w.frontends[fe].name()))
}

/// `Initialize` of `thread_id` in workspace `ws` on frontend `fe`.
pub fn initialize(w: &World, fe: usize, ws: &str, thread_id: &str, mode: Option<&str>) -> anyhow::Result<Value> {
    let mut args = json!({"any_workspace_path": ws, "thread_id": thread_id});
    if let Some(m) = mode {
        args["mode_name"] = json!(m);
    }
    // Never while no guardian runs: the frontend would start one of its own.
    let held = w.chaos.as_ref().map(|c| c.init.read().unwrap_or_else(|e| e.into_inner()));
    let r = call_ok(w, fe, "Initialize", args)?;
    drop(held);
    anyhow::ensure!(r.status() == "completed", "Initialize of {thread_id} in {ws}: {}", r.value);
    let v = r.value;
    if v["temporary_artifact_stale_pruned_files"] != json!(0) {
        w.findings.mismatch("Initialize stale prune", "temporary_artifact_stale_pruned_files 0", v.clone());
    }
    if v["deletion_deferred"] != "runtime_protection_unknown" {
        w.findings.mismatch(
            "Initialize deletion_deferred",
            "runtime_protection_unknown",
            v["deletion_deferred"].clone(),
        );
    }
    Ok(v)
}

/// What happened to a write.
#[derive(Debug, PartialEq, Eq)]
pub enum Written {
    /// Accepted and on disk.
    Yes,
    /// Refused with `quota_exceeded`.
    QuotaRefused,
    /// Refused otherwise (the code).
    Refused(String),
}

/// Whole-file tool writes into `sess`'s session (or anywhere, for
/// `paths` outside it), checked against the quotas.
pub fn write_files(
    w: &World,
    sess: &mut TrackedSession,
    fe: usize,
    files: &[(PathBuf, String)],
) -> anyhow::Result<Written> {
    let ws = &w.workspaces[sess.ws];
    // What each entry replaces, from the ledger before the write.
    let (files_before, bytes_before) = sess.ledger.usage();
    let mut planned: Vec<(Option<u64>, u64)> = Vec::with_capacity(files.len());
    for (p, content) in files {
        if p.starts_with(&sess.dir) {
            let old = sess.ledger.get(p).filter(|g| sess.ledger.is_present(&g.path)).map(|g| g.size);
            planned.push((old, content.len() as u64));
        }
    }
    // In flight: what the write adds, and what it replaces (a shorter
    // replacement lowers this session's usage before it commits).
    ws.book.adding(sess.slot, planned.iter().map(|(_, new)| new).sum());
    ws.book.freeing(sess.slot, planned.iter().filter_map(|(old, _)| *old).sum());
    let window = ws.book.begin();
    let entries: Vec<Value> =
        files.iter().map(|(p, c)| json!({"file_path": s(p), "mode": "replace", "content": c})).collect();
    let args = json!({"thread_id": sess.thread_id, "workspace_root": ws.root, "files": entries});
    let reply = call(w, fe, "EditFiles", args);
    // The quota outcome the contract expects, cumulatively per entry,
    // against the other sessions' usage over the whole window: the
    // frontend measured it at some moment in it.
    let (mut lo, mut hi) = ws.book.end(window, sess.slot, bytes_before);
    let (mut files_n, mut bytes) = (files_before, bytes_before);
    let mut must_refuse: Option<&'static str> = None;
    let mut may_refuse = false;
    for &(old, new) in &planned {
        if let Some(q) = quota::exceeded(Usage { files: files_n, bytes, workspace: lo }, old, new) {
            must_refuse.get_or_insert(q);
        }
        if quota::exceeded(Usage { files: files_n, bytes, workspace: hi }, old, new).is_some() {
            may_refuse = true;
        }
        files_n += u64::from(old.is_none());
        bytes = bytes - old.unwrap_or(0) + new;
        lo = lo - old.unwrap_or(0).min(lo) + new;
        hi = hi - old.unwrap_or(0).min(hi) + new;
    }
    let outcome = match reply {
        Err(e) => {
            ws.book.commit(sess.slot, sess.ledger.usage().1);
            return Err(e);
        }
        Ok(Err(CallError::Rpc { code, message })) => Written::Refused(format!("rpc {code}: {message}")),
        Ok(Err(e)) => return Err(anyhow::anyhow!("EditFiles: {e}")),
        Ok(Ok(r)) if r.status() == "completed" => {
            Stats::inc(&w.stats.writes);
            for (p, content) in files {
                match record(p) {
                    Ok(g) => {
                        if g.size != content.len() as u64 {
                            w.findings.mismatch("EditFiles replace", "the written bytes", json!({"path": s(p)}));
                        }
                        sess.ledger.add(g);
                    }
                    Err(e) => w.findings.mismatch(
                        "EditFiles replace",
                        "a file on disk",
                        json!({"path": s(p), "error": e.to_string()}),
                    ),
                }
            }
            if let Some(q) = must_refuse {
                w.findings.quota_violation(json!({
                    "quota": q, "thread_id": sess.thread_id,
                    "files": files.iter().map(|(p, c)| json!({"path": s(p), "bytes": c.len()})).collect::<Vec<_>>(),
                    "session_files_before": sess.ledger.usage().0, "detail": "a tool write beyond a quota was accepted",
                }));
            }
            Written::Yes
        }
        Ok(Ok(r)) if r.error_code() == Some("quota_exceeded") => {
            Stats::inc(&w.stats.quota_refusals);
            if !may_refuse {
                w.findings.mismatch("quota refusal", "the write fits every quota", r.value.clone());
            }
            Written::QuotaRefused
        }
        Ok(Ok(r)) => Written::Refused(r.error_code().unwrap_or(r.status()).to_owned()),
    };
    ws.book.commit(sess.slot, sess.ledger.usage().1);
    Ok(outcome)
}

/// Runs a command in `sess` through its home frontend.
pub fn bash(w: &World, sess: &TrackedSession, command: &str, wait: f64, background: bool) -> anyhow::Result<Value> {
    Stats::inc(&w.stats.commands);
    let args = json!({"thread_id": sess.thread_id, "command": command, "wait_for_seconds": wait,
        "is_background": background});
    let r = call_ok(w, sess.home, "BashCommand", args)?;
    anyhow::ensure!(!r.is_error, "BashCommand {command:?}: {}", r.value);
    Ok(r.value)
}

/// Waits until command `id` of `sess` has completed.
pub fn wait_command(w: &World, sess: &TrackedSession, id: &str) -> anyhow::Result<Value> {
    for _ in 0..60 {
        let args = json!({"thread_id": sess.thread_id, "status_check": true, "command_id": id, "wait_for_seconds": 5});
        let r = call_ok(w, sess.home, "BashCommand", args)?;
        if r.status() == "completed" {
            return Ok(r.value);
        }
        anyhow::ensure!(!r.is_error, "status check of {id}: {}", r.value);
    }
    anyhow::bail!("command {id} did not complete")
}

/// Creates a helper of `size` bytes with a command (quotas do not govern
/// command output) and records it.
pub fn bash_create(w: &World, sess: &mut TrackedSession, path: &Path, size: u64, zero: bool) -> anyhow::Result<()> {
    let src = if zero { "/dev/zero" } else { "/dev/urandom" };
    let parent = path.parent().context("helper without parent")?;
    let cmd = format!("mkdir -p '{}' && head -c {size} {src} > '{}'", s(parent), s(path));
    let ws = &w.workspaces[sess.ws];
    ws.book.adding(sess.slot, size);
    let v = bash(w, sess, &cmd, 60.0, false);
    let v = match v {
        Ok(v) if v["status"] == "running" => wait_command(w, sess, v["command_id"].as_str().unwrap_or_default()),
        other => other,
    };
    let result = v.and_then(|v| {
        anyhow::ensure!(v["exit_code"] == json!(0), "{cmd}: {v}");
        sess.ledger.add_path(path).with_context(|| format!("record {}", path.display()))?;
        Ok(())
    });
    ws.book.commit(sess.slot, sess.ledger.usage().1);
    result
}

/// `ReadFiles` of `paths` through frontend `fe`; checks each revision
/// against the ledger. Returns what can be released.
pub fn read(w: &World, sess: &TrackedSession, fe: usize, paths: &[PathBuf]) -> anyhow::Result<Vec<Pinned>> {
    Stats::inc(&w.stats.reads);
    let args = json!({"thread_id": sess.thread_id, "file_paths": paths.iter().map(|p| s(p)).collect::<Vec<_>>()});
    let r = call_ok(w, fe, "ReadFiles", args)?;
    let mut out = Vec::new();
    for f in r.value["files"].as_array().into_iter().flatten() {
        let path = PathBuf::from(f["file_path"].as_str().unwrap_or_default());
        let revision = f["revision"].as_str().unwrap_or_default().to_owned();
        let Some(g) = sess.ledger.get(&path).filter(|_| sess.ledger.is_present(&path)) else { continue };
        if revision != g.revision() {
            w.findings.mismatch("ReadFiles revision", &g.revision(), json!({"path": s(&path), "revision": revision}));
            continue;
        }
        let token = f["temporary_artifact"]["artifact_generation"].as_str().map(str::to_owned);
        if token.is_none() && path.starts_with(&sess.dir) {
            w.findings.mismatch("ReadFiles temporary_artifact", "a generation token for a helper", f.clone());
        }
        out.push(Pinned { path, gen: g.id, revision, token, size: g.size });
    }
    for f in r.value["failed_files"].as_array().into_iter().flatten() {
        w.findings.note(&format!("read_failed_{}", f["errorCode"].as_str().unwrap_or("?")));
    }
    Ok(out)
}

/// What a release must do.
#[derive(Clone, Debug)]
pub enum Expect {
    /// Anything the contract allows.
    Any,
    /// A denial: nothing may be released (a release is a violation of
    /// `kind`), and the code should be one of `codes`.
    Denied {
        /// Acceptable codes.
        codes: &'static [&'static str],
        /// The violation kind when something is released anyway.
        kind: &'static str,
    },
}

/// The release request for `targets`.
pub fn release_args(w: &World, sess: &TrackedSession, targets: &[Pinned]) -> Value {
    let files: Vec<Value> = targets
        .iter()
        .map(|t| {
            json!({"file_path": s(&t.path), "mode": "release_temporary", "expected_revision": t.revision,
                "artifact_generation": t.token})
        })
        .collect();
    json!({"thread_id": sess.thread_id, "workspace_root": w.workspaces[sess.ws].root,
        "operation": "release_temporary", "files": files})
}

/// Checks the shape of a release answer against its request; returns the
/// per-file outcomes (path, outcome, reason, quarantine path).
fn release_shape(w: &World, args: &Value, v: &Value) -> Vec<(String, String, Value, Option<String>)> {
    let req: Vec<&str> =
        args["files"].as_array().into_iter().flatten().filter_map(|f| f["file_path"].as_str()).collect();
    let files = v["files"].as_array().cloned().unwrap_or_default();
    let got: Vec<&str> = files.iter().filter_map(|f| f["file_path"].as_str()).collect();
    if got != req {
        w.findings.mismatch("release files order", "one entry per requested path, in order", v.clone());
    }
    if v["operation"] != "release_temporary" {
        w.findings.mismatch("release operation", "release_temporary", v["operation"].clone());
    }
    let status = v["status"].as_str().unwrap_or("");
    let outcomes: Vec<&str> = files.iter().map(|f| f["outcome"].as_str().unwrap_or("")).collect();
    let released = outcomes.iter().filter(|o| **o == "released").count();
    let consistent = match status {
        "completed" => released == outcomes.len(),
        "partial" => released < outcomes.len(),
        "denied" | "invalid_input" => outcomes.iter().all(|o| *o == "denied") && v.get("receipt_id").is_none(),
        "failed" => released == 0,
        _ => false,
    };
    if !consistent {
        w.findings.mismatch("release status", "status consistent with the per-file outcomes", v.clone());
    }
    if matches!(status, "completed" | "partial") && v.get("receipt_id").is_none() {
        w.findings.mismatch("release receipt_id", "receipt_id when the filesystem was touched", v.clone());
    }
    let sum: u64 = files.iter().map(|f| f["bytes_reclaimed"].as_u64().unwrap_or(0)).sum();
    if v["bytes_reclaimed"].as_u64() != Some(sum) {
        w.findings.mismatch("release bytes_reclaimed", "the sum of the files' bytes_reclaimed", v.clone());
    }
    files
        .iter()
        .map(|f| {
            (
                f["file_path"].as_str().unwrap_or_default().to_owned(),
                f["outcome"].as_str().unwrap_or_default().to_owned(),
                f["reason"].clone(),
                f["quarantine_path"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

/// Applies the outcomes of a release answer to the ledger. `unchanged`
/// lists the targets whose pinned generation was still current when the
/// request was sent; a `released` outcome for any other target is a
/// violation unless `racing` names it (changed while the release ran).
fn apply_outcomes(
    w: &World,
    sess: &mut TrackedSession,
    targets: &[Pinned],
    outcomes: &[(String, String, Value, Option<String>)],
    racing: &HashSet<PathBuf>,
) {
    for (t, (path, outcome, reason, qpath)) in targets.iter().zip(outcomes) {
        match outcome.as_str() {
            "released" => {
                Stats::inc(&w.stats.released_files);
                if !sess.ledger.mark_released(&t.path, t.gen) && !racing.contains(&t.path) {
                    w.findings.violation(
                        "released_unpinned",
                        &t.path,
                        "released although the file changed after it was read".to_owned(),
                    );
                }
            }
            "restored" => Stats::inc(&w.stats.restored_files),
            "preserved" => {
                Stats::inc(&w.stats.preserved_files);
                let Some(q) = qpath else {
                    w.findings.mismatch("preserved", "a quarantine_path", json!({"path": path, "reason": reason}));
                    continue;
                };
                let q = PathBuf::from(q);
                let at_home = sess.ledger.get(&t.path).is_some_and(|g| {
                    crate::oracle::ledger::hash_file(&t.path).is_ok_and(|(sha, size, _)| sha == g.sha && size == g.size)
                });
                if at_home || !sess.ledger.relocate(&t.path, &q) {
                    // Something else was preserved; track it so that nothing
                    // deletes it silently.
                    match record(&q) {
                        Ok(g) => sess.ledger.add(g),
                        Err(e) => w.findings.violation("preserved_missing", &q, format!("named quarantine: {e}")),
                    }
                }
            }
            _ => {}
        }
    }
}

/// Sends a release of `targets` through frontend `fe` and checks it. With
/// `--chaos`, a release a guardian kill cut off is accounted for and sent
/// again (`workload::chaos`).
pub fn release(
    w: &World,
    sess: &mut TrackedSession,
    fe: usize,
    targets: &[Pinned],
    expect: Expect,
    racing: &HashSet<PathBuf>,
) -> anyhow::Result<Value> {
    let mut tries = 0;
    loop {
        let epoch = w.chaos.as_ref().map_or(0, |c| c.epoch());
        let v = release_once(w, sess, fe, targets, &expect, racing, epoch)?;
        match &w.chaos {
            Some(c) if v.is_null() && tries < 8 => {
                tries += 1;
                interrupted::reconcile(w, sess, targets, epoch)?;
                inc(&c.counts.replayed);
            }
            _ => return Ok(v),
        }
    }
}

/// One release request; `Value::Null` when a guardian kill cut it off.
fn release_once(
    w: &World,
    sess: &mut TrackedSession,
    fe: usize,
    targets: &[Pinned],
    expect: &Expect,
    racing: &HashSet<PathBuf>,
    epoch: u64,
) -> anyhow::Result<Value> {
    let args = release_args(w, sess, targets);
    let ws = &w.workspaces[sess.ws];
    ws.book.freeing(sess.slot, targets.iter().map(|t| t.size).sum());
    if let Some(c) = &w.chaos {
        c.release_sending();
    }
    let reply = call(w, fe, "EditFiles", args.clone());
    let reply = match reply {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            ws.book.commit(sess.slot, sess.ledger.usage().1);
            anyhow::bail!("release: {e}");
        }
        Err(e) => {
            ws.book.commit(sess.slot, sess.ledger.usage().1);
            return Err(e);
        }
    };
    let v = reply.value.clone();
    if interrupted::cut_off(w, &v, epoch) {
        ws.book.commit(sess.slot, sess.ledger.usage().1);
        return Ok(Value::Null);
    }
    if let Some(c) = &w.chaos {
        c.latency(reply.elapsed);
    }
    Stats::inc(&w.stats.releases);
    if v["replayed"] == json!(true) {
        w.findings.mismatch("fresh release", "replayed false", v.clone());
    }
    let outcomes = release_shape(w, &args, &v);
    let released = outcomes.iter().filter(|o| o.1 == "released").count() as u64;
    w.stats.latency(reply.elapsed, released);
    w.stats.bytes_reclaimed.fetch_add(v["bytes_reclaimed"].as_u64().unwrap_or(0), std::sync::atomic::Ordering::Relaxed);
    let status = reply.status().to_owned();
    match status.as_str() {
        "completed" => Stats::inc(&w.stats.completed),
        "partial" => Stats::inc(&w.stats.partial),
        "denied" | "invalid_input" => w.stats.denial(reply.error_code().unwrap_or("?")),
        _ => Stats::inc(&w.stats.failed),
    }
    match expect {
        Expect::Any => {}
        Expect::Denied { codes, kind } => {
            if released > 0 {
                for (p, o, _, _) in &outcomes {
                    if o == "released" {
                        w.findings.violation(kind, Path::new(p), format!("released though it must be denied: {v}"));
                    }
                }
            } else if !codes.contains(&reply.error_code().unwrap_or("")) {
                // The message says which check refused (for an
                // `execution_active`, which execution or cgroup).
                let got = json!({"status": status, "errorCode": v["errorCode"], "message": v["message"]});
                w.findings.mismatch(kind, &codes.join(" | "), got);
            }
        }
    }
    apply_outcomes(w, sess, targets, &outcomes, racing);
    if v.get("receipt_id").is_some() && v.get("receipt_error").is_none() {
        let rec = Recorded {
            args,
            outcomes: outcomes.iter().map(|(p, o, r, _)| (p.clone(), o.clone(), r.clone())).collect(),
        };
        if sess.recorded.len() >= 64 {
            let i = sess.rng.index(sess.recorded.len());
            sess.recorded.swap_remove(i);
        }
        // The newest record is always the last one.
        sess.recorded.push(rec);
    }
    ws.book.commit(sess.slot, sess.ledger.usage().1);
    Ok(v)
}

/// Replays a recorded release through frontend `fe`: it must answer
/// `replayed: true` with the recorded outcomes and touch nothing.
pub fn replay(w: &World, fe: usize, rec: &Recorded) -> anyhow::Result<()> {
    let r = call_ok(w, fe, "EditFiles", rec.args.clone())?;
    let v = &r.value;
    if v["replayed"] != json!(true) {
        w.findings.violation(
            "replay_not_replayed",
            Path::new(rec.outcomes.first().map_or("", |o| o.0.as_str())),
            format!("a recorded release was not replayed: {v}"),
        );
        // Whatever it did, the ledger check that follows sees it.
        return Ok(());
    }
    Stats::inc(&w.stats.replays);
    let got: Vec<(String, String, Value)> = v["files"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            (
                f["file_path"].as_str().unwrap_or_default().to_owned(),
                f["outcome"].as_str().unwrap_or_default().to_owned(),
                f["reason"].clone(),
            )
        })
        .collect();
    if got != rec.outcomes {
        w.findings.violation(
            "replay_differs",
            Path::new(rec.outcomes.first().map_or("", |o| o.0.as_str())),
            format!("replayed outcomes differ from the recorded ones: {v}"),
        );
    }
    Ok(())
}

/// Verifies `sess`'s ledger (and its workspace's sources).
pub fn verify(w: &World, sess: &mut TrackedSession, context: &str) {
    sess.ledger.verify(&w.findings, context, false);
    w.workspaces[sess.ws].book.commit(sess.slot, sess.ledger.usage().1);
}

/// Runs `winx-release audit` on workspace `ws`: it must delete nothing.
pub fn audit(w: &World, ws: usize, log: &str) -> anyhow::Result<Value> {
    Stats::inc(&w.stats.audits);
    let root = w.workspaces[ws].root.clone();
    let (code, v) = w.private.run_json(&["audit", "--workspace", &root], log)?;
    if code != 0 {
        w.findings.note("audit_failed");
        return Ok(v);
    }
    let deferred = v["deletion_deferred"] == "runtime_protection_unknown";
    if v["deleted_files"] != json!(0) || v["deleted_bytes"] != json!(0) {
        w.findings.violation("audit_deleted", Path::new(&root), format!("the audit reports deletions: {v}"));
    }
    if !deferred {
        w.findings.mismatch("audit deletion_deferred", "runtime_protection_unknown", v["deletion_deferred"].clone());
    }
    Ok(v)
}

/// Sleeps a little (used between the steps of a race).
pub fn nap(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}
