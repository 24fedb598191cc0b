//! The shells an earlier guardian left, taken over at startup: each one's
//! monitor hands over its terminal and hook (`winx_release_runtime::monitor`),
//! and the thread's next `BashCommand` finds the same shell (its working
//! directory, variables and jobs), the command typed into it still running
//! with its output so far, and what it prints from now on.
//!
//! The screen starts empty: what the terminal printed while no guardian
//! read it is read now (the terminal holds it; a command that printed more
//! than the terminal holds waited for a reader meanwhile), what it showed
//! before is in each command's `output`.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use winx_release_runtime::Runtime;

use super::{new_view, Cmd, Done, Shells, Term};
use crate::sync::lock;

impl Shells {
    /// Takes over every shell an earlier guardian left whose monitor still
    /// listens; `on_done` makes what a background shell calls when its
    /// command is back at its prompt. Returns how many were taken over; a
    /// shell that cannot be (a monitor of another protocol version) is
    /// left running and said so in the log.
    pub fn reattach(&self, rt: &Arc<Runtime>, on_done: impl Fn() -> Done) -> usize {
        let mut n = 0;
        for e in rt.shells_to_reattach() {
            let Some(session) = e.session else { continue };
            let done = e.background.then(&on_done);
            let (view, cv, sink) = new_view(rt, done);
            let got = match rt.reattach_shell(&e, Some(sink)) {
                Ok(got) => got,
                Err(err) => {
                    tracing::warn!(command_id = %e.id, error = %err, "a shell an earlier guardian left cannot be taken over; it runs on, and counts as running");
                    continue;
                }
            };
            let current = got.current.map(|rec| {
                // Nothing of it was returned by this guardian yet.
                let delivered = Mutex::new(0);
                Arc::new(Cmd { rec, delivered, dropped: Mutex::new(None) })
            });
            // The command ended before the earlier guardian died (its
            // prompt was reported after it was typed) and that guardian did
            // not record it: concluded now, with the last report's code.
            let ended = current.as_ref().is_some_and(|c| c.rec.ended_by(got.shell.prompts(), got.shell.prompts()));
            if let (true, Some(c)) = (ended, &current) {
                super::finish(rt, c, got.shell.last_exit());
            }
            {
                let mut v = lock(&view);
                v.shell = Some(got.shell.clone());
                // Its line was read, unless the earlier guardian died before
                // it read the echo and the start marker (`unsure_start`):
                // what comes is its output until that marker says otherwise.
                v.started = current.is_some() && !ended;
                v.current = current.clone().filter(|_| !ended);
                v.unsure_start = v.current.as_ref().map(|c| c.rec.output_len());
                v.last = current.clone();
                if let (true, Some(done)) = (ended, &v.on_done) {
                    done();
                }
            }
            let bg_id = current.as_ref().filter(|_| e.background).map(|c| c.rec.id.clone());
            // A background shell whose command is done is held under its
            // execution's id, for retention to end it.
            let key = bg_id.clone().unwrap_or_else(|| e.id.clone());
            let term = Arc::new(Term {
                shell: got.shell,
                thread: e.thread.clone(),
                session,
                bg_id: Mutex::new(bg_id.clone()),
                retire_tried: AtomicBool::new(false),
                view,
                cv,
            });
            if let Some(c) = &current {
                self.remember(&term, c);
            }
            if e.background {
                lock(&self.background).insert(key, term);
            } else {
                lock(&self.threads).insert(session, term);
            }
            n += 1;
        }
        n
    }
}
