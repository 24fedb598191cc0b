//! The frontend through the official MCP TypeScript SDK
//! (`@modelcontextprotocol/sdk`, pinned by `tests/ts/package-lock.json`):
//! `tests/ts/e2e.mjs` reads only the text blocks and releases a helper
//! with the revision and token it found there.
//!
//! The first run installs the SDK with `npm ci` into `tests/ts/node_modules`
//! (about 10 s from the registry; later runs reuse it). Without node or
//! npm, or when the install fails (offline), the test prints why and
//! skips.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

/// `tests/ts`, with the SDK installed; `Err` says why it cannot be.
fn sdk_dir() -> Result<PathBuf, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ts");
    let node = Command::new("node").arg("--version").output().map_err(|e| format!("no node ({e})"))?;
    let version = String::from_utf8_lossy(&node.stdout);
    let major: u32 = version.trim().trim_start_matches('v').split('.').next().and_then(|m| m.parse().ok()).unwrap_or(0);
    if major < 18 {
        return Err(format!("node {} is older than 18", version.trim()));
    }
    if !dir.join("node_modules/@modelcontextprotocol/sdk/package.json").exists() {
        let out = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .output()
            .map_err(|e| format!("no npm ({e})"))?;
        if !out.status.success() {
            return Err(format!("npm ci failed (offline?): {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
    }
    Ok(dir)
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
