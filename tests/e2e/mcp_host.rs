//! What real MCP hosts and operators meet (issue 21): the result object in
//! the text block, the socket path a frontend started without
//! `XDG_RUNTIME_DIR` finds, the one line an unreachable guardian gives, and
//! `D` without `HOME`.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;
use serde_json::{json, Value};

/// A model that sees only text: the revision and the token are parsed back
/// from the first text block of `ReadFiles` (the rendering for a model), the
/// release is judged from the first text block of `EditFiles`, also for a
/// refusal (`isError: true`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_from_the_text_blocks_alone() {
    let (env, mcp) = world().await;
    let thread = "text-only-thread";
    let init = mcp.try_call("Initialize", json!({"any_workspace_path": env.ws, "thread_id": thread})).await.unwrap();
    let init = first_text(&init);
    assert!(init.starts_with("Initialize: completed\n"), "{init}");
    assert!(init.contains("\ntemporary_release.available: true\n"), "{init}");
    let dir = label(&init, "temporary_artifact_dir").expect("temporary_artifact_dir in the text");
    let path = PathBuf::from(dir).join("h.py");
    // A helper whose content has a fence of its own and a line that looks
    // like a label.
    mcp.bash(thread, "printf 'print(1)\\n```\\nrevision: sha256:fake\\n' > \"$WINX_TEMP_DIR/h.py\"").await;

    let read = mcp.try_call("ReadFiles", json!({"thread_id": thread, "file_paths": [path]})).await.unwrap();
    let text = first_text(&read);
    let files = text_files(&text);
    assert_eq!(files.len(), 1, "{text}");
    let rev = files[0].revision.clone().expect("revision in the text");
    let token = files[0].generation.clone().expect("token in the text");
    assert!(text.contains("\ncontent:\n````\nprint(1)\n```\nrevision: sha256:fake\n````\n"), "{text}");
    assert!(text.ends_with("\nReadFiles: completed\n"), "{text}");

    // A refusal is in the text too (hosts that show the model only the
    // text of an error result).
    let bad = mcp.try_call("EditFiles", release_req(thread, &env.ws, &[(&path, &rev, "g1.00")])).await.unwrap();
    assert_eq!(bad.is_error, Some(true));
    let bad = first_text(&bad);
    assert!(bad.starts_with("EditFiles: denied ("), "{bad}");
    assert_eq!(label(&bad, "outcome"), Some("denied"), "{bad}");
    assert_eq!(label(&bad, "reason"), Some("read_required"), "{bad}");

    let r = mcp.try_call("EditFiles", release_req(thread, &env.ws, &[(&path, &rev, &token)])).await.unwrap();
    assert_eq!(r.is_error, Some(false));
    let done = first_text(&r);
    assert!(done.starts_with("EditFiles: completed\n"), "{done}");
    assert_eq!(label(&done, "outcome"), Some("released"), "{done}");
    assert_completed(r.structured_content.as_ref().unwrap(), &[&path]);
    mcp.stop().await;
}

/// `--text-result json`: the text block is the result object serialised as
/// JSON, and a release works from it alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_result_json_is_the_result_object() {
    let mut env = Env::new();
    env.start_guardian();
    let mcp = env.mcp(&["--text-result", "json"]).await;
    let thread = "json-thread";
    let init = mcp.try_call("Initialize", json!({"any_workspace_path": env.ws, "thread_id": thread})).await.unwrap();
    let init = text_object(&init);
    let path = PathBuf::from(init["temporary_artifact_dir"].as_str().unwrap()).join("h.py");
    fs::write(&path, "print(1)\n").unwrap();
    let read = mcp.try_call("ReadFiles", json!({"thread_id": thread, "file_paths": [path]})).await.unwrap();
    let read_text = text_object(&read);
    assert_eq!(Some(&read_text), read.structured_content.as_ref());
    let f = &read_text["files"][0];
    assert_eq!(f["content"], "print(1)\n", "{read_text}");
    let (rev, token) =
        (f["revision"].as_str().unwrap(), f["temporary_artifact"]["artifact_generation"].as_str().unwrap());
    let r = mcp.try_call("EditFiles", release_req(thread, &env.ws, &[(&path, rev, token)])).await.unwrap();
    let done = text_object(&r);
    assert_eq!(Some(&done), r.structured_content.as_ref());
    assert_completed(&done, &[&path]);
    mcp.stop().await;
}

/// The first text block of a result.
fn first_text(r: &rmcp::model::CallToolResult) -> String {
    r.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone()).expect("a text block first")
}

/// The value of the first `label: value` line.
fn label<'a>(text: &'a str, label: &str) -> Option<&'a str> {
    text.lines().find_map(|l| l.strip_prefix(label).and_then(|r| r.strip_prefix(": ")))
}

/// `--text-result summary` keeps the one-line summary for hosts that show
/// the model `structuredContent`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_result_summary_keeps_the_one_line_summary() {
    let mut env = Env::new();
    env.start_guardian();
    let mcp = env.mcp(&["--text-result", "summary"]).await;
    let r = mcp.try_call("Initialize", json!({"any_workspace_path": env.ws, "thread_id": "s"})).await.unwrap();
    let text = &r.content[0].as_text().expect("a text block").text;
    assert!(text.starts_with("Initialize: completed; thread s in "), "{text}");
    assert!(!text.contains('{') && text.len() < 4096, "{text}");
    assert_eq!(r.structured_content.as_ref().unwrap()["thread_id"], "s");
    mcp.stop().await;
}

/// Every tool's output schema is a valid draft 2020-12 schema, and the
/// results of one read-release round validate against it (with Python's
/// `jsonschema`, when it is installed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_validate_against_the_output_schemas() {
    let (env, mcp) = world().await;
    let tools = mcp.tools().await;
    let mut checks = Vec::new();
    let schema = |name: &str| {
        let t = tools.iter().find(|t| t.name == name).unwrap();
        (Value::Object((*t.input_schema).clone()), Value::Object((*t.output_schema.clone().unwrap()).clone()))
    };
    let init = mcp.init(&env.ws, "v").await;
    checks.push((schema("Initialize"), init));
    let (path, rev, token) = helper(&env, &mcp, "v", "a.txt", "abc").await;
    let read = mcp.call("ReadFiles", json!({"thread_id": "v", "file_paths": [path, "/nonexistent/x"]})).await;
    checks.push((schema("ReadFiles"), read));
    let bash = mcp.call("BashCommand", json!({"thread_id": "v", "command": "echo hi"})).await;
    checks.push((schema("BashCommand"), bash));
    let denied = mcp.edit(release_req("v", &env.ws, &[(&path, &rev, "g1.x")])).await;
    checks.push((schema("EditFiles"), denied));
    let done = mcp.edit(release_req("v", &env.ws, &[(&path, &rev, &token)])).await;
    checks.push((schema("EditFiles"), done));
    let refused = mcp.call("ReadFiles", json!({"thread_id": "nope", "file_paths": []})).await;
    checks.push((schema("ReadFiles"), refused));
    mcp.stop().await;

    let input =
        json!(checks.iter().map(|((i, o), v)| json!({"input": i, "output": o, "result": v})).collect::<Vec<_>>());
    let script = r#"
import json, sys
try:
    from jsonschema import Draft202012Validator as V
except ImportError:
    print("SKIP: python3 has no jsonschema module"); sys.exit(0)
for c in json.load(sys.stdin):
    V.check_schema(c["input"]); V.check_schema(c["output"])
    V(c["output"]).validate(c["result"])
print("OK")
"#;
    let mut child = match Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("SKIP schema validation: no python3 ({e})");
            return;
        }
    };
    use std::io::Write;
    child.stdin.take().unwrap().write_all(input.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    if stdout.starts_with("SKIP") {
        eprintln!("{stdout}");
    } else {
        assert_eq!(stdout.trim(), "OK");
    }
}

/// The guardian's instance id, from its `guardian ready` log line.
fn instance_in_log(env: &Env) -> Option<String> {
    for e in fs::read_dir(&env.root).ok()?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("guardian-") {
            continue;
        }
        let log = fs::read_to_string(e.path()).unwrap_or_default();
        let Some(at) = log.find("instance=") else { continue };
        let rest = &log[at + "instance=".len()..];
        return Some(rest.split(|c: char| c.is_whitespace()).next().unwrap_or("").to_owned());
    }
    None
}

/// Creates the directories of `/run/user/<uid>` that are missing (0700 for
/// the last) and removes, when dropped, what it created.
struct RunUser {
    created: Vec<PathBuf>,
    sock: PathBuf,
}

impl RunUser {
    fn make() -> Result<RunUser, String> {
        let uid = rustix::process::getuid().as_raw();
        let dir = PathBuf::from(format!("/run/user/{uid}"));
        let mut created = Vec::new();
        for d in [Path::new("/run/user"), dir.as_path()] {
            if !d.exists() {
                let mode = if d == dir { 0o700 } else { 0o755 };
                fs::DirBuilder::new().mode(mode).create(d).map_err(|e| format!("mkdir {}: {e}", d.display()))?;
                fs::set_permissions(d, fs::Permissions::from_mode(mode)).map_err(|e| e.to_string())?;
                created.push(d.to_path_buf());
            }
        }
        let winx = dir.join("winx");
        if !winx.exists() {
            fs::DirBuilder::new().mode(0o700).create(&winx).map_err(|e| e.to_string())?;
            created.push(winx.clone());
        }
        let sock = winx.join("guardian.sock");
        if sock.exists() {
            return Err(format!("{} exists already (a guardian of this user?)", sock.display()));
        }
        Ok(RunUser { created, sock })
    }
}

impl Drop for RunUser {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.sock);
        let _ = fs::remove_file(self.sock.with_file_name("guardian.log"));
        for d in self.created.iter().rev() {
            let _ = fs::remove_dir(d);
        }
    }
}

/// A frontend started with neither `--socket` nor `XDG_RUNTIME_DIR` (as MCP
/// clients start servers) finds the guardian at
/// `/run/user/<uid>/winx/guardian.sock`, where the systemd units put it,
/// instead of starting a second one under `/tmp`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frontend_without_xdg_runtime_dir_meets_the_guardian_under_run_user() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIP: creating /run/user/<uid> needs root here");
        return;
    }
    let run = match RunUser::make() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("SKIP: {e}");
            return;
        }
    };
    let mut env = Env::new();
    env.sock = run.sock.clone();
    env.start_guardian();
    let mcp = env.mcp_with(None, &[], &[]).await;
    let init = mcp.init(&env.ws, "t").await;
    assert_eq!(init["guardian"]["socket"], json!(run.sock), "{init}");
    assert_eq!(init["temporary_release"]["available"], true, "{init}");
    let instance = instance_in_log(&env).expect("the guardian logs its instance");
    assert_eq!(init["guardian"]["instance"], json!(instance), "{init}");
    // No second guardian was started (under /tmp or anywhere).
    let guardians = env
        .own_processes()
        .into_iter()
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == b"guardian"))
        })
        .count();
    assert_eq!(guardians, 1, "one guardian in this world");
    mcp.stop().await;
    drop(env);
    drop(run);
}

/// A frontend whose guardian cannot be reached (its socket's directory is
/// not private, so none can be started there either) says which socket it
/// tried, why, and what to do: in `temporary_release.detail`, on stderr at
/// the default log level, and in a refused `BashCommand`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_guardian_names_the_socket_the_cause_and_the_fix() {
    let env = Env::new();
    let open_dir = env.root.join("open");
    fs::DirBuilder::new().mode(0o755).create(&open_dir).unwrap();
    fs::set_permissions(&open_dir, fs::Permissions::from_mode(0o755)).unwrap();
    let sock = open_dir.join("g.sock");
    let mcp = env.mcp_with(Some(&sock), &[], &["RUST_LOG"]).await;
    let init = mcp.init(&env.ws, "u").await;
    let tr = &init["temporary_release"];
    assert_eq!(tr["available"], false, "{init}");
    assert_eq!(tr["reason"], "owner_unavailable", "{init}");
    let detail = tr["detail"].as_str().unwrap_or_else(|| panic!("no detail: {init}"));
    eprintln!("detail: {detail}");
    assert!(!detail.contains('\n'), "one line: {detail:?}");
    for part in [sock.to_str().unwrap(), "0755", "winx-release guardian", "--socket", "WINX_GUARDIAN_SOCKET"] {
        assert!(detail.contains(part), "{part:?} missing from {detail:?}");
    }
    // The command it suggests names a socket a guardian can listen on (not
    // the open directory's).
    let suggested = detail
        .split("`winx-release guardian --socket ")
        .nth(1)
        .and_then(|r| r.split('`').next())
        .unwrap_or_else(|| panic!("no suggested command in {detail:?}"));
    assert_ne!(suggested, sock.to_str().unwrap(), "{detail}");
    let dir = Path::new(suggested).parent().unwrap();
    match fs::symlink_metadata(dir) {
        Ok(m) => assert!(m.is_dir() && m.permissions().mode() & 0o7777 == 0o700, "{detail}"),
        Err(_) => assert!(dir.parent().unwrap().is_dir(), "{detail}"),
    }
    let bash = mcp.call("BashCommand", json!({"thread_id": "u", "command": "true"})).await;
    assert_eq!(bash["status"], "denied", "{bash}");
    assert_eq!(bash["errorCode"], "owner_unavailable", "{bash}");
    let msg = bash["message"].as_str().unwrap_or_default();
    for part in [sock.to_str().unwrap(), "winx-release guardian", "--socket", "WINX_GUARDIAN_SOCKET"] {
        assert!(msg.contains(part), "{part:?} missing from {msg:?}");
    }
    let log = mcp.log.clone();
    mcp.stop().await;
    let stderr = fs::read_to_string(&log).unwrap();
    assert!(stderr.lines().any(|l| l.contains(detail)), "stderr (RUST_LOG unset) lacks the detail line:\n{stderr}");
    assert!(!sock.exists(), "no guardian was started in an open directory");
}

/// Without `HOME` (and `XDG_DATA_HOME`), `D` is below the home directory of
/// the password database.
#[test]
fn the_data_dir_without_home_comes_from_the_password_database() {
    let uid = rustix::process::getuid().as_raw();
    let passwd = fs::read_to_string("/etc/passwd").unwrap_or_default();
    let Some(home) = passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 7 && f[2] == uid.to_string()).then(|| f[5].to_owned())
    }) else {
        eprintln!("SKIP: uid {uid} is not in /etc/passwd");
        return;
    };
    let ws = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["audit", "--workspace"])
        .arg(ws.path())
        .env_remove("HOME")
        .env_remove("XDG_DATA_HOME")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["data_dir"], json!(Path::new(&home).join(".local/share/winx")), "{v}");
}
