//! The frontend through the official MCP TypeScript SDK
//! (`@modelcontextprotocol/sdk`, pinned by `tests/ts/package-lock.json`):
//! `tests/ts/e2e.mjs` reads only the text blocks and releases a helper
//! with the revision and token it found there.
//!
//! The first run installs the SDK with `npm ci` into `tests/ts/node_modules`
//! (about 10 s from the registry; later runs reuse it, once the install
//! finished and left its mark). Without node or npm, or when the install
//! fails (offline) or does not finish within [`NPM_CI_DEADLINE`] (a
//! registry that stops answering mid-install: seen once, `npm ci` waiting
//! on a fetch for minutes), the test prints why and skips; a partial
//! install is removed.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

/// How long `npm ci` may take before the test skips (it takes about 10 s).
const NPM_CI_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

/// The file a finished install leaves in `node_modules`.
const INSTALLED: &str = ".winx-installed";

/// `tests/ts`, with the SDK installed; `Err` says why it cannot be.
fn sdk_dir() -> Result<PathBuf, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ts");
    let node = Command::new("node").arg("--version").output().map_err(|e| format!("no node ({e})"))?;
    let version = String::from_utf8_lossy(&node.stdout);
    let major: u32 = version.trim().trim_start_matches('v').split('.').next().and_then(|m| m.parse().ok()).unwrap_or(0);
    if major < 18 {
        return Err(format!("node {} is older than 18", version.trim()));
    }
    let modules = dir.join("node_modules");
    if !modules.join(INSTALLED).exists() {
        let installed = npm_ci(&dir);
        if let Err(why) = installed {
            let _ = std::fs::remove_dir_all(&modules);
            return Err(why);
        }
        std::fs::write(modules.join(INSTALLED), b"").map_err(|e| format!("cannot mark the install: {e}"))?;
    }
    Ok(dir)
}

/// Runs `npm ci` in `dir`, in a process group of its own that is killed
/// when it has not finished within [`NPM_CI_DEADLINE`].
fn npm_ci(dir: &Path) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let log = tempfile::NamedTempFile::new().map_err(|e| format!("no log file ({e})"))?;
    let stderr = log.reopen().map_err(|e| format!("no log file ({e})"))?;
    let mut child = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(dir)
        .process_group(0)
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("no npm ({e})"))?;
    let deadline = std::time::Instant::now() + NPM_CI_DEADLINE;
    let status = loop {
        match child.try_wait().map_err(|e| format!("npm ci: {e}"))? {
            Some(status) => break status,
            None if std::time::Instant::now() < deadline => std::thread::sleep(std::time::Duration::from_millis(100)),
            None => {
                if let Some(group) = rustix::process::Pid::from_raw(child.id() as i32) {
                    let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
                }
                let _ = child.wait();
                return Err(format!(
                    "npm ci did not finish in {} s (the registry stopped answering?)",
                    NPM_CI_DEADLINE.as_secs()
                ));
            }
        }
    };
    if !status.success() {
        let text = std::fs::read_to_string(log.path()).unwrap_or_default();
        return Err(format!("npm ci failed (offline?): {}", text.trim()));
    }
    Ok(())
}

#[test]
fn the_typescript_sdk_releases_a_helper_from_the_text_blocks() {
    let dir = match sdk_dir() {
        Ok(d) => d,
        Err(why) => {
            eprintln!("SKIP: the TypeScript SDK test cannot run: {why}");
            return;
        }
    };
    let mut env = Env::new();
    env.start_guardian();
    let (_, log) = env.log_file("node");
    let out = Command::new("node")
        .arg(dir.join("e2e.mjs"))
        .args([BIN, p(&env.sock), p(&env.ws)])
        .env("XDG_DATA_HOME", &env.data_home)
        .env("HOME", &env.home)
        .stderr(log)
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        env.dump_logs();
    }
    assert!(out.status.success(), "e2e.mjs failed: {stdout}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["bytes_reclaimed"].as_u64().is_some_and(|b| b > 0), "{v}");
    let leftovers: Vec<_> = std::fs::read_dir(env.session_dir("ts-sdk-thread")).unwrap().flatten().collect();
    assert!(leftovers.is_empty(), "the helper is released: {leftovers:?}");
}
