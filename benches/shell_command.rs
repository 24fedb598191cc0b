//! `true` typed into a thread's idle shell, answered `completed` at the MCP
//! client, beside a one-shot execution of `sh -c true` (an `--embedded`
//! frontend's `BashCommand`: `bash -c` as an execution of the engine's
//! runtime, output to a file, ended by its leader's exit), in one group.
//!
//! Both are measured at the MCP client (rmcp over the frontend's stdio):
//! `tools/call`, the frontend, for the shell the guardian's `shell` op, the
//! line typed, the hook's prompt, the output's end marker, and the reply.
//!
//! With `WINX_BENCH_BASELINE_BIN=OTHER_BUILD`, the same `true` in an idle
//! shell of that build's guardian and frontend joins the group (issue 54:
//! the shell under its monitor against a build without one).

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};
use winx_release_stress::harness::dirs::PrivateDirs;
use winx_release_stress::harness::guardian::GuardianProc;

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_winx-release");

/// An MCP frontend on `dirs`'s socket, `RUST_LOG` unset, with a client.
async fn mcp(dirs: &PrivateDirs, extra: &[&str]) -> RunningService<RoleClient, ()> {
    mcp_of(BIN, dirs, extra).await
}

/// An MCP frontend of the binary `bin` on `dirs`'s socket.
async fn mcp_of(bin: &str, dirs: &PrivateDirs, extra: &[&str]) -> RunningService<RoleClient, ()> {
    let mut args = vec!["mcp", "--socket", dirs.sock.to_str().unwrap()];
    args.extend_from_slice(extra);
    let mut cmd = dirs.command(&[], Path::new(bin), &args);
    cmd.env_remove("RUST_LOG");
    let (t, _) = TokioChildProcess::builder(tokio::process::Command::from(cmd)).stderr(Stdio::null()).spawn().unwrap();
    ().serve(t).await.unwrap()
}

async fn call(c: &RunningService<RoleClient, ()>, tool: &str, args: Value) -> Value {
    let Value::Object(m) = args else { unreachable!() };
    let r = c.call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(m)).await.unwrap();
    r.structured_content.unwrap()
}

async fn init(c: &RunningService<RoleClient, ()>, ws: &Path) {
    let v = call(c, "Initialize", json!({"any_workspace_path": ws, "thread_id": "bench"})).await;
    assert_eq!(v["status"], "completed", "{v}");
}

async fn run(c: &RunningService<RoleClient, ()>, command: &str) {
    let v = call(c, "BashCommand", json!({"thread_id": "bench", "command": command})).await;
    assert_eq!((v["status"].as_str(), v["exit_code"].as_i64()), (Some("completed"), Some(0)), "{v}");
}

fn shell_command(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let w = PrivateDirs::create("winx-bench-shell-", None).unwrap();
    let mut cmd = w.command(&[], Path::new(BIN), &["guardian", "--socket", w.sock.to_str().unwrap()]);
    cmd.stderr(Stdio::null());
    let mut guardian = GuardianProc::spawn(cmd, Duration::from_secs(30)).unwrap();
    let shell = rt.block_on(async {
        let m = mcp(&w, &[]).await;
        init(&m, &w.ws).await;
        run(&m, "true").await; // the shell starts here, not timed
        m
    });
    let embedded = rt.block_on(async {
        let m = mcp(&w, &["--embedded"]).await;
        init(&m, &w.ws).await;
        m
    });
    // Another build's guardian and frontend in a world of their own.
    let baseline = std::env::var("WINX_BENCH_BASELINE_BIN").ok().map(|bin| {
        let w = PrivateDirs::create("winx-bench-shell-base-", None).unwrap();
        let mut cmd = w.command(&[], Path::new(&bin), &["guardian", "--socket", w.sock.to_str().unwrap()]);
        cmd.stderr(Stdio::null());
        let guardian = GuardianProc::spawn(cmd, Duration::from_secs(30)).unwrap();
        let m = rt.block_on(async {
            let m = mcp_of(&bin, &w, &[]).await;
            init(&m, &w.ws).await;
            run(&m, "true").await;
            m
        });
        (w, guardian, m)
    });
    let mut g = c.benchmark_group("shell_command");
    if !common::smoke() {
        g.sample_size(30).measurement_time(Duration::from_secs(10));
    }
    g.bench_function("true in the thread's idle shell (MCP client)", |b| {
        b.iter(|| rt.block_on(run(&shell, "true")));
    });
    if let Some((_, _, base)) = &baseline {
        g.bench_function("true in the thread's idle shell (MCP client, baseline build)", |b| {
            b.iter(|| rt.block_on(run(base, "true")));
        });
    }
    g.bench_function("one-shot sh -c true execution (MCP client, --embedded)", |b| {
        b.iter(|| rt.block_on(run(&embedded, "sh -c true")));
    });
    g.finish();
    rt.block_on(async {
        let _ = shell.cancel().await;
        let _ = embedded.cancel().await;
    });
    guardian.kill();
    if let Some((_w, mut guardian, base)) = baseline {
        rt.block_on(async {
            let _ = base.cancel().await;
        });
        guardian.kill();
    }
}

criterion_group!(benches, shell_command);
criterion_main!(benches);
