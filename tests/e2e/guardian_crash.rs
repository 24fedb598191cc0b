//! SIGKILL of the real guardian in the middle of real releases while an MCP
//! client waits; `winx-release recover` must then account for every byte
//! (contract section 8), and a retry is judged afresh.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::support::{release_req, Env};
use serde_json::{json, Value};

const HELPERS: usize = 80;
const SIZE: usize = 128 * 1024;

fn body(i: usize) -> Vec<u8> {
    (0..SIZE).map(|j| ((i * 131 + j * 7) % 251) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guardian_killed_mid_release_loses_nothing() {
    let mut interrupted = 0;
    let mut tries = 0;
    // When to kill, steered towards the window in which the release is in
    // flight: later after a kill that came before anything moved, earlier
    // after one that came when the release had finished. The window moves
    // with the machine's speed and load; fixed delays miss it.
    let mut delay_us: u64 = 40_000;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    while interrupted < 2 && tries < 20 {
        tries += 1;
        let mut env = Env::new();
        env.start_guardian();
        let mcp = env.mcp(&[]).await;
        let thread = format!("crash-{tries}");
        mcp.init(&env.ws, &thread).await;
        let session = env.session_dir(&thread);
        let mut contents: HashMap<PathBuf, Vec<u8>> = HashMap::new();
        let mut entries = Vec::new();
        for i in 0..HELPERS {
            let p = session.join(format!("h{i:03}.bin"));
            std::fs::write(&p, body(i)).unwrap();
            contents.insert(p.clone(), body(i));
        }
        let paths: Vec<PathBuf> = {
            let mut v: Vec<_> = contents.keys().cloned().collect();
            v.sort();
            v
        };
        let read = mcp.call("ReadFiles", json!({"thread_id": thread, "file_paths": paths})).await;
        for (f, p) in read["files"].as_array().unwrap().iter().zip(&paths) {
            let rev = f["revision"].as_str().unwrap().to_owned();
            let token = f["temporary_artifact"]["artifact_generation"].as_str().unwrap().to_owned();
            entries.push((p.clone(), rev, token));
        }
        let refs: Vec<(&std::path::Path, &str, &str)> =
            entries.iter().map(|(p, r, t)| (p.as_path(), r.as_str(), t.as_str())).collect();
        let req = release_req(&thread, &env.ws, &refs);

        // Send the release, then kill the guardian a little later.
        let call = mcp.edit(req.clone());
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = Duration::from_micros(delay_us * 8 / 10 + seed % (delay_us * 4 / 10).max(1));
        let killer = async {
            tokio::time::sleep(delay).await;
        };
        let (result, ()) = tokio::join!(call, async {
            killer.await;
            env.kill_guardian();
        });

        // Recovery, as an operator would run it.
        let out = env.command(&["recover", "--workspace", env.ws.to_str().unwrap()]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        if report["journals"].as_u64().unwrap_or(0) > 0 {
            interrupted += 1;
        } else if contents.keys().all(|p| p.exists()) && result["status"] != "completed" {
            delay_us = (delay_us * 4 / 3).min(2_000_000);
        } else {
            delay_us = (delay_us * 3 / 4).max(1_000);
        }
        let released_by_reply: Vec<&str> = result["files"]
            .as_array()
            .map(|a| a.iter().filter(|f| f["outcome"] == "released").filter_map(|f| f["file_path"].as_str()).collect())
            .unwrap_or_default();
        // The reply was lost after the guardian finished: the journal was
        // retired at the end of the run, so every target was either released
        // (verified, then removed) or put back. The specification accepts
        // that such a run leaves no receipt ("inspect the exact targets").
        let quarantine_left = std::fs::read_dir(&session)
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().starts_with(".winx-release-"));
        let ran_to_end = result["outcome_unknown"] == true && report["journals"] == 0 && !quarantine_left;
        let listed = |key: &str, field: &str, p: &str| {
            report[key].as_array().is_some_and(|a| a.iter().any(|e| e[field].as_str() == Some(p)))
        };
        for (p, bytes) in &contents {
            let ps = p.to_str().unwrap();
            if let Ok(now) = std::fs::read(p) {
                assert_eq!(&now, bytes, "{ps} changed");
                continue;
            }
            if listed("removed_before_crash", "file_path", ps) || released_by_reply.contains(&ps) || ran_to_end {
                continue;
            }
            let preserved = report["preserved"]
                .as_array()
                .and_then(|a| a.iter().find(|e| e["file_path"].as_str() == Some(ps)))
                .and_then(|e| e["quarantine_path"].as_str())
                .map(PathBuf::from);
            match preserved {
                Some(q) => assert_eq!(&std::fs::read(q).unwrap(), bytes),
                None => panic!("{ps} is unaccounted for\nreply {result}\nrecovery {report}"),
            }
        }
        assert!(report["unaccounted"].as_array().is_none_or(|a| a.is_empty()), "{report}");
        // No quarantine is left behind.
        for e in std::fs::read_dir(&session).unwrap() {
            let name = e.unwrap().file_name();
            assert!(!name.to_string_lossy().starts_with(".winx-release-"), "quarantine left: {name:?}");
        }

        // A retry after recovery is judged afresh: a new guardian, a new
        // explicit Initialize; missing generations fail closed.
        if result["status"] != "completed" {
            env.start_guardian();
            mcp.init(&env.ws, &thread).await;
            let retry = mcp.edit(req).await;
            let status = retry["status"].as_str().unwrap();
            assert!(matches!(status, "completed" | "denied"), "retry: {retry}");
            // Denied as a missing generation (a target released before the
            // crash) or a changed one (recovery renamed a captured target
            // back: a new change time, so its token no longer matches).
            if status == "denied" {
                let code = retry["errorCode"].as_str().unwrap_or_default();
                assert!(matches!(code, "not_found" | "read_required"), "{retry}");
            }
        }
        mcp.stop().await;
    }
    assert!(interrupted >= 1, "no try interrupted a release in {tries} tries");
}
