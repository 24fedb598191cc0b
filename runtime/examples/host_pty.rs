//! A host that owns its terminal (as winx does: its terminal emulation is
//! its product) runs its shell through the engine: the host opens the PTY
//! pair and keeps the controller (it reads what the shell prints, renders
//! it, and writes what the user types); the engine gets the follower,
//! starts `bash` on it as an execution (session leader, controlling
//! terminal, cgroup, marker, the prompt hook) and tells whether the shell
//! is busy. Every write the host makes goes through `Shell::input` under
//! the session's admission barrier, so that "the prompt was reported after
//! the last byte written" stays exact.
//!
//! Releases are refused while the shell runs a command and allowed once it
//! is back at an idle prompt.
//!
//! Run: `cargo run -p winx-release-engine --example host_pty`. It works in
//! a temporary directory and exits 0 when a helper was protected while
//! `sleep` ran in the shell and released once the shell was idle.

use std::fs::File;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::fs::{Mode, OFlags, CWD};
use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
use winx_release_engine::admission::Admission;
use winx_release_engine::read::{read_pinned, Keep};
use winx_release_engine::{release, Layout, Outcome, Reason, ReleaseOptions, ReleaseRequest, Status, Target};
use winx_release_runtime::shell::{ShellSpawn, Terminal, Write};
use winx_release_runtime::{LivenessChoice, OwnerAnswer, Runtime, RuntimeOptions, SessionKey};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // First: started as an execution's monitor, this program is that.
    winx_release_runtime::monitor::enter();
    let tmp = tempfile::tempdir()?;
    let workspace = tmp.path().canonicalize()?.join("ws");
    std::fs::create_dir(&workspace)?;
    let layout = Layout::new(workspace, tmp.path().canonicalize()?.join("data"))?;
    let opts =
        RuntimeOptions { liveness: LivenessChoice::Proc, move_self: false, subreaper: false, ..Default::default() };
    let rt = Runtime::start(layout.data_dir(), &opts);
    let thread = "thread-1";
    let key = SessionKey::of_dir(layout.create_session_dir(thread)?)?;
    let admission = Admission::new();

    // The host's own PTY code: it keeps the controller.
    let controller = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    grantpt(&controller)?;
    unlockpt(&controller)?;
    let name = ptsname(&controller, Vec::new())?;
    let follower = rustix::fs::openat(CWD, name.as_c_str(), OFlags::RDWR | OFlags::NOCTTY, Mode::empty())?;
    let screen = Arc::new(Mutex::new(Vec::new()));
    {
        // What a host renders; here it is only kept.
        let (mut reader, screen) = (File::from(controller.try_clone()?), screen.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    return;
                }
                screen.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
    }
    let shell = {
        let admitted = admission.enter();
        rt.start_shell(
            &admitted,
            ShellSpawn {
                thread: thread.into(),
                workspace: layout.workspace().into(),
                cwd: layout.workspace().into(),
                session: key,
                env: vec![("WINX_TEMP_DIR".into(), layout.session_dir(thread).into())],
                background: false,
                terminal: Terminal::Follower(follower),
            },
            None,
        )?
    };
    if !shell.wait_prompt(0, Duration::from_secs(10)) {
        return Err("the shell showed no prompt".into());
    }

    let helper = layout.session_dir(thread).join("helper.py");
    std::fs::write(&helper, "print('helper')\n")?;
    // Read and pinned through the session directory's handles, as a
    // frontend's ReadFiles does (never `Pin::of_fd(File::open(..))`, which
    // follows a link and checks no path shape).
    let read = read_pinned(&layout.session_dir(thread), &helper, Keep::Nothing)?;
    let targets = vec![Target::new(&helper, read.pin)];
    let try_release = || {
        let admitted = admission.enter();
        let owner = OwnerAnswer {
            liveness: rt.thread_liveness(&key, thread),
            pending: 0,
            exempt: vec![std::process::id() as i32],
            session: Some(key),
        };
        release(
            &ReleaseRequest { layout: &layout, thread_id: thread, targets: &targets },
            &admitted,
            &owner,
            &ReleaseOptions::default(),
        )
    };

    // The user types a command; the host writes it, through the engine.
    let command = {
        let admitted = admission.enter();
        if !shell.at_prompt() {
            return Err("the shell is not at its prompt".into());
        }
        let c = shell.record_command(&rt, "sleep 1; echo slept")?;
        let line = c.typed_line();
        shell.input(&admitted, Write::Line, || {
            rustix::io::write(&controller, line.as_bytes()).map(drop).map_err(Into::into)
        })?;
        c
    };
    let report = try_release();
    println!("while the command runs: {report}");
    if report.error_code != Some(Reason::ExecutionActive) || !helper.exists() {
        return Err(format!("a busy shell did not protect the helper: {report}").into());
    }
    if !shell.wait_prompt(command.prompts_before, Duration::from_secs(20)) {
        return Err("the command never came back to the prompt".into());
    }
    // Its record: resolved, with the exit code the hook reported.
    command.finish(&rt, shell.last_exit())?;
    // The shell is back at its prompt; its own process does not count.
    let deadline = Instant::now() + Duration::from_secs(10);
    let report = loop {
        let r = try_release();
        if r.status == Status::Completed || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    println!("at an idle prompt: {report}");
    if report.status != Status::Completed || report.files[0].outcome != Outcome::Released || helper.exists() {
        return Err(format!("an idle shell blocked the release: {report}").into());
    }
    let printed = String::from_utf8_lossy(&screen.lock().unwrap()).into_owned();
    if !printed.contains("slept") {
        return Err(format!("the host's terminal did not show the output: {printed:?}").into());
    }
    println!("exit code of the command: {:?}", shell.last_exit());
    Ok(())
}
