//! Shells as executions: a real `bash` on a PTY the engine opens, its
//! prompt hook, and the idle rule that lets its own process not count.

mod common;

use common::eventually;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use winx_release_runtime::shell::{OutputFilter, Piece, Shell, ShellSpawn, Terminal, Write};
use winx_release_runtime::{LivenessChoice, Runtime, RuntimeOptions, SessionKey};

struct World {
    _tmp: tempfile::TempDir,
    rt: Arc<Runtime>,
    session: SessionKey,
    shell: Shell,
    text: Arc<Mutex<Vec<u8>>>,
    /// Everything the terminal printed since the shell started, as pieces.
    pieces: Arc<Mutex<Vec<Piece>>>,
    admission: winx_release_engine::Admission,
}

fn world() -> World {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let opts =
        RuntimeOptions { liveness: LivenessChoice::Proc, move_self: false, subreaper: false, ..Default::default() };
    let rt = Runtime::start(&tmp.path().join("data"), &opts);
    let session = SessionKey::of_path(&ws).unwrap();
    let text = Arc::new(Mutex::new(Vec::new()));
    let pieces = Arc::new(Mutex::new(Vec::new()));
    let filter = Arc::new(Mutex::new(OutputFilter::default()));
    let sink = {
        let (text, pieces) = (text.clone(), pieces.clone());
        Arc::new(move |b: &[u8]| {
            for p in filter.lock().unwrap().feed(b) {
                if let Piece::Text(t) = &p {
                    text.lock().unwrap().extend(t);
                }
                pieces.lock().unwrap().push(p);
            }
        })
    };
    let shell = rt
        .start_shell(
            &winx_release_engine::Admission::new().enter(),
            ShellSpawn {
                thread: "t".into(),
                workspace: ws.clone(),
                cwd: ws,
                session,
                env: vec![],
                background: false,
                terminal: Terminal::Open { rows: 24, cols: 80 },
            },
            Some(sink),
        )
        .unwrap();
    assert!(shell.wait_prompt(0, Duration::from_secs(10)), "no first prompt");
    World { _tmp: tmp, rt, session, shell, text, pieces, admission: winx_release_engine::Admission::new() }
}

/// An idle shell does not count; a running command does; a job left
/// behind does until it ends.
#[test]
fn idle_busy_and_a_job_left_behind() {
    let w = world();
    eventually(Duration::from_secs(5), "idle", || w.shell.busy(&w.rt).is_none());
    assert_eq!(w.rt.liveness(&w.session).running, 0, "{:?}", w.rt.liveness(&w.session));
    let c = w.shell.type_command(&w.rt, &w.admission.enter(), "sleep 1.5").unwrap();
    let busy = w.shell.busy(&w.rt).expect("busy while sleep runs");
    assert!(busy.contains("not back at its prompt"), "{busy}");
    assert!(w.rt.liveness(&w.session).running > 0);
    assert!(w.shell.wait_prompt(c.prompts_before, Duration::from_secs(10)));
    eventually(Duration::from_secs(5), "idle after the command", || w.shell.busy(&w.rt).is_none());
    let c = w.shell.type_command(&w.rt, &w.admission.enter(), "sleep 3 & echo started").unwrap();
    assert!(w.shell.wait_prompt(c.prompts_before, Duration::from_secs(10)));
    assert_eq!(w.shell.last_exit(), Some(0));
    let busy = w.shell.busy(&w.rt).expect("a job runs");
    assert!(busy.contains("left process"), "{busy}");
    assert!(!w.rt.shell_jobs(&w.shell).unwrap().is_empty());
    eventually(Duration::from_secs(10), "the job to end", || w.shell.busy(&w.rt).is_none());
    assert!(String::from_utf8_lossy(&w.text.lock().unwrap()).contains("started"));
}

/// A release's liveness answer asks the union of every idle shell of the
/// session on the same two `/proc` snapshots: its cost does not grow with
/// the shells (each snapshot reads every process), and the answer is the
/// same.
#[test]
fn one_answer_takes_two_snapshots_whatever_the_shells() {
    let w = world();
    let more: Vec<Shell> = (0..3)
        .map(|i| {
            let ws = w._tmp.path().join("ws");
            let spawn = ShellSpawn {
                thread: format!("bg{i}"),
                workspace: ws.clone(),
                cwd: ws,
                session: w.session,
                env: vec![],
                background: true,
                terminal: Terminal::Open { rows: 24, cols: 80 },
            };
            let s = w.rt.start_shell(&w.admission.enter(), spawn, None).unwrap();
            assert!(s.wait_prompt(0, Duration::from_secs(10)), "no first prompt");
            s
        })
        .collect();
    eventually(Duration::from_secs(5), "idle", || {
        w.shell.busy(&w.rt).is_none() && more.iter().all(|s| s.busy(&w.rt).is_none())
    });
    let before = winx_release_runtime::snapshots_taken_here();
    let l = w.rt.liveness(&w.session);
    let taken = winx_release_runtime::snapshots_taken_here() - before;
    assert_eq!(l.running, 0, "{l:?}");
    assert_eq!(taken, 2, "four idle shells took {taken} snapshots");
    // A job left in one of them is still found on the shared snapshots.
    let c = more[1].type_command(&w.rt, &w.admission.enter(), "sleep 4 & echo started").unwrap();
    assert!(more[1].wait_prompt(c.prompts_before, Duration::from_secs(10)));
    let l = w.rt.liveness(&w.session);
    assert!(l.running > 0 && l.detail.as_deref().unwrap_or("").contains("left process"), "{l:?}");
}

/// A liveness answer for a session with a shell reads the processes
/// started since the shell's monitor and passes over the older ones an
/// earlier answer read, so what it reads does not grow with them; and it
/// never passes over what started since, however often it is asked: a job
/// the shell left, or a process outside it that wears its marker, counts
/// in every answer.
#[test]
fn an_answer_passes_over_older_processes_and_never_what_started_since() {
    let mut older: Vec<std::process::Child> = (0..40)
        .map(|_| std::process::Command::new("sleep").arg("60").stdin(std::process::Stdio::null()).spawn().unwrap())
        .collect();
    // The shell starts in a later clock tick than the sleepers.
    std::thread::sleep(Duration::from_millis(30));
    let w = world();
    eventually(Duration::from_secs(5), "idle", || w.shell.busy(&w.rt).is_none());
    // The first answers read the older processes and remember them.
    for _ in 0..2 {
        assert_eq!(w.rt.liveness(&w.session).running, 0);
    }
    let before = winx_release_runtime::older_passed_here();
    let l = w.rt.liveness(&w.session);
    let passed = winx_release_runtime::older_passed_here() - before;
    assert_eq!(l.running, 0, "{l:?}");
    assert!(passed >= 2 * older.len() as u64, "the answer's two snapshots passed over {passed} older processes");

    // A job of the shell, started since: counted by every answer.
    let c = w.shell.type_command(&w.rt, &w.admission.enter(), "sleep 60 & echo started").unwrap();
    assert!(w.shell.wait_prompt(c.prompts_before, Duration::from_secs(10)));
    for i in 0..4 {
        let l = w.rt.liveness(&w.session);
        assert!(l.running > 0 && l.detail.as_deref().unwrap_or("").contains("left process"), "answer {i}: {l:?}");
    }
    let c = w.shell.type_command(&w.rt, &w.admission.enter(), "kill %1; wait").unwrap();
    assert!(w.shell.wait_prompt(c.prompts_before, Duration::from_secs(10)));
    eventually(Duration::from_secs(10), "the job's end", || w.rt.liveness(&w.session).running == 0);

    // A process outside the shell, started since, that answers read
    // before it took the shell's marker (by `execve`, keeping its pid and
    // start time): it counts from then on. A bound above its start time
    // would pass it over.
    let script = format!("read x; exec env WINX_EXECUTION_ID={} sleep 60", w.shell.execution().id);
    let mut marked =
        std::process::Command::new("sh").args(["-c", &script]).stdin(std::process::Stdio::piped()).spawn().unwrap();
    let pid = marked.id();
    for _ in 0..2 {
        assert_eq!(w.rt.liveness(&w.session).running, 0, "the unmarked process counted");
    }
    use std::io::Write as _;
    marked.stdin.take().unwrap().write_all(b"go\n").unwrap();
    eventually(Duration::from_secs(5), "the marker", || {
        std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|e| e.windows(17).any(|w| w == b"WINX_EXECUTION_ID"))
    });
    for i in 0..4 {
        let l = w.rt.liveness(&w.session);
        let found = l.detail.as_deref().unwrap_or("").contains(&pid.to_string());
        assert!(l.running > 0 && found, "answer {i} missed the marked process {pid}: {l:?}");
    }
    marked.kill().unwrap();
    marked.wait().unwrap();
    for c in &mut older {
        c.kill().unwrap();
        c.wait().unwrap();
    }
}

/// A command that never returns to the prompt (`exec`) keeps the shell
/// busy; a spoofed hook report from a loop in the shell itself does not make
/// it idle.
#[test]
fn a_spoofed_report_or_a_lost_hook_stays_busy() {
    let w = world();
    let c = w
        .shell
        .type_command(&w.rt, &w.admission.enter(), "printf 'P 0\\n' >&3; read -r -u 3 x; while :; do :; done")
        .unwrap();
    assert!(w.shell.wait_prompt(c.prompts_before, Duration::from_secs(10)), "the spoof reported");
    let busy = w.shell.busy(&w.rt).expect("a loop in the shell is busy");
    assert!(busy.contains("not waiting") || busy.contains("state"), "{busy}");
    w.shell.write(&w.admission.enter(), Write::Line, b"\x03").unwrap();
    // Back at a real prompt after Ctrl-c.
    eventually(Duration::from_secs(10), "idle after Ctrl-c", || w.shell.busy(&w.rt).is_none());
    let c = w.shell.type_command(&w.rt, &w.admission.enter(), "unset PROMPT_COMMAND").unwrap();
    assert!(!w.shell.wait_prompt(c.prompts_before, Duration::from_secs(1)));
    assert!(w.shell.busy(&w.rt).is_some(), "a shell whose hook stopped reporting is busy");
}

/// A spoofed report followed by the `read` builtin (the shell itself
/// waiting in `read(0, …)` for a line) stays busy, as does a spoof in a
/// shell whose line editing was turned off; at the real prompt after it,
/// with editing turned back on by the hook, the shell is idle.
#[test]
fn a_spoofed_report_then_the_read_builtin_stays_busy() {
    let w = world();
    let c = w
        .shell
        .type_command(
            &w.rt,
            &w.admission.enter(),
            "set +o emacs +o vi; printf 'P 0\\n' >&3; read -r -u 3 x; read -r answer",
        )
        .unwrap();
    assert!(w.shell.wait_prompt(c.prompts_before, Duration::from_secs(10)), "the spoof reported");
    // What must not happen: the shell seen idle once its spoof was
    // answered and it waits in the `read` builtin; it is given time to.
    std::thread::sleep(Duration::from_millis(300));
    let busy = w.shell.busy(&w.rt).expect("a shell in the read builtin is busy");
    assert!(busy.contains("not waiting for terminal input"), "{busy}");
    assert!(w.rt.liveness(&w.session).running > 0);
    // The line the `read` waits for; then the real prompt.
    w.shell.write(&w.admission.enter(), Write::Line, b"yes\r").unwrap();
    eventually(Duration::from_secs(10), "idle at the real prompt", || w.shell.busy(&w.rt).is_none());
}

/// Input the program in the foreground does not read (64 KiB of lines,
/// far beyond what the terminal queues) never blocks the shell's lock: the
/// write gives up after its wait, the program's end is reported and
/// acknowledged, and the unread input is discarded, never run. (The write
/// had blocked for ever while holding the lock the hook's report needs,
/// and the shell waited for that report's acknowledgement before reading.)
#[test]
fn input_nobody_reads_never_deadlocks_the_shell() {
    let w = world();
    let (gate, started) = (w._tmp.path().join("gate"), w._tmp.path().join("started"));
    let cmd = format!("touch '{}'; while [ ! -e '{}' ]; do sleep 0.01; done", started.display(), gate.display());
    let c = w.shell.type_command(&w.rt, &w.admission.enter(), &cmd).unwrap();
    eventually(Duration::from_secs(10), "the program to run in the foreground", || started.exists());
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let shell = w.shell.clone();
        std::thread::spawn(move || {
            let barrier = winx_release_engine::Admission::new();
            let r = shell.write(&barrier.enter(), Write::Input, "echo ran-x\n".repeat(6000).as_bytes());
            let _ = tx.send(r.map_err(|e| e.kind()));
        });
    }
    // What must not happen: the write returning while the program runs,
    // before its wait (checked below by its `TimedOut`); it is given
    // time to fill the terminal and wait.
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(&gate, b"").unwrap();
    let sent = rx.recv_timeout(Duration::from_secs(20)).expect("the write never returned: the shell is deadlocked");
    assert_eq!(sent, Err(std::io::ErrorKind::TimedOut));
    assert!(w.shell.wait_prompt(c.prompts_before, Duration::from_secs(10)), "no prompt after the program ended");
    let c = w.shell.type_command(&w.rt, &w.admission.enter(), "echo after").unwrap();
    assert!(w.shell.wait_prompt(c.prompts_before, Duration::from_secs(10)));
    eventually(Duration::from_secs(5), "the next command's output", || {
        String::from_utf8_lossy(&w.text.lock().unwrap()).contains("after\n")
    });
    let text = String::from_utf8_lossy(&w.text.lock().unwrap()).into_owned();
    // Echoed while queued (`echo ran-x`), but never run (a line `ran-x`).
    assert!(!text.lines().any(|l| l.trim_end() == "ran-x"), "unread input ran as a command");
}

/// Input once the program has ended is refused under the shell's lock:
/// the line editor would run it as a command.
#[test]
fn input_after_the_program_ended_is_refused_not_run() {
    let w = world();
    let marker = w._tmp.path().join("typed-late");
    let c = w.shell.type_command(&w.rt, &w.admission.enter(), "true").unwrap();
    assert!(w.shell.wait_prompt(c.prompts_before, Duration::from_secs(10)));
    let r = w.shell.write(&w.admission.enter(), Write::Input, format!("touch {}\r", marker.display()).as_bytes());
    assert_eq!(r.map_err(|e| e.kind()), Err(std::io::ErrorKind::InvalidInput));
    // What must not happen: the refused line run; it is given time to.
    std::thread::sleep(Duration::from_millis(300));
    assert!(!marker.exists(), "input at the prompt ran as a command");
}

/// A command is handed over whole, far beyond the 4 KiB line limit, and
/// runs in the shell (state persists).
#[test]
fn a_long_command_and_state_persist() {
    let w = world();
    let long = format!("X={}; cd /; export Y=${{#X}}", "a".repeat(20_000));
    let c = w.shell.type_command(&w.rt, &w.admission.enter(), &long).unwrap();
    assert!(w.shell.wait_prompt(c.prompts_before, Duration::from_secs(10)));
    let c = w.shell.type_command(&w.rt, &w.admission.enter(), "echo \"$Y $PWD\"").unwrap();
    assert!(w.shell.wait_prompt(c.prompts_before, Duration::from_secs(10)));
    eventually(Duration::from_secs(5), "the output", || {
        String::from_utf8_lossy(&w.text.lock().unwrap()).contains("20000 /\n")
    });
}

/// Input a program left unread when it ended never runs as a command: the
/// engine discards it before it acknowledges the prompt.
#[test]
fn input_an_ended_program_left_unread_is_not_run() {
    let w = world();
    let marker = w._tmp.path().join("typed-ahead");
    let c = w.shell.type_command(&w.rt, &w.admission.enter(), "sleep 0.5").unwrap();
    w.shell.write(&w.admission.enter(), Write::Input, format!("touch {}\r", marker.display()).as_bytes()).unwrap();
    assert!(w.shell.wait_prompt(c.prompts_before, Duration::from_secs(10)));
    let c = w.shell.type_command(&w.rt, &w.admission.enter(), "echo after").unwrap();
    assert!(w.shell.wait_prompt(c.prompts_before, Duration::from_secs(10)));
    eventually(Duration::from_secs(5), "the next command's output", || {
        String::from_utf8_lossy(&w.text.lock().unwrap()).contains("after\n")
    });
    assert!(!marker.exists(), "input sent to `sleep` ran as a command after it ended");
}

/// The end marker names its prompt: a reader that lags behind the terminal
/// (here the latest one can be: it decides only after the command ran and
/// reported its prompt) does not take the first prompt's marker for the
/// end of the command typed after it, and keeps the command's output.
/// (The guardian read the first prompt's marker late once under load, which
/// ended the command there and dropped its output.)
#[test]
fn a_late_reader_splits_output_at_the_right_prompt() {
    let w = world();
    let c = w.shell.type_command(&w.rt, &w.admission.enter(), "echo started").unwrap();
    assert!(w.shell.wait_prompt(c.prompts_before, Duration::from_secs(10)));
    let reported = w.shell.prompts();
    assert_eq!(reported, c.prompts_before + 1);
    eventually(Duration::from_secs(5), "the command's end marker", || {
        w.pieces.lock().unwrap().iter().any(|p| matches!(p, Piece::End(n) if *n == reported))
    });
    let (mut out, mut started, mut ended) = (Vec::new(), false, false);
    for p in w.pieces.lock().unwrap().iter() {
        match p {
            Piece::Start => started = true,
            Piece::Text(t) if started => out.extend_from_slice(t),
            Piece::End(n) if c.ended_by(*n, reported) => {
                ended = true;
                break;
            }
            _ => {}
        }
    }
    assert!(ended, "no marker ended the command");
    assert_eq!(String::from_utf8_lossy(&out), "started\n");
    // A marker the command printed itself, before its prompt was reported,
    // ends nothing.
    assert!(!c.ended_by(reported + 1, reported));
}
