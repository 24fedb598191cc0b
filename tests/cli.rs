//! The `winx-release` binary's `scan`, `audit` and `recover` subcommands, run
//! as processes on trees built here.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_winx-release"))
}

fn json_of(out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "exactly one JSON line expected, got {stdout:?}; stderr {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(lines[0]).unwrap()
}

fn tree(root: &Path) {
    fs::create_dir_all(root.join("a/b/c")).unwrap();
    fs::write(root.join("a/one"), b"12345").unwrap();
    fs::write(root.join("a/b/two"), b"123").unwrap();
    fs::write(root.join("a/b/c/three"), b"").unwrap();
}

#[test]
fn scan_clean_tree_prints_contract_json() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    tree(&root);
    let out = bin().args(["scan", "--backend", "sync"]).arg(&root).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json_of(&out);
    assert_eq!(v["verdict"], "clean");
    assert_eq!(v["reason"], Value::Null);
    assert_eq!(v["path"], Value::Null);
    assert_eq!(v["entries"], 6);
    assert_eq!(v["directories"], 3);
    assert_eq!(v["files"], 3);
    // Lean by default: sizes are not measured.
    assert_eq!(v["bytes"], Value::Null);
    assert_eq!(v["max_depth"], 4);
    assert_eq!(v["backend"], "sync");
    assert!(v["elapsed_us"].is_u64());
    for key in
        ["verdict", "reason", "path", "entries", "directories", "files", "bytes", "max_depth", "backend", "elapsed_us"]
    {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    for backend in ["sync", "uring", "threads", "auto"] {
        let out = bin().args(["scan", "--sizes", "--backend", backend]).arg(&root).output().unwrap();
        let sized = json_of(&out);
        assert_eq!(sized["bytes"], 8, "{backend}");
        let out = bin().args(["scan", "--backend", backend]).arg(&root).output().unwrap();
        let lean = json_of(&out);
        for key in ["verdict", "entries", "directories", "files", "max_depth"] {
            assert_eq!(lean[key], sized[key], "{backend} {key}");
        }
    }
}

#[test]
fn scan_fail_closed_exits_3_with_offending_path() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    tree(&root);
    symlink("/etc", root.join("a/b/link")).unwrap();
    let out = bin().arg("scan").arg(&root).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let v = json_of(&out);
    assert_eq!(v["verdict"], "fail_closed");
    assert_eq!(v["reason"], "backing_symlink");
    assert_eq!(v["path"], root.join("a/b/link").to_str().unwrap());
}

#[test]
fn scan_alias_and_limits() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    tree(&root);
    let outside = tmp.path().join("helper");
    fs::hard_link(root.join("a/one"), &outside).unwrap();
    let out = bin().arg("scan").arg("--alias").arg(&outside).arg(&root).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(json_of(&out)["reason"], "backing_alias");
    let out = bin().args(["scan", "--max-entries", "5"]).arg(&root).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(json_of(&out)["reason"], "backing_scan_limit");
    let out = bin().args(["scan", "--max-depth", "3"]).arg(&root).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let v = json_of(&out);
    assert_eq!(v["reason"], "backing_scan_limit");
    assert_eq!(v["path"], root.join("a/b/c/three").to_str().unwrap());
    let out = bin().args(["scan", "--max-depth", "4"]).arg(&root).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn scan_missing_root_is_empty_and_several_roots_share_the_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    tree(&a);
    tree(&b);
    let out = bin().arg("scan").arg(tmp.path().join("missing")).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(json_of(&out)["entries"], 0);
    // Counted empty, and said so on stderr.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("missing does not exist; counted as empty"), "{err}");
    let out = bin().arg("scan").arg(&a).output().unwrap();
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = bin().arg("scan").arg(&a).arg(&b).output().unwrap();
    assert_eq!(json_of(&out)["entries"], 12);
    let out = bin().args(["scan", "--max-entries", "11"]).arg(&a).arg(&b).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn scan_inaccessible_entry_fails_closed_as_unprivileged_user() {
    // Root can read everything, so the scan runs as `nobody` via setpriv.
    let tmp = tempfile::tempdir().unwrap();
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let root = tmp.path().join("root");
    tree(&root);
    let locked = root.join("a/locked");
    fs::create_dir(&locked).unwrap();
    fs::write(locked.join("secret"), b"s").unwrap();
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o700)).unwrap();
    // The binary must be reachable by nobody; copy it next to the tree.
    let exe = tmp.path().join("winx-release");
    fs::copy(env!("CARGO_BIN_EXE_winx-release"), &exe).unwrap();
    fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&exe)
        .args(["scan", "--backend", "sync"])
        .arg(&root)
        .output()
        .expect("setpriv runs");
    assert_eq!(out.status.code(), Some(3), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let v = json_of(&out);
    assert_eq!(v["reason"], "backing_inaccessible");
    assert_eq!(v["path"], locked.to_str().unwrap());
}

#[test]
fn usage_errors_exit_2_and_runtime_errors_exit_1_without_panics() {
    let out = bin().args(["scan"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = bin().args(["scan", "--backend", "nope", "/"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = bin().args(["audit", "--workspace", "/definitely/not/here"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "one clear line: {err}");
    assert!(!err.contains("panicked"));
    // A recovery of a workspace that is not there says so, exit 1, and
    // prints no report.
    let data = tempfile::tempdir().unwrap();
    let out = bin()
        .args(["recover", "--workspace", "/definitely/not/here"])
        .env("XDG_DATA_HOME", data.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim(), "winx-release: workspace /definitely/not/here does not exist; nothing was recovered");
    assert!(out.stdout.is_empty());
}

#[test]
fn audit_reports_usage_and_deletes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = fs::canonicalize(tmp.path()).unwrap().join("ws");
    let s1 = ws.join(".winx/tmp/session-0123456789abcdef");
    let s2 = ws.join(".winx/tmp/session-fedcba9876543210");
    fs::create_dir_all(&s1).unwrap();
    fs::create_dir_all(s2.join("sub")).unwrap();
    fs::write(s1.join("a.py"), vec![0u8; 1000]).unwrap();
    fs::write(s2.join("sub/b.py"), vec![0u8; 10]).unwrap();
    fs::write(s2.join("c.py"), vec![0u8; 5]).unwrap();
    // A file older than the 24-hour TTL.
    let old = s2.join("old.py");
    fs::write(&old, b"old").unwrap();
    let two_days_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(2 * 24 * 3600);
    fs::File::options().write(true).open(&old).unwrap().set_modified(two_days_ago).unwrap();
    for i in 0..130 {
        fs::write(s1.join(format!("many{i}")), b"").unwrap();
    }
    let out = bin().args(["audit", "--workspace"]).arg(&ws).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json_of(&out);
    assert_eq!(v["deletion_deferred"], "runtime_protection_unknown");
    assert_eq!(v["deleted_files"], 0);
    assert_eq!(v["deleted_bytes"], 0);
    let sessions = v["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2);
    assert_eq!(sessions[0]["files"], 131);
    assert_eq!(sessions[0]["bytes"], 1000);
    assert_eq!(sessions[0]["over_quota"], true);
    assert_eq!(sessions[1]["files"], 3);
    assert_eq!(sessions[1]["bytes"], 18);
    assert_eq!(sessions[1]["past_ttl"], true);
    assert_eq!(sessions[1]["release_candidate"], true);
    assert!(old.exists() && s1.join("a.py").exists());
    assert_eq!(v["total_files"], 134);
}

#[test]
fn completions_and_man_page_are_printed() {
    let out = bin().args(["completions", "bash"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let script = String::from_utf8(out.stdout).unwrap();
    assert!(script.contains("complete -F _winx__release") && script.contains("guardian"), "{script}");
    for shell in ["zsh", "fish"] {
        let out = bin().args(["completions", shell]).output().unwrap();
        assert!(out.status.success() && !out.stdout.is_empty(), "{shell}");
    }
    let out = bin().arg("man").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(page.starts_with(".ie") || page.contains(".TH winx-release"), "{page}");
    for sub in ["WINX-RELEASE MCP", "WINX-RELEASE GUARDIAN", "\\-\\-text\\-result", "\\-\\-keep\\-executions"] {
        assert!(page.contains(sub), "{sub:?} missing from the man page");
    }
    // No pointer to per-subcommand pages that are not installed.
    assert!(!page.contains("winx\\-release\\-scan(1)") && !page.contains("(1)\n"), "{page}");
}

/// A reader of standard output that goes away (`winx-release status |
/// head -0`) ends the command quietly with status 0: no panic, no error
/// line. Both ways of printing: the human lines (`status` without a
/// guardian) and a JSON report (`audit`).
#[test]
fn a_reader_that_went_away_ends_the_command_quietly() {
    let t = tempfile::tempdir().unwrap();
    let sock = t.path().join("none.sock");
    let ws = t.path().join("ws");
    fs::create_dir(&ws).unwrap();
    let cases: [&[&str]; 2] = [
        &["status", "--socket", sock.to_str().unwrap()],
        &["audit", "--workspace", ws.to_str().unwrap(), "--socket", sock.to_str().unwrap()],
    ];
    for args in cases {
        // A pipe whose reading end is closed before the command writes.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = bin().args(args).stdout(writer).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("Broken pipe"), "{args:?}: {err}");
    }
}
