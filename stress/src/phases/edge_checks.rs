//! Edge checks of the setup phase: the scan bound at exactly 50,000 entries
//! and one more, backing-store entries that fail closed, request shapes
//! refused at the MCP wire, and owners that cannot release. Each check has
//! one expected answer; nothing else runs meanwhile.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::{json, Value};

use crate::config::Config;
use crate::workload::backing::Backing;
use crate::workload::opening::{check_denied, denied_with, open_session, SCAN_BOUND};
use crate::workload::ops::{self, Expect, Written};
use crate::workload::scenarios::{self};
use crate::workload::world::{Stats, TrackedSession, World};

/// The scan bound: 50,000 entries pass, 50,001 fail closed with every
/// helper preserved.
pub(super) fn bound_checks(w: &World, s: &mut TrackedSession, backing: &mut Backing) -> anyhow::Result<()> {
    let got = backing.set_total(SCAN_BOUND)?;
    let v = scenarios::read_some(w, s, s.home, 1, 64 << 10)?;
    if !v.is_empty() && got == SCAN_BOUND {
        let r = ops::release(w, s, s.home, &v, Expect::Any, &HashSet::new())?;
        w.check(
            "backing roots at exactly 50,000 entries: release completes",
            r["status"] == "completed",
            format!("{} {}", r["status"], r["errorCode"]),
        );
    }
    let got = backing.set_total(SCAN_BOUND + 1)?;
    let t = scenarios::read_some(w, s, s.home, 3, 64 << 10)?;
    let expect = Expect::Denied { codes: &["backing_scan_limit"], kind: "fail_open_scan_limit" };
    let r = if t.is_empty() { None } else { Some(ops::release(w, s, s.home, &t, expect, &HashSet::new())?) };
    let (ok, detail) = denied_with(&r, &["backing_scan_limit"]);
    w.check("backing roots at 50,001 entries: fails closed (backing_scan_limit)", ok && got == SCAN_BOUND + 1, detail);
    ops::verify(w, s, "scan bound");
    Ok(())
}

fn nested(root: &Path, levels: usize) -> PathBuf {
    let mut p = root.join("stress-deep");
    for i in 2..=levels {
        p.push(format!("d{i}"));
    }
    p
}

/// Depth, links and special files in backing roots.
pub(super) fn backing_entry_checks(w: &World, s: &mut TrackedSession) -> anyhow::Result<()> {
    let scratch = w.workspaces[s.ws].scratch();
    std::fs::create_dir_all(nested(&scratch, 16))?;
    let r = scenarios::plain_release(w, s, Expect::Any)?;
    let ok = r.as_ref().is_some_and(|v| v["status"] == "completed");
    w.check("a backing root 16 levels deep: release completes", ok, format!("{:?}", r.map(|v| v["errorCode"].clone())));
    std::fs::create_dir_all(nested(&scratch, 17))?;
    let t = scenarios::read_some(w, s, s.home, 2, 64 << 10)?;
    let expect = Expect::Denied { codes: &["backing_scan_limit"], kind: "fail_open_depth" };
    let r = if t.is_empty() { None } else { Some(ops::release(w, s, s.home, &t, expect, &HashSet::new())?) };
    check_denied(w, "a backing root 17 levels deep: fails closed (backing_scan_limit)", &r, &["backing_scan_limit"]);
    std::fs::remove_dir_all(scratch.join("stress-deep"))?;

    let r = scenarios::symlink_in_backing(w, s, Some(w.private.dirs.data.join("executions")))?;
    check_denied(w, "a symlink in D/executions: fails closed (backing_symlink)", &r, &["backing_symlink"]);
    let r = scenarios::symlink_in_backing(w, s, None)?;
    check_denied(w, "a symlink in W/.winx/scratch: fails closed (backing_symlink)", &r, &["backing_symlink"]);

    let fifo = scratch.join("stress.fifo");
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(0o600), 0)?;
    let t = scenarios::read_some(w, s, s.home, 2, 64 << 10)?;
    let expect = Expect::Denied { codes: &["backing_unsupported_entry"], kind: "fail_open_fifo" };
    let r = if t.is_empty() { None } else { Some(ops::release(w, s, s.home, &t, expect, &HashSet::new())?) };
    check_denied(
        w,
        "a fifo in W/.winx/scratch: fails closed (backing_unsupported_entry)",
        &r,
        &["backing_unsupported_entry"],
    );
    std::fs::remove_file(&fifo)?;

    let r = scenarios::hardlink_in_backing(w, s)?;
    check_denied(w, "a hard link of a target in scratch: refused", &r, &["hardlink", "backing_alias", "read_required"]);
    ops::verify(w, s, "backing entry checks");
    Ok(())
}

fn raw_release(w: &World, s: &mut TrackedSession, name: &str, args: Value, code: &str) -> anyhow::Result<()> {
    let r = ops::call(w, s.home, "EditFiles", args)?;
    match r {
        Err(e) => w.check(name, false, e.to_string()),
        Ok(reply) => {
            Stats::inc(&w.stats.releases);
            let status = reply.status().to_owned();
            if matches!(status.as_str(), "completed" | "partial") {
                w.findings.violation("accepted_malformed", &s.dir, format!("{name}: {}", reply.value));
            } else {
                w.stats.denial(reply.error_code().unwrap_or("?"));
            }
            let ok = matches!(status.as_str(), "denied" | "invalid_input") && reply.error_code() == Some(code);
            w.check(name, ok, format!("{status} {}", reply.error_code().unwrap_or("-")));
        }
    }
    ops::verify(w, s, name);
    Ok(())
}

/// Request shapes the contract refuses, each with its code.
pub(super) fn shape_checks(w: &World, s: &mut TrackedSession) -> anyhow::Result<()> {
    let t = scenarios::read_some(w, s, s.home, 2, 64 << 10)?;
    anyhow::ensure!(t.len() == 2, "session {} has too few helpers for the shape checks", s.idx);
    let base = ops::release_args(w, s, &t);
    let entry = base["files"][0].clone();
    let with = |f: &dyn Fn(&mut Value)| {
        let mut a = base.clone();
        f(&mut a);
        a
    };
    let p0 = t[0].path.to_string_lossy().into_owned();
    let dir = s.dir.to_string_lossy().into_owned();
    let cases: Vec<(&str, Value, &str)> = vec![
        ("101 entries: file_count", with(&|a| a["files"] = json!(vec![entry.clone(); 101])), "file_count"),
        ("no entries: file_count", with(&|a| a["files"] = json!([])), "file_count"),
        ("the same path twice: duplicate_path", with(&|a| a["files"][1] = entry.clone()), "duplicate_path"),
        (
            "a glob: glob_not_allowed",
            with(&|a| a["files"][0]["file_path"] = json!(format!("{dir}/*.txt"))),
            "glob_not_allowed",
        ),
        (
            "a relative path: path_not_exact",
            with(&|a| a["files"][0]["file_path"] = json!("rel/x.txt")),
            "path_not_exact",
        ),
        (
            "a .. component: path_not_exact",
            with(&|a| a["files"][0]["file_path"] = json!(format!("{dir}/../x"))),
            "path_not_exact",
        ),
        (
            "a trailing slash: path_not_exact",
            with(&|a| a["files"][0]["file_path"] = json!(format!("{p0}/"))),
            "path_not_exact",
        ),
        (
            "verify_command: verification_not_allowed",
            with(&|a| a["verify_command"] = json!("true")),
            "verification_not_allowed",
        ),
        ("mixed modes: mixed_modes", with(&|a| a["files"][1]["mode"] = json!("replace")), "mixed_modes"),
        (
            "another workspace_root: workspace_mismatch",
            with(&|a| a["workspace_root"] = json!("/")),
            "workspace_mismatch",
        ),
        (
            "an unknown thread: thread_mismatch",
            with(&|a| a["thread_id"] = json!("stress-unknown-thread")),
            "thread_mismatch",
        ),
        ("an unknown field: invalid_input", with(&|a| a["files"][0]["force"] = json!(true)), "invalid_input"),
        (
            "no expected_revision: invalid_input",
            with(&|a| a["files"][0].as_object_mut().map(|o| o.remove("expected_revision")).map_or((), |_| ())),
            "invalid_input",
        ),
        ("no token: invalid_input", with(&|a| a["files"][0]["artifact_generation"] = Value::Null), "invalid_input"),
        (
            "a forged token: read_required",
            with(&|a| a["files"][0]["artifact_generation"] = json!("AAAA")),
            "read_required",
        ),
        (
            "another revision: revision_mismatch",
            with(&|a| a["files"][0]["expected_revision"] = json!(format!("sha256:{}", "0".repeat(64)))),
            "revision_mismatch",
        ),
        (
            "the reserved namespace: reserved_namespace",
            with(&|a| a["files"][0]["file_path"] = json!(format!("{dir}/.winx-release-0123456789abcdef/t000"))),
            "reserved_namespace",
        ),
        (
            "a missing file: not_found",
            with(&|a| a["files"][0]["file_path"] = json!(format!("{dir}/no-such-helper"))),
            "not_found",
        ),
    ];
    for (name, args, code) in cases {
        raw_release(w, s, &format!("release with {name}"), args, code)?;
    }
    // A directory and a symlink inside the session.
    let sub = s.dir.join("stress-subdir");
    std::fs::create_dir_all(&sub)?;
    let args = with(&|a| a["files"][0]["file_path"] = json!(sub.to_string_lossy()));
    raw_release(w, s, "release of a directory: not_regular_file", args, "not_regular_file")?;
    std::fs::remove_dir(&sub)?;
    let link = s.dir.join("stress-symlink");
    std::os::unix::fs::symlink(&t[0].path, &link)?;
    let args = with(&|a| a["files"][0]["file_path"] = json!(link.to_string_lossy()));
    raw_release(w, s, "release of a symlink helper: symlink", args, "symlink")?;
    std::fs::remove_file(&link)?;
    // A tool write into the reserved namespace.
    let q = s.dir.join(".winx-release-0123456789abcdef").join("x");
    let r = ops::write_files(w, s, s.home, &[(q.clone(), "x".to_owned())])?;
    w.check(
        "a tool write into .winx-release-*: reserved_namespace",
        r == Written::Refused("reserved_namespace".to_owned()) && !q.exists(),
        format!("{r:?}"),
    );
    Ok(())
}

/// Removes a file the tool placed itself, after its checks.
fn forget_file(w: &World, s: &mut TrackedSession, p: &Path) -> anyhow::Result<()> {
    std::fs::remove_file(p).with_context(|| format!("remove {}", p.display()))?;
    s.ledger.forget(p);
    w.workspaces[s.ws].book.commit(s.slot, s.ledger.usage().1);
    Ok(())
}

/// Policy and runtime refusals: architect mode, an embedded frontend.
pub(super) fn owner_checks(w: &World, extras: &mut Vec<TrackedSession>, cfg: &Config) -> anyhow::Result<()> {
    let arch_thread = format!("stress-{}-architect", cfg.seed());
    let (mut a, _) =
        open_session(w, 3000, 0, &arch_thread, 0, 0, Some("architect"), crate::workload::rng::Rng::new(3))?;
    let p = a.fresh_path("arch");
    let r = ops::write_files(w, &mut a, 0, &[(p.clone(), "x".to_owned())])?;
    w.check(
        "architect mode: a tool write is policy_denied",
        r == Written::Refused("policy_denied".to_owned()),
        format!("{r:?}"),
    );
    let p = a.dir.join("arch.txt");
    std::fs::write(&p, "left by an earlier run\n").context("architect helper")?;
    a.ledger.add_path(&p)?;
    let t = ops::read(w, &a, 0, std::slice::from_ref(&p))?;
    let expect = Expect::Denied { codes: &["policy_denied"], kind: "released_in_architect_mode" };
    let r = ops::release(w, &mut a, 0, &t, expect, &HashSet::new())?;
    check_denied(w, "architect mode: a release is policy_denied", &Some(r), &["policy_denied"]);
    ops::verify(w, &mut a, "architect");
    // Not governed by the quotas, so out of the way of the quota checks.
    forget_file(w, &mut a, &p)?;
    extras.push(a);

    let emb = w.worker_frontends;
    let ws = w.workspaces.len() - 1;
    let emb_thread = format!("stress-{}-embedded", cfg.seed());
    let (mut e, v) = open_session(w, 3001, ws, &emb_thread, emb, emb, None, crate::workload::rng::Rng::new(4))?;
    let tr = &v["temporary_release"];
    w.check(
        "embedded frontend: temporary_release unavailable (embedded_runtime)",
        tr["available"] == json!(false) && tr["reason"] == "embedded_runtime",
        tr.to_string(),
    );
    let p = e.dir.join("emb.txt");
    std::fs::write(&p, "embedded helper\n").context("embedded helper")?;
    e.ledger.add_path(&p)?;
    let t = ops::read(w, &e, emb, std::slice::from_ref(&p))?;
    let expect = Expect::Denied { codes: &["embedded_runtime"], kind: "released_by_embedded_runtime" };
    let r = ops::release(w, &mut e, emb, &t, expect, &HashSet::new())?;
    check_denied(w, "embedded frontend: a release is embedded_runtime", &Some(r), &["embedded_runtime"]);
    ops::verify(w, &mut e, "embedded");
    forget_file(w, &mut e, &p)?;
    extras.push(e);
    Ok(())
}
