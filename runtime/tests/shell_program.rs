//! The host's own shell: the user's rc with its prompt and prompt command,
//! the host's prompt command chained with the engine's hook, `bash -r`;
//! each counted like the engine's shell (prompts reported, idle when
//! idle, busy while a command runs).

mod common;

use common::eventually;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use winx_release_engine::Admission;
use winx_release_runtime::shell::{Shell, ShellProgram, ShellSpawn, Terminal};
use winx_release_runtime::{LivenessChoice, Runtime, RuntimeOptions, SessionKey};

struct World {
    _tmp: tempfile::TempDir,
    rt: Arc<Runtime>,
    shell: Shell,
    raw: Arc<Mutex<Vec<u8>>>,
    admission: Admission,
}

fn world(program: impl FnOnce(&std::path::Path) -> ShellProgram) -> World {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let opts =
        RuntimeOptions { liveness: LivenessChoice::Proc, move_self: false, subreaper: false, ..Default::default() };
    let rt = Runtime::start(&tmp.path().join("data"), &opts);
    let session = SessionKey::of_path(&ws).unwrap();
    let raw = Arc::new(Mutex::new(Vec::new()));
    let sink = {
        let raw = raw.clone();
        Arc::new(move |b: &[u8]| raw.lock().unwrap().extend_from_slice(b))
    };
    let program = program(tmp.path());
    let admission = Admission::new();
    let spawn = ShellSpawn {
        thread: "t".into(),
        workspace: ws.clone(),
        cwd: ws,
        session,
        env: vec![],
        background: false,
        terminal: Terminal::Open { rows: 24, cols: 80 },
    };
    let shell = rt.start_shell_with(&admission.enter(), spawn, &program, Some(sink)).unwrap();
    assert!(shell.wait_prompt(0, Duration::from_secs(10)), "no first prompt");
    World { _tmp: tmp, rt, shell, raw, admission }
}

fn printed(w: &World) -> String {
    String::from_utf8_lossy(&w.raw.lock().unwrap()).into_owned()
}

/// Runs `line` and waits for the prompt after it.
fn run(w: &World, line: &str) {
    let c = w.shell.type_command(&w.rt, &w.admission.enter(), line).unwrap();
    assert!(w.shell.wait_prompt(c.prompts_before, Duration::from_secs(10)), "no prompt after {line:?}");
}

#[test]
fn the_users_rc_and_the_hosts_prompt_command_are_kept() {
    let w = world(|dir| {
        let rc = dir.join("bashrc");
        std::fs::write(&rc, "PS1='user-prompt> '\nPROMPT_COMMAND='printf \"[rc-marker %s]\" $?'\nexport FROM_RC=yes\n")
            .unwrap();
        ShellProgram::bash().rc(&rc).prompt_command("printf '[host-marker %s]' $?")
    });
    eventually(Duration::from_secs(5), "idle", || w.shell.busy(&w.rt).is_none());
    run(&w, "echo \"rc said $FROM_RC\"; (exit 3)");
    assert_eq!(w.shell.last_exit(), Some(3), "the hook reports the command's status");
    eventually(Duration::from_secs(5), "the output", || printed(&w).contains("[host-marker 3]"));
    let out = printed(&w);
    assert!(out.contains("rc said yes"), "{out}");
    assert!(out.contains("user-prompt> "), "the rc's prompt string is kept: {out}");
    // Both chained prompt commands ran, with `$?` the command's status.
    assert!(out.contains("[rc-marker 3]"), "{out}");
    assert!(out.contains("[host-marker 3]"), "{out}");
    // Counted like the engine's own shell.
    let c = w.shell.type_command(&w.rt, &w.admission.enter(), "sleep 1").unwrap();
    assert!(w.shell.busy(&w.rt).is_some(), "busy while a command runs");
    assert!(w.shell.wait_prompt(c.prompts_before, Duration::from_secs(10)));
    eventually(Duration::from_secs(5), "idle again", || w.shell.busy(&w.rt).is_none());
}

#[test]
fn a_restricted_bash_is_counted_too() {
    let w = world(|_| ShellProgram::bash().restricted());
    eventually(Duration::from_secs(5), "idle", || w.shell.busy(&w.rt).is_none());
    run(&w, "cd /");
    assert_ne!(w.shell.last_exit(), Some(0), "a restricted shell refuses cd");
    eventually(Duration::from_secs(5), "the refusal printed", || printed(&w).contains("restricted"));
    run(&w, "shopt -q restricted_shell && echo is-restricted");
    eventually(Duration::from_secs(5), "the answer printed", || printed(&w).contains("is-restricted"));
    eventually(Duration::from_secs(5), "idle", || w.shell.busy(&w.rt).is_none());
    assert!(w.shell.pid().is_some());
}

#[test]
fn a_hook_replaced_by_the_rc_keeps_the_shell_busy() {
    // An rc that makes PROMPT_COMMAND read-only: the hook cannot be
    // installed, no prompt is ever reported, and the shell never counts
    // as idle.
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let rc = tmp.path().join("bashrc");
    std::fs::write(&rc, "readonly PROMPT_COMMAND='true'\n").unwrap();
    let opts =
        RuntimeOptions { liveness: LivenessChoice::Proc, move_self: false, subreaper: false, ..Default::default() };
    let rt = Runtime::start(&tmp.path().join("data"), &opts);
    let spawn = ShellSpawn {
        thread: "t".into(),
        workspace: ws.clone(),
        cwd: ws.clone(),
        session: SessionKey::of_path(&ws).unwrap(),
        env: vec![],
        background: false,
        terminal: Terminal::Open { rows: 24, cols: 80 },
    };
    let shell = rt.start_shell_with(&Admission::new().enter(), spawn, &ShellProgram::bash().rc(&rc), None).unwrap();
    assert!(!shell.wait_prompt(0, Duration::from_secs(2)), "a prompt was reported without the hook");
    assert!(shell.busy(&rt).is_some());
}

#[test]
fn a_debug_trap_from_the_rc_runs_only_before_commands() {
    // bash-preexec's kind of trap: it runs before each command the shell
    // runs, never on its own at an idle prompt, so it does not hold the
    // shell busy.
    let w = world(|dir| {
        let rc = dir.join("bashrc");
        std::fs::write(&rc, "trap '[[ $BASH_COMMAND != __winx* ]] && echo \"[pre $BASH_COMMAND]\"' DEBUG\n").unwrap();
        ShellProgram::bash().rc(&rc)
    });
    run(&w, "echo ran");
    eventually(Duration::from_secs(5), "the trap's output", || printed(&w).contains("ran"));
    eventually(Duration::from_secs(5), "idle with the trap set", || w.shell.busy(&w.rt).is_none());
}
