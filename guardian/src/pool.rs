//! Threads that serve connections, kept for reuse.
//!
//! Every accepted connection is served on a thread of its own for as long
//! as it stays open, as before: a connection that blocks (an inline wait
//! for a command, a slow release) never holds up another, and there is no
//! upper bound on threads. What changes is the end: a thread whose
//! connection closed waits up to [`IDLE`] for the next one instead of
//! exiting, so a guardian serving one short connection per request does
//! not create and tear down a thread (its stack, its allocator cache) per
//! request.
//!
//! The bookkeeping: `idle` counts threads that finished a job and wait for
//! another. A submitter claims one of them by lowering `idle`, or, when it
//! is 0, starts a thread; then it queues the job. A waiting thread leaves
//! after [`IDLE`] only by lowering `idle` itself; when `idle` is already 0
//! its slot was claimed and a job is on its way, so it waits on. Hence the
//! threads waiting always outnumber the queued jobs by at least `idle`,
//! and every queued job has a thread to run it.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::sessions::lock;

/// How long a thread without a connection waits for the next one.
pub const IDLE: Duration = Duration::from_secs(30);

type Job = Box<dyn FnOnce() + Send + 'static>;

/// A pool of connection threads (see the module docs).
pub struct Pool {
    tx: Mutex<Sender<Job>>,
    rx: Arc<Mutex<Receiver<Job>>>,
    idle: Arc<AtomicUsize>,
    started: AtomicU64,
    wait: Duration,
}

impl Default for Pool {
    fn default() -> Pool {
        Pool::with_idle(IDLE)
    }
}

impl Pool {
    /// A pool whose threads wait `wait` for a next job before they exit.
    pub fn with_idle(wait: Duration) -> Pool {
        let (tx, rx) = mpsc::channel();
        Pool {
            tx: Mutex::new(tx),
            rx: Arc::new(Mutex::new(rx)),
            idle: Arc::new(AtomicUsize::new(0)),
            started: AtomicU64::new(0),
            wait,
        }
    }

    /// Runs `job` on a waiting thread, or on a new one when none waits.
    pub fn run(&self, job: impl FnOnce() + Send + 'static) {
        let claimed = self.idle.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
        if !claimed {
            let (rx, idle, wait) = (Arc::clone(&self.rx), Arc::clone(&self.idle), self.wait);
            let spawned = std::thread::Builder::new().name("conn".into()).spawn(move || worker(&rx, &idle, wait));
            if spawned.is_err() {
                // No thread to be had: run it here rather than drop it.
                job();
                return;
            }
            self.started.fetch_add(1, Ordering::Relaxed);
        }
        // The receiver lives as long as the pool: sending cannot fail.
        let _ = lock(&self.tx).send(Box::new(job));
    }

    /// Threads started so far.
    pub fn started(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }
}

fn worker(rx: &Mutex<Receiver<Job>>, idle: &AtomicUsize, wait: Duration) {
    // The first job was queued with this thread's start.
    let Ok(mut job) = lock(rx).recv() else { return };
    loop {
        job();
        idle.fetch_add(1, Ordering::SeqCst);
        job = loop {
            let next = lock(rx).recv_timeout(wait);
            match next {
                Ok(j) => break j,
                Err(RecvTimeoutError::Timeout) => {
                    if idle.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
                        return;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;
    use std::time::Instant;

    /// One short job after another: one thread serves them all.
    #[test]
    fn sequential_jobs_reuse_a_thread() {
        let pool = Pool::default();
        for _ in 0..50 {
            let (tx, rx) = mpsc::channel();
            pool.run(move || tx.send(()).unwrap());
            rx.recv().unwrap();
            // Let the thread get back to waiting before the next job.
            let t = Instant::now();
            while pool.idle.load(Ordering::SeqCst) == 0 && t.elapsed() < Duration::from_secs(5) {
                std::thread::yield_now();
            }
        }
        assert_eq!(pool.started(), 1);
    }

    /// Jobs that block until all of them run at once: each gets its own
    /// thread (a bounded pool would deadlock here, and the test time out).
    #[test]
    fn blocking_jobs_never_wait_for_each_other() {
        let pool = Pool::default();
        let n = 24;
        let all = Arc::new(Barrier::new(n + 1));
        for _ in 0..n {
            let all = Arc::clone(&all);
            pool.run(move || {
                all.wait();
            });
        }
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            all.wait();
            let _ = tx.send(());
        });
        rx.recv_timeout(Duration::from_secs(10)).expect("every job ran at the same time");
        assert_eq!(pool.started(), n as u64);
    }

    /// Idle threads leave after their wait, and a job submitted meanwhile
    /// still runs.
    #[test]
    fn idle_threads_leave_and_later_jobs_still_run() {
        let pool = Pool::with_idle(Duration::from_millis(20));
        for round in 0..20u32 {
            let (tx, rx) = mpsc::channel();
            pool.run(move || tx.send(round).unwrap());
            assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(round));
            std::thread::sleep(Duration::from_millis(u64::from(round % 4) * 10));
        }
        let t = Instant::now();
        while pool.idle.load(Ordering::SeqCst) > 0 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(pool.idle.load(Ordering::SeqCst), 0, "idle threads left");
    }
}
