//! `true` typed into a thread's idle shell, answered `completed` at the MCP
//! client, beside a one-shot execution of `sh -c true` (an `--embedded`
//! frontend's `BashCommand`: `bash -c` as an execution of the engine's
//! runtime, output to a file, ended by its leader's exit), in one group.
//!
//! Both are measured at the MCP client (rmcp over the frontend's stdio):
//! `tools/call`, the frontend, for the shell the guardian's `shell` op, the
//! line typed, the hook's prompt, the output's end marker, and the reply.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_winx-release");

struct World {
    _tmp: tempfile::TempDir,
    ws: std::path::PathBuf,
    data_home: std::path::PathBuf,
    home: std::path::PathBuf,
    sock: std::path::PathBuf,
}

impl World {
    fn new() -> World {
        let tmp = tempfile::Builder::new().prefix("winx-bench-shell-").tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let (ws, data_home, home) = (root.join("ws"), root.join("data"), root.join("home"));
        for d in [&ws, &data_home, &home] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
            .create(root.join("run"))
            .unwrap();
        World { sock: root.join("run/g.sock"), _tmp: tmp, ws, data_home, home }
    }

    fn env(&self, c: &mut tokio::process::Command) {
        c.env("XDG_DATA_HOME", &self.data_home).env("HOME", &self.home).env_remove("WINX_GUARDIAN_SOCKET");
        c.env_remove("XDG_RUNTIME_DIR").env_remove("RUST_LOG");
    }

    async fn mcp(&self, extra: &[&str]) -> RunningService<RoleClient, ()> {
        let mut cmd = tokio::process::Command::new(BIN);
        cmd.arg("mcp").arg("--socket").arg(&self.sock).args(extra);
        self.env(&mut cmd);
        let (t, _) = TokioChildProcess::builder(cmd).stderr(Stdio::null()).spawn().unwrap();
        ().serve(t).await.unwrap()
    }
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
    let w = World::new();
    let mut guardian = std::process::Command::new(BIN)
        .args(["guardian", "--socket"])
        .arg(&w.sock)
        .env("XDG_DATA_HOME", &w.data_home)
        .env("HOME", &w.home)
        .env_remove("WINX_GUARDIAN_SOCKET")
        .env_remove("XDG_RUNTIME_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(guardian.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert!(line.contains("\"ready\""), "{line}");
    }
    let shell = rt.block_on(async {
        let m = w.mcp(&[]).await;
        init(&m, &w.ws).await;
        run(&m, "true").await; // the shell starts here, not timed
        m
    });
    let embedded = rt.block_on(async {
        let m = w.mcp(&["--embedded"]).await;
        init(&m, &w.ws).await;
        m
    });
    let mut g = c.benchmark_group("shell_command");
    if !common::smoke() {
        g.sample_size(30).measurement_time(Duration::from_secs(10));
    }
    g.bench_function("true in the thread's idle shell (MCP client)", |b| {
        b.iter(|| rt.block_on(run(&shell, "true")));
    });
    g.bench_function("one-shot sh -c true execution (MCP client, --embedded)", |b| {
        b.iter(|| rt.block_on(run(&embedded, "sh -c true")));
    });
    g.finish();
    rt.block_on(async {
        let _ = shell.cancel().await;
        let _ = embedded.cancel().await;
    });
    let _ = guardian.kill();
    let _ = guardian.wait();
}

criterion_group!(benches, shell_command);
criterion_main!(benches);
