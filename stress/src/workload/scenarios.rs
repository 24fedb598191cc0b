//! The steps of the workload. Each takes the session it works on, does one
//! thing the contract describes (a plain release, a release blocked by a
//! running command, an identical-text replacement between read and release,
//! a link dropped into a backing root, ...), and returns the release answer
//! it provoked (`None` when the session had nothing to work on). The setup
//! phase runs them once each as named checks; the workers run them at
//! random.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::{json, Value};

use crate::oracle::ledger::{in_quarantine, record};
use crate::oracle::quota;
use crate::workload::ops::{self, Expect, Written};
use crate::workload::world::{Pinned, Stats, TrackedSession, World};

/// Helpers of `sess` to work on: up to `k` present ones, files of at most
/// `max_size` bytes first.
pub fn pick(sess: &mut TrackedSession, k: usize, max_size: u64) -> Vec<PathBuf> {
    let mut small: Vec<PathBuf> = sess
        .ledger
        .present()
        .into_iter()
        .filter(|g| g.size <= max_size && !in_quarantine(&g.path))
        .map(|g| g.path.clone())
        .collect();
    sess.rng.shuffle(&mut small);
    small.truncate(k);
    small
}

/// Reads `k` helpers (through `fe`) and returns what can be released.
pub fn read_some(
    w: &World,
    sess: &mut TrackedSession,
    fe: usize,
    k: usize,
    max_size: u64,
) -> anyhow::Result<Vec<Pinned>> {
    let paths = pick(sess, k, max_size);
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    let pinned = ops::read(w, sess, fe, &paths)?;
    Ok(pinned.into_iter().filter(|p| p.token.is_some()).collect())
}

fn small_limit(sess: &mut TrackedSession) -> u64 {
    if sess.rng.chance(100) {
        u64::MAX
    } else {
        1 << 20
    }
}

/// A plain release of 1–8 helpers.
pub fn plain_release(w: &World, sess: &mut TrackedSession, expect: Expect) -> anyhow::Result<Option<Value>> {
    let k = sess.rng.range(1, 8) as usize;
    let limit = small_limit(sess);
    let t = read_some(w, sess, sess.home, k, limit)?;
    if t.is_empty() {
        return Ok(None);
    }
    ops::release(w, sess, sess.home, &t, expect, &HashSet::new()).map(Some)
}

/// How many bytes a new helper of `sess` could take without a refusal if
/// every other session of its workspace held the least it may hold now
/// (`None` when the session is at its file quota: any new file is
/// refused).
pub fn write_room(w: &World, sess: &TrackedSession) -> Option<u64> {
    let (files, bytes) = sess.ledger.usage();
    let (low, _) = w.workspaces[sess.ws].book.range(sess.slot, bytes);
    room_for(files, bytes, low)
}

/// [`write_room`] of a session holding `files` files of `bytes` bytes in
/// a workspace holding at least `low` bytes.
fn room_for(files: u64, bytes: u64, low: u64) -> Option<u64> {
    if files >= quota::MAX_SESSION_FILES {
        return None;
    }
    Some(quota::MAX_SESSION_BYTES.saturating_sub(bytes).min(quota::MAX_WORKSPACE_BYTES.saturating_sub(low)))
}

/// Whether an agent would not write now: its session is at the file
/// quota, or less than 64 KiB would fit.
pub fn quota_full(w: &World, sess: &TrackedSession) -> bool {
    full(write_room(w, sess))
}

/// [`quota_full`] of a room.
fn full(room: Option<u64>) -> bool {
    room.is_none_or(|room| room < 64 << 10)
}

/// The size a helper planned at `size` is written at, with `room` left:
/// as planned when it fits; made to fit nine times in ten otherwise (at
/// most 32 KiB), sent as planned the tenth (a refusal probe).
fn fitted(size: u64, room: u64, rng: &mut crate::workload::rng::Rng) -> u64 {
    if size > room && !rng.chance(100) {
        rng.range(0, room.min(32 << 10))
    } else {
        size
    }
}

/// Tool writes of 1–4 new helpers (or a replacement of one with other
/// content), checked against the quotas.
///
/// A helper that would not fit even at the low end of the workspace's
/// usage ([`write_room`]) is, nine times in ten, made to fit: an agent
/// told `quota_exceeded` writes less. The tenth is sent as planned, so
/// that refusals at the quota edges stay probed (the setup probes each
/// edge exactly, too).
pub fn create_tool(w: &World, sess: &mut TrackedSession) -> anyhow::Result<Written> {
    let n = sess.rng.range(1, 4) as usize;
    let mut files = Vec::with_capacity(n);
    let mut room = write_room(w, sess).unwrap_or(0);
    for _ in 0..n {
        let planned =
            if sess.rng.chance(50) { sess.rng.range(256 << 10, 2 << 20) } else { sess.rng.range(0, 32 << 10) };
        let size = fitted(planned, room, &mut sess.rng);
        room = room.saturating_sub(size);
        let replace = sess.rng.chance(150);
        let path = match pick(sess, 1, 64 << 10).pop() {
            Some(p) if replace && !files.iter().any(|(q, _)| *q == p) => p,
            _ => sess.fresh_path("t"),
        };
        let content = sess.rng.text(size as usize);
        files.push((path, content));
    }
    ops::write_files(w, sess, sess.home, &files)
}

/// A helper written by a command (not governed by the quotas), kept within
/// the session's quotas by the tool itself; sometimes a command whose
/// output is dropped into the scratch backing root.
pub fn create_bash(w: &World, sess: &mut TrackedSession) -> anyhow::Result<()> {
    let (files, bytes) = sess.ledger.usage();
    let room = crate::oracle::quota::MAX_SESSION_BYTES.saturating_sub(bytes);
    if files >= 120 || room < (64 << 10) {
        return Ok(());
    }
    let size = if sess.rng.chance(100) { sess.rng.range(1 << 20, 8 << 20) } else { sess.rng.range(1 << 10, 256 << 10) };
    let size = size.min(room / 2);
    let path = sess.fresh_path("b");
    ops::bash_create(w, sess, &path, size, false)?;
    if sess.rng.chance(150) {
        // More than the 64 KiB inline limit: dropped into W/.winx/scratch.
        let v = ops::bash(w, sess, "head -c 70000 /dev/zero | tr '\\0' x", 30.0, false)?;
        if v["status"] == "running" {
            ops::wait_command(w, sess, v["command_id"].as_str().unwrap_or_default())?;
        }
    }
    Ok(())
}

/// A copy of `path` beside it, to be renamed over it. Until
/// [`commit`] the copy's bytes count as in flight in the workspace's quota
/// account (the frontends see them).
fn copy_beside(w: &World, sess: &mut TrackedSession, path: &Path) -> anyhow::Result<PathBuf> {
    let n = sess.next_number();
    let tmp = path.with_file_name(format!(".stress-copy-{n}"));
    let size = std::fs::symlink_metadata(path).map_or(0, |m| m.len());
    w.workspaces[sess.ws].book.adding(sess.slot, size);
    std::fs::copy(path, &tmp).with_context(|| format!("copy {}", path.display()))?;
    Ok(tmp)
}

/// Commits the session's usage to its workspace's quota account.
fn commit(w: &World, sess: &TrackedSession) {
    w.workspaces[sess.ws].book.commit(sess.slot, sess.ledger.usage().1);
}

/// Read, then replace one target with identical text (a new inode), then
/// release: the token no longer matches (`read_required`).
pub fn identical_replacement(w: &World, sess: &mut TrackedSession) -> anyhow::Result<Option<Value>> {
    let k = sess.rng.range(1, 4) as usize;
    let t = read_some(w, sess, sess.home, k, 1 << 20)?;
    let Some(victim) = t.first().map(|p| p.path.clone()) else { return Ok(None) };
    Stats::inc(&w.stats.adversarial);
    let text = std::fs::read_to_string(&victim).ok().filter(|_| sess.rng.chance(500));
    if let Some(content) = text {
        // The same text through the tool itself.
        let r = ops::write_files(w, sess, sess.home, &[(victim.clone(), content)])?;
        if r != Written::Yes {
            w.findings.note(&format!("identical_rewrite_refused_{r:?}"));
            return Ok(None);
        }
    } else {
        let tmp = copy_beside(w, sess, &victim)?;
        std::fs::rename(&tmp, &victim)?;
        sess.ledger.add(record(&victim)?);
        commit(w, sess);
    }
    let expect = Expect::Denied { codes: &["read_required"], kind: "released_replacement" };
    ops::release(w, sess, sess.home, &t, expect, &HashSet::new()).map(Some)
}

/// Read, then change one target's content through the tool, then release
/// with the old revision and token.
pub fn changed_content(w: &World, sess: &mut TrackedSession) -> anyhow::Result<Option<Value>> {
    let t = read_some(w, sess, sess.home, 2, 64 << 10)?;
    let Some(victim) = t.first().map(|p| p.path.clone()) else { return Ok(None) };
    Stats::inc(&w.stats.adversarial);
    // Other text of the same size: no quota stands in the way.
    let size = sess.ledger.get(&victim).map_or(10, |g| g.size as usize).max(1);
    let mut content = sess.rng.text(size);
    while std::fs::read(&victim).is_ok_and(|old| old == content.as_bytes()) {
        content = sess.rng.text(size);
    }
    let r = ops::write_files(w, sess, sess.home, &[(victim, content)])?;
    if r != Written::Yes {
        w.findings.note(&format!("changed_rewrite_refused_{r:?}"));
        return Ok(None);
    }
    let expect = Expect::Denied { codes: &["read_required", "revision_mismatch"], kind: "released_changed" };
    ops::release(w, sess, sess.home, &t, expect, &HashSet::new()).map(Some)
}

/// Read, then release while another thread replaces one target with
/// identical text: whatever wins, the replacement survives.
pub fn racing_replacement(w: &World, sess: &mut TrackedSession) -> anyhow::Result<Option<Value>> {
    let k = sess.rng.range(1, 4) as usize;
    let t = read_some(w, sess, sess.home, k, 1 << 20)?;
    let Some(victim) = t.get(sess.rng.index(t.len())).map(|p| p.path.clone()) else { return Ok(None) };
    Stats::inc(&w.stats.adversarial);
    let tmp = copy_beside(w, sess, &victim)?;
    let ino = std::fs::symlink_metadata(&tmp)?.ino();
    let delay = sess.rng.below(15);
    let (v2, tmp2) = (victim.clone(), tmp.clone());
    let racer = std::thread::spawn(move || {
        ops::nap(delay);
        std::fs::rename(&tmp2, &v2)
    });
    let racing: HashSet<PathBuf> = [victim.clone()].into_iter().collect();
    let v = ops::release(w, sess, sess.home, &t, Expect::Any, &racing);
    let renamed = racer.join().map_err(|_| anyhow::anyhow!("racer panicked"))?;
    let v = v?;
    if let Err(e) = renamed {
        // The rename lost against something: the copy is still ours.
        w.findings.note("race_rename_failed");
        let _ = std::fs::remove_file(&tmp);
        tracing::debug!(error = %e, "race rename failed");
        return Ok(Some(v));
    }
    // The replacement must be at its name, or named as preserved.
    match std::fs::symlink_metadata(&victim) {
        Ok(m) if m.ino() == ino => sess.ledger.add(record(&victim)?),
        _ => {
            let preserved = v["files"].as_array().into_iter().flatten().find_map(|f| {
                (f["file_path"].as_str() == victim.to_str() && f["outcome"] == "preserved")
                    .then(|| f["quarantine_path"].as_str().map(PathBuf::from))
                    .flatten()
            });
            match preserved.filter(|q| std::fs::symlink_metadata(q).is_ok_and(|m| m.ino() == ino)) {
                Some(q) => sess.ledger.add(record(&q)?),
                None => {
                    let size = sess.ledger.get(&victim).map_or(0, |g| g.size);
                    w.findings.lost(&victim, size, format!("the racing replacement is gone: {v}"));
                    sess.ledger.forget(&victim);
                }
            }
        }
    }
    commit(w, sess);
    Ok(Some(v))
}

/// Read through one frontend, release through another: the token is of
/// another process (`read_required`).
pub fn cross_frontend(w: &World, sess: &mut TrackedSession) -> anyhow::Result<Option<Value>> {
    if sess.home == sess.other {
        return Ok(None);
    }
    let t = read_some(w, sess, sess.other, 2, 1 << 20)?;
    if t.is_empty() {
        return Ok(None);
    }
    Stats::inc(&w.stats.adversarial);
    let expect = Expect::Denied { codes: &["read_required"], kind: "released_foreign_token" };
    ops::release(w, sess, sess.home, &t, expect, &HashSet::new()).map(Some)
}

fn gated(gate: &Path) -> String {
    format!("while [ ! -e '{}' ]; do sleep 0.02; done", gate.display())
}

/// Which blocking command a [`blocked_release`] starts.
#[derive(Clone, Copy, Debug)]
pub enum Blocker {
    /// A background command.
    Background,
    /// A foreground command whose inline wait returned while it runs.
    InlineWait,
    /// A running foreground command, and a second command sent to the
    /// thread's busy shell meanwhile (refused, `execution_active`: there
    /// is no queue).
    Queued,
}

/// Starts a command that cannot end until the tool opens its gate, then
/// releases: nothing may be released while it runs. Then opens the gate,
/// waits for the command, and releases the same targets again.
pub fn blocked_release(w: &World, sess: &mut TrackedSession, blocker: Blocker) -> anyhow::Result<Option<Value>> {
    let t = read_some(w, sess, sess.home, 3, 1 << 20)?;
    if t.is_empty() {
        return Ok(None);
    }
    let gate = w.new_gate();
    let (first, queued) = match blocker {
        Blocker::Background => (ops::bash(w, sess, &gated(&gate), 0.0, true)?, None),
        Blocker::InlineWait => (ops::bash(w, sess, &gated(&gate), 0.1, false)?, None),
        Blocker::Queued => {
            let a = ops::bash(w, sess, &gated(&gate), 0.1, false)?;
            let args = json!({"thread_id": sess.thread_id, "command": "true", "wait_for_seconds": 0.1});
            let b = ops::call_ok(w, sess.home, "BashCommand", args)?;
            if a["status"] == "running" && b.error_code() != Some("execution_active") {
                w.findings.mismatch("a command sent to a busy shell", "refused: execution_active", b.value.clone());
            }
            (a, None::<Value>)
        }
    };
    if first["status"] != "running" {
        w.open_gate(&gate);
        w.findings.mismatch("gated command", "status running", first);
        return Ok(None);
    }
    if let Some(b) = &queued {
        if b["status"] != "running" {
            w.findings.mismatch("queued command", "status running (queued)", b.clone());
        }
    }
    let (codes, kind): (&'static [&'static str], _) = match blocker {
        Blocker::Queued => (&["pending_actions", "execution_active"], "released_with_pending_action"),
        _ => (&["execution_active"], "released_during_execution"),
    };
    let v = ops::release(w, sess, sess.home, &t, Expect::Denied { codes, kind }, &HashSet::new());
    w.open_gate(&gate);
    let v = v?;
    ops::wait_command(w, sess, first["command_id"].as_str().unwrap_or_default())?;
    if let Some(b) = queued {
        ops::wait_command(w, sess, b["command_id"].as_str().unwrap_or_default())?;
    }
    // The command has ended: the same reads are releasable now.
    let still: Vec<Pinned> =
        t.into_iter().filter(|p| sess.ledger.get(&p.path).is_some_and(|g| g.id == p.gen)).collect();
    if !still.is_empty() {
        ops::release(w, sess, sess.home, &still, Expect::Any, &HashSet::new())?;
    }
    Ok(Some(v))
}

/// A symbolic link dropped into the workspace's scratch backing root:
/// every release of the workspace fails closed (`backing_symlink`).
pub fn symlink_in_backing(
    w: &World,
    sess: &mut TrackedSession,
    root: Option<PathBuf>,
) -> anyhow::Result<Option<Value>> {
    let t = read_some(w, sess, sess.home, 2, 1 << 20)?;
    if t.is_empty() {
        return Ok(None);
    }
    Stats::inc(&w.stats.adversarial);
    let root = root.unwrap_or_else(|| w.workspaces[sess.ws].scratch());
    std::fs::create_dir_all(&root)?;
    let n = sess.next_number();
    let link = root.join(format!("stress-link-{}-{n}", sess.idx));
    std::os::unix::fs::symlink(&t[0].path, &link)?;
    let expect = Expect::Denied { codes: &["backing_symlink", "backing_scan_limit"], kind: "fail_open_backing_link" };
    let v = ops::release(w, sess, sess.home, &t, expect, &HashSet::new());
    std::fs::remove_file(&link)?;
    v.map(Some)
}

/// A hard link of a target dropped into the scratch backing root after
/// the read: refused (`hardlink`, or the alias, or the changed identity).
pub fn hardlink_in_backing(w: &World, sess: &mut TrackedSession) -> anyhow::Result<Option<Value>> {
    let t = read_some(w, sess, sess.home, 2, 1 << 20)?;
    let Some(victim) = t.first().map(|p| p.path.clone()) else { return Ok(None) };
    Stats::inc(&w.stats.adversarial);
    let root = w.workspaces[sess.ws].scratch();
    std::fs::create_dir_all(&root)?;
    let n = sess.next_number();
    let link = root.join(format!("stress-hl-{}-{n}", sess.idx));
    std::fs::hard_link(&victim, &link)?;
    let expect = Expect::Denied { codes: &["hardlink", "backing_alias", "read_required"], kind: "released_hardlinked" };
    let v = ops::release(w, sess, sess.home, &t, expect, &HashSet::new());
    std::fs::remove_file(&link)?;
    sess.ledger.refresh(&victim);
    v.map(Some)
}

/// A release that completes, then a new file at a released name, then the
/// same request again: a replay that touches nothing (through `fe`).
pub fn new_file_at_released_name(w: &World, sess: &mut TrackedSession, fe: usize) -> anyhow::Result<Option<Value>> {
    let t = read_some(w, sess, sess.home, 2, 1 << 20)?;
    if t.is_empty() {
        return Ok(None);
    }
    let v = ops::release(w, sess, sess.home, &t, Expect::Any, &HashSet::new())?;
    let Some(path) = v["files"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|f| (f["outcome"] == "released").then(|| f["file_path"].as_str().map(PathBuf::from)).flatten())
    else {
        return Ok(None);
    };
    Stats::inc(&w.stats.adversarial);
    let len = sess.rng.range(1, 4096) as usize;
    let content = sess.rng.text(len);
    if sess.rng.chance(500) {
        if ops::write_files(w, sess, sess.home, &[(path.clone(), content)])? != Written::Yes {
            return Ok(None);
        }
    } else {
        w.workspaces[sess.ws].book.adding(sess.slot, content.len() as u64);
        std::fs::write(&path, content)?;
        sess.ledger.add(record(&path)?);
        commit(w, sess);
    }
    let Some(rec) = sess.recorded.last().cloned() else { return Ok(None) };
    ops::replay(w, fe, &rec)?;
    Ok(Some(v))
}

/// A replay of a recorded release through a random frontend.
pub fn replay_one(w: &World, sess: &mut TrackedSession) -> anyhow::Result<bool> {
    if sess.recorded.is_empty() {
        return Ok(false);
    }
    let rec = sess.recorded[sess.rng.index(sess.recorded.len())].clone();
    let fe = sess.rng.index(w.worker_frontends);
    ops::replay(w, fe, &rec)?;
    Ok(true)
}

/// A release of one of the workspace's source files (no token):
/// `not_session_helper`.
pub fn source_release(w: &World, sess: &mut TrackedSession) -> anyhow::Result<Option<Value>> {
    let src = {
        let sources = w.workspaces[sess.ws].sources.lock().unwrap_or_else(|e| e.into_inner());
        let p = sources.present();
        if p.is_empty() {
            return Ok(None);
        }
        p[sess.rng.index(p.len())].path.clone()
    };
    let read = ops::call_ok(
        w,
        sess.home,
        "ReadFiles",
        json!({"thread_id": sess.thread_id, "file_paths": [src.to_string_lossy()]}),
    )?;
    let revision = read.value["files"][0]["revision"].as_str().unwrap_or_default().to_owned();
    if read.value["files"][0].get("temporary_artifact").is_some() {
        w.findings.mismatch("ReadFiles of a source file", "no temporary_artifact", read.value.clone());
    }
    // ReadFiles gives a source file no token; a request without one is
    // `invalid_input` before any path rule (contract section 4), so the
    // request carries a well-formed token that placement refuses first.
    let token = Some(format!("g1.{}", "0".repeat(64)));
    let t = [Pinned { path: src.clone(), gen: 0, revision, token, size: 0 }];
    let expect = Expect::Denied { codes: &["not_session_helper"], kind: "released_source" };
    let v = ops::release(w, sess, sess.home, &t, expect, &HashSet::new())?;
    w.workspaces[sess.ws].sources.lock().unwrap_or_else(|e| e.into_inner()).verify(
        &w.findings,
        "source release",
        false,
    );
    Ok(Some(v))
}

/// A release of a file in another session's directory: `other_session`.
pub fn other_session_release(w: &World, sess: &mut TrackedSession, other_dir: &Path) -> anyhow::Result<Option<Value>> {
    let Some(name) = std::fs::read_dir(other_dir)
        .ok()
        .and_then(|d| d.flatten().find(|e| e.file_type().is_ok_and(|t| t.is_file())).map(|e| e.file_name()))
    else {
        return Ok(None);
    };
    let target = other_dir.join(name);
    let t = [Pinned {
        path: target,
        gen: 0,
        revision: format!("sha256:{}", "0".repeat(64)),
        token: Some("stress-not-a-token".to_owned()),
        size: 0,
    }];
    Stats::inc(&w.stats.adversarial);
    let expect = Expect::Denied { codes: &["other_session"], kind: "released_other_session" };
    ops::release(w, sess, sess.home, &t, expect, &HashSet::new()).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::rng::Rng;

    #[test]
    fn the_room_is_the_tighter_quota_and_none_at_the_file_quota() {
        assert_eq!(room_for(quota::MAX_SESSION_FILES, 0, 0), None);
        assert_eq!(room_for(0, 0, 0), Some(quota::MAX_SESSION_BYTES.min(quota::MAX_WORKSPACE_BYTES)));
        // The session's own quota binds.
        assert_eq!(room_for(1, quota::MAX_SESSION_BYTES - 10, 0), Some(10));
        // The workspace's binds: other sessions hold nearly all of it.
        assert_eq!(room_for(1, 0, quota::MAX_WORKSPACE_BYTES - 7), Some(7));
        assert_eq!(room_for(1, 0, quota::MAX_WORKSPACE_BYTES + 5), Some(0));
    }

    #[test]
    fn an_agent_at_a_quota_stops_writing_below_64_kib_of_room() {
        assert!(full(None));
        assert!(full(Some((64 << 10) - 1)));
        assert!(!full(Some(64 << 10)));
    }

    #[test]
    fn a_write_that_does_not_fit_is_made_to_fit_nine_times_in_ten() {
        let mut rng = Rng::new(5);
        // What fits is sent as planned.
        for size in [0, 1, 4096, 10_000] {
            assert_eq!(fitted(size, 10_000, &mut rng), size);
        }
        // What does not fit: about 9 in 10 shrunk to fit (at most 32 KiB),
        // the rest sent as planned, to probe the refusal.
        let (mut shrunk, mut probes) = (0, 0);
        for _ in 0..2000 {
            match fitted(2 << 20, 100_000, &mut rng) {
                s if s <= 32 << 10 => shrunk += 1,
                s => {
                    assert_eq!(s, 2 << 20);
                    probes += 1;
                }
            }
        }
        assert!((1700..=1900).contains(&shrunk), "{shrunk} shrunk, {probes} probes");
        // With less room than 32 KiB, a shrunk write fits the room.
        for _ in 0..200 {
            let s = fitted(1 << 20, 500, &mut rng);
            assert!(s <= 500 || s == 1 << 20, "{s}");
        }
    }
}
