//! The shells this guardian owns: one persistent shell per thread, and one
//! per background command, each an execution of the engine on a PTY whose
//! controller the guardian keeps, and the shell's monitor with it (so a
//! frontend restart finds it as it was, and so does a guardian that was
//! killed or restarted: `reattach.rs`).
//!
//! What the terminal prints is fed to a `vt100` screen (for `screen`) and
//! to the engine's output filter, which splits it at the hook's markers
//! into the output of each typed command (without the echoed line, the
//! prompt or escape sequences), appended to `D/executions/<command_id>/output`.

mod reattach;
mod retire;
mod screen;

use std::collections::{HashMap, HashSet};
use std::num::NonZeroU16;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use winx_release_engine::AdmissionGuard;
use winx_release_runtime::shell::{
    CommandRecord, OutputFilter, Piece, Shell, ShellSpawn, Terminal, DEFAULT_COLS, DEFAULT_ROWS,
};
use winx_release_runtime::{Runtime, SessionKey};

use crate::sync::lock;
use screen::Screen;

/// The session a shell is started for: what the shell takes from it.
#[derive(Clone, Copy)]
pub(crate) struct ShellSession<'a> {
    /// The identity of its session directory.
    pub(crate) key: SessionKey,
    /// Its thread.
    pub(crate) thread: &'a str,
    /// Its workspace: the shell's working directory.
    pub(crate) workspace: &'a Path,
    /// Its session directory (the shell's `WINX_TEMP_DIR`).
    pub(crate) session_dir: &'a Path,
}

/// How long a new shell may take to show its first prompt.
const FIRST_PROMPT: Duration = Duration::from_secs(10);
/// Finished commands remembered in memory at most (older ones are read
/// back from `D/executions`).
const REMEMBERED: usize = 1024;

/// One command typed into a shell.
pub(crate) struct Cmd {
    pub(crate) rec: CommandRecord,
    /// Bytes of its output already returned ("what is new").
    pub(crate) delivered: Mutex<u64>,
    /// Where its output was dropped, beyond the inline limit.
    pub(crate) dropped: Mutex<Option<std::path::PathBuf>>,
}

/// What the terminal showed and which command it shows.
struct View {
    screen: Screen,
    filter: OutputFilter,
    shell: Option<Shell>,
    /// Typed and not yet back at the prompt.
    current: Option<Arc<Cmd>>,
    /// Its output started (the shell read its line).
    started: bool,
    /// Taken over while its command ran (`reattach.rs`): the length of its
    /// output then. The earlier guardian may have died before it read the
    /// echo of the typed line and the start marker after it; should that
    /// marker come now, what was recorded since is the echo, and is cut.
    unsure_start: Option<u64>,
    /// The last command typed.
    last: Option<Arc<Cmd>>,
    /// The shell is being ended (`retire.rs`): what the terminal prints
    /// from now on (the end of the shell) is not shown.
    closing: bool,
    /// Called when a command of the shell is back at its prompt (a
    /// background shell's: the retention worker may end the shell).
    on_done: Option<Done>,
}

/// What a shell calls when one of its commands is back at its prompt.
pub(crate) type Done = Box<dyn Fn() + Send + Sync>;

/// A shell on a terminal the guardian keeps.
pub(crate) struct Term {
    pub(crate) shell: Shell,
    pub(crate) thread: String,
    pub(crate) session: SessionKey,
    /// Its first command's id, for a background shell.
    pub(crate) bg_id: Mutex<Option<String>>,
    /// An end was tried (`retire.rs`): never typed twice.
    retire_tried: std::sync::atomic::AtomicBool,
    view: Arc<Mutex<View>>,
    cv: Arc<Condvar>,
}

/// The guardian's shells.
#[derive(Default)]
pub struct Shells {
    threads: Mutex<HashMap<SessionKey, Arc<Term>>>,
    background: Mutex<HashMap<String, Arc<Term>>>,
    commands: Mutex<HashMap<String, Typed>>,
}

/// A command and the shell it was typed into.
type Typed = (Arc<Term>, Arc<Cmd>);

impl Shells {
    /// The command last typed into the shell whose execution is
    /// `execution` (a thread's or a background shell), for naming what runs.
    pub fn last_command_of(&self, execution: &str) -> Option<String> {
        let threads = lock(&self.threads);
        let background = lock(&self.background);
        let term = threads.values().chain(background.values()).find(|t| t.shell.execution().id == execution)?;
        term.last().map(|c| c.rec.id.clone())
    }

    /// The thread's shell, if it has one that has not ended.
    pub(crate) fn thread_term(&self, key: &SessionKey) -> Option<Arc<Term>> {
        lock(&self.threads).get(key).filter(|t| !t.shell.ended()).cloned()
    }

    /// The background shell whose command is `id`: a running one, or an
    /// ended one whose command is still remembered (its screen and output
    /// still answer).
    pub(crate) fn background_term(&self, id: &str) -> Option<Arc<Term>> {
        if let Some(t) = lock(&self.background).get(id) {
            return Some(t.clone());
        }
        let (t, _) = lock(&self.commands).get(id).cloned()?;
        let is_its_shell = lock(&t.bg_id).as_deref() == Some(id);
        is_its_shell.then_some(t)
    }

    pub(crate) fn command(&self, id: &str) -> Option<Typed> {
        lock(&self.commands).get(id).cloned()
    }

    fn remember(&self, term: &Arc<Term>, cmd: &Arc<Cmd>) {
        let mut m = lock(&self.commands);
        if m.len() >= REMEMBERED {
            m.retain(|_, (_, c)| !c.rec.finished());
        }
        m.insert(cmd.rec.id.clone(), (term.clone(), cmd.clone()));
    }

    /// Puts the screens of the quiet shells to sleep (see [`screen`]:
    /// background shells after [`screen::QUIET`], threads' after
    /// [`screen::QUIET_THREAD`]), those of ended shells a command still
    /// names included. Returns how many sleep. The retention worker calls it
    /// after its passes, off every request's path: a screen takes about
    /// 4 ms to put to sleep.
    pub fn rest(&self) -> usize {
        let mut terms: Vec<Arc<Term>> = {
            let threads = lock(&self.threads);
            let background = lock(&self.background);
            threads.values().chain(background.values()).cloned().collect()
        };
        terms.extend(lock(&self.commands).values().map(|(t, _)| t.clone()));
        let mut seen = HashSet::new();
        terms
            .iter()
            .filter(|t| seen.insert(Arc::as_ptr(t)))
            .filter(|t| {
                let quiet = if lock(&t.bg_id).is_some() { screen::QUIET } else { screen::QUIET_THREAD };
                lock(&t.view).screen.sleep(quiet)
            })
            .count()
    }

    /// The thread's shell, started when it has none (or its shell ended).
    /// The caller holds the session's admission barrier.
    pub(crate) fn thread_term_or_start(
        &self,
        rt: &Arc<Runtime>,
        admitted: &AdmissionGuard<'_>,
        session: ShellSession<'_>,
    ) -> std::io::Result<Arc<Term>> {
        if let Some(t) = self.thread_term(&session.key) {
            return Ok(t);
        }
        let t = start(rt, admitted, session, None)?;
        lock(&self.threads).insert(session.key, t.clone());
        Ok(t)
    }

    /// A new background shell of `session`, which calls `on_done` when
    /// its command is back at its prompt. The caller holds the session's
    /// admission barrier.
    pub(crate) fn start_background(
        &self,
        rt: &Arc<Runtime>,
        admitted: &AdmissionGuard<'_>,
        session: ShellSession<'_>,
        on_done: Done,
    ) -> std::io::Result<Arc<Term>> {
        start(rt, admitted, session, Some(on_done))
    }

    pub(crate) fn register_background(&self, id: &str, t: &Arc<Term>) {
        *lock(&t.bg_id) = Some(id.to_owned());
        let mut m = lock(&self.background);
        m.retain(|_, t| !t.shell.ended());
        m.insert(id.to_owned(), t.clone());
    }
}

/// Starts a shell of `session` in its workspace, and waits for its first
/// prompt. A background shell has an `on_done`.
fn start(
    rt: &Arc<Runtime>,
    admitted: &AdmissionGuard<'_>,
    session: ShellSession<'_>,
    on_done: Option<Done>,
) -> std::io::Result<Arc<Term>> {
    let background = on_done.is_some();
    let (view, cv, sink) = new_view(rt, on_done);
    let workspace = session.workspace.to_path_buf();
    let shell = rt.start_shell(
        admitted,
        ShellSpawn {
            thread: session.thread.to_owned(),
            workspace: workspace.clone(),
            cwd: workspace,
            session: session.key,
            env: vec![("WINX_TEMP_DIR".into(), session.session_dir.as_os_str().to_owned())],
            background,
            terminal: Terminal::Open { rows: DEFAULT_ROWS, cols: DEFAULT_COLS },
        },
        Some(sink),
    )?;
    lock(&view).shell = Some(shell.clone());
    if !shell.wait_prompt(0, FIRST_PROMPT) {
        let why = if shell.ended() { "exited before its first prompt" } else { "showed no prompt in time" };
        return Err(std::io::Error::other(format!("the shell {why} (execution {})", shell.execution().id)));
    }
    Ok(Arc::new(Term {
        shell,
        thread: session.thread.to_owned(),
        session: session.key,
        bg_id: Mutex::new(None),
        retire_tried: std::sync::atomic::AtomicBool::new(false),
        view,
        cv,
    }))
}

/// A new view of a terminal, its condition, and the sink that feeds it.
fn new_view(
    rt: &Arc<Runtime>,
    on_done: Option<Done>,
) -> (Arc<Mutex<View>>, Arc<Condvar>, winx_release_runtime::shell::OutputSink) {
    let rows = NonZeroU16::new(DEFAULT_ROWS).unwrap_or(NonZeroU16::MIN);
    let cols = NonZeroU16::new(DEFAULT_COLS).unwrap_or(NonZeroU16::MIN);
    let view = Arc::new(Mutex::new(View {
        screen: Screen::new(rows, cols),
        filter: OutputFilter::default(),
        shell: None,
        current: None,
        started: false,
        unsure_start: None,
        last: None,
        closing: false,
        on_done,
    }));
    let cv = Arc::new(Condvar::new());
    let sink = {
        let (view, cv, rt) = (view.clone(), cv.clone(), rt.clone());
        Arc::new(move |bytes: &[u8]| {
            feed(&rt, &mut lock(&view), bytes);
            cv.notify_all();
        })
    };
    (view, cv, sink)
}

/// One chunk of terminal output: the screen, and the current command's
/// output between its markers; the command is finished at the end marker
/// once the hook reported its prompt (a marker a command printed itself
/// finishes nothing).
fn feed(rt: &Runtime, v: &mut View, bytes: &[u8]) {
    if v.closing {
        return;
    }
    v.screen.process(bytes);
    for piece in v.filter.feed(bytes) {
        match piece {
            Piece::Text(t) => {
                if let (true, Some(c)) = (v.started, &v.current) {
                    if let Err(e) = c.rec.append_output(&t) {
                        tracing::warn!(command_id = %c.rec.id, error = %e, "could not record output");
                    }
                }
            }
            Piece::Start => {
                if let (Some(len), Some(c)) = (v.unsure_start.take(), &v.current) {
                    if let Err(e) = c.rec.truncate_output(len) {
                        tracing::warn!(command_id = %c.rec.id, error = %e, "could not cut the echo from the output");
                    }
                }
                v.started = v.current.is_some();
            }
            Piece::End(prompt) => {
                let (Some(c), Some(sh)) = (&v.current, &v.shell) else { continue };
                // Back at the prompt: also when its line never ran (a
                // Ctrl-c's flush discarded it before the shell read it).
                // The marker of the prompt before it, read late, is not.
                if c.rec.ended_by(prompt, sh.prompts()) {
                    finish(rt, c, sh.last_exit());
                    v.current = None;
                    v.started = false;
                    v.unsure_start = None;
                    if let Some(done) = &v.on_done {
                        done();
                    }
                }
            }
        }
    }
}

fn finish(rt: &Runtime, c: &Cmd, code: Option<i32>) {
    match c.rec.finish(rt, code) {
        Ok(dropped) => *lock(&c.dropped) = dropped,
        Err(e) => tracing::warn!(command_id = %c.rec.id, error = %e, "could not record a command's end"),
    }
}

impl Term {
    /// Whether the shell is at its prompt with no command unfinished.
    pub(crate) fn at_prompt(&self) -> bool {
        self.shell.at_prompt() && lock(&self.view).current.is_none()
    }

    /// Waits up to `timeout` until the shell has read the current
    /// command's line and runs it (its start marker was read); true at
    /// once when no command is current. Until then the line editor still
    /// reads the terminal: input (a Ctrl-c's flush of the input queue
    /// included) would reach it, not the command.
    pub(crate) fn wait_started(&self, timeout: Duration) -> bool {
        self.wait_until(timeout, |v| v.current.is_none() || v.started)
    }

    /// Waits up to `timeout` for the shell to be at its prompt with its
    /// command's output complete (the end marker read).
    pub(crate) fn settle(&self, timeout: Duration) -> bool {
        self.wait_until(timeout, |v| v.current.is_none() && self.shell.at_prompt())
    }

    /// Waits up to `timeout` until `done` holds of the view (true), or
    /// the time is up or the shell ended (false). `done` is asked under
    /// the view's lock, at once and after each chunk of output.
    fn wait_until(&self, timeout: Duration, done: impl Fn(&View) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut v = lock(&self.view);
        loop {
            if done(&v) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline || self.shell.ended() {
                return false;
            }
            v = self
                .cv
                .wait_timeout(v, (deadline - now).min(Duration::from_millis(100)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Records `text` as a command and types it. The caller holds the
    /// session's admission barrier and checked [`Term::at_prompt`].
    pub(crate) fn type_command(
        self: &Arc<Self>,
        shells: &Shells,
        rt: &Runtime,
        admitted: &winx_release_engine::AdmissionGuard<'_>,
        text: &str,
    ) -> std::io::Result<Arc<Cmd>> {
        let rec = self.shell.record_command(rt, text)?;
        let line = rec.typed_line();
        let cmd = Arc::new(Cmd { rec, delivered: Mutex::new(0), dropped: Mutex::new(None) });
        {
            let mut v = lock(&self.view);
            v.current = Some(cmd.clone());
            v.started = false;
            v.unsure_start = None;
            v.last = Some(cmd.clone());
        }
        shells.remember(self, &cmd);
        if let Err(e) = self.shell.write(admitted, winx_release_runtime::shell::Write::Line, line.as_bytes()) {
            finish(rt, &cmd, Some(127));
            let _ = cmd.rec.append_output(format!("could not type the command: {e}\n").as_bytes());
            lock(&self.view).current = None;
            return Err(e);
        }
        Ok(cmd)
    }

    /// The command typed last (running or finished).
    pub(crate) fn last(&self) -> Option<Arc<Cmd>> {
        lock(&self.view).last.clone()
    }

    /// Waits up to `timeout` until `cmd` is back at the prompt (or the
    /// shell ended: the command is then finished with the shell's exit).
    pub(crate) fn wait(&self, rt: &Runtime, cmd: &Cmd, timeout: Duration) {
        if self.wait_until(timeout, |_| cmd.rec.finished()) {
            return;
        }
        let mut v = lock(&self.view);
        if cmd.rec.finished() || !self.shell.ended() {
            return;
        }
        // `exit`, or a hangup: no prompt will come.
        let code = match self.shell.execution().state() {
            winx_release_runtime::ExecState::Lingering(c) | winx_release_runtime::ExecState::Resolved(c) => c,
            _ => None,
        };
        finish(rt, cmd, code);
        if v.current.as_ref().is_some_and(|c| c.rec.id == cmd.rec.id) {
            v.current = None;
        }
    }

    /// The terminal as rendered now (its last `lines` rows), trailing
    /// blank rows and spaces trimmed.
    pub(crate) fn screen(&self, lines: Option<usize>) -> String {
        let mut v = lock(&self.view);
        let mut rows = v.screen.rows();
        while rows.last().is_some_and(|r| r.is_empty()) {
            rows.pop();
        }
        if let Some(n) = lines {
            let skip = rows.len().saturating_sub(n);
            rows.drain(..skip);
        }
        rows.join("\n")
    }
}
