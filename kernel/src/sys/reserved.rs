//! A thread had now, to run work given to it later.

use std::io;
use std::sync::mpsc;

/// One piece of work for a [`Reserved`] thread.
type Work = Box<dyn FnOnce() + Send>;

/// A thread started now that runs the work it is given later: taken
/// before a step that cannot be undone (a process spawned), so that step
/// never goes ahead without the thread that must follow it (a leader's
/// waiter, a shell's readers). Dropped without work, the thread ends.
pub struct Reserved(mpsc::Sender<Work>);

impl Reserved {
    /// Starts the thread; fails where none can be had (the user's task
    /// limit reached).
    pub fn thread() -> io::Result<Reserved> {
        let (give, take) = mpsc::channel::<Work>();
        std::thread::Builder::new().spawn(move || {
            if let Ok(work) = take.recv() {
                work();
            }
        })?;
        Ok(Reserved(give))
    }

    /// Runs `work` on the thread.
    pub fn run(self, work: impl FnOnce() + Send + 'static) {
        // The thread holds the receiving end until it has the work.
        let _ = self.0.send(Box::new(work));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_work_runs_on_the_reserved_thread_and_an_unused_one_ends() {
        let (tx, rx) = mpsc::channel();
        let here = std::thread::current().id();
        Reserved::thread().unwrap().run(move || tx.send(std::thread::current().id()).unwrap());
        let there = rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap();
        assert_ne!(there, here);
        drop(Reserved::thread().unwrap());
    }
}
