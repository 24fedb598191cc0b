//! Threads that serve connections, kept for reuse.
//!
//! Every accepted connection is served on a thread of its own for as long
//! as it stays open: a connection that blocks (an inline wait for a
//! command, a slow release) never holds up another; the pool sets no
//! bound on threads, the accept loop bounds the connections it hands over
//! (`server.rs`: 64 of one process, 256 in all). What the pool adds is the end: a thread whose
//! connection closed waits up to [`IDLE`] for the next one instead of
//! exiting, so a guardian serving one short connection per request does
//! not create and tear down a thread (its stack, its allocator cache) per
//! request.
//!
//! The bookkeeping, all under one mutex: `idle` counts threads that
//! finished a job and wait for another; `queue` holds jobs handed to one of
//! them. A submitter either claims a waiting thread (lowers `idle`, queues
//! the job, wakes a waiter) or, when none waits, starts a thread *with* the
//! job, which never looks at the queue before its first job is done. So at
//! every moment the threads waiting equal `idle` plus the queued jobs:
//! every queued job has a thread to run it, and a waiter that times out
//! with an empty queue always finds `idle` above 0 and leaves. Waiting is a
//! [`Condvar`] wait, which lets go of the mutex: no thread's wait holds up
//! another's timeout.
//!
//! Where no thread can be started (the user's task limit, which the
//! session's own commands share), a job is refused, not run on the
//! submitter's thread: the accept loop answers that connection with one
//! error line and goes on accepting.
//!
//! (The pool of earlier versions queued a new thread's first job on the
//! shared channel too; another waiter could take it, and the new thread
//! then blocked in an untimed `recv` holding the receiver's mutex, so no
//! idle thread could ever time out: a thread leak, seen as a flaky test.)

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::sync::lock;

/// How long a thread without a connection waits for the next one.
pub const IDLE: Duration = Duration::from_secs(30);

type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Default)]
struct State {
    /// Threads waiting for a job and not yet claimed.
    idle: usize,
    /// Jobs handed to a claimed waiter.
    queue: VecDeque<Job>,
    /// Threads alive (running a job or waiting).
    alive: usize,
}

struct Inner {
    state: Mutex<State>,
    wake: Condvar,
    wait: Duration,
}

/// A pool of connection threads (see the module docs).
pub struct Pool {
    inner: Arc<Inner>,
    /// Test seam: every spawn fails, as at the task limit.
    fail_spawns: std::sync::atomic::AtomicBool,
    started: AtomicU64,
}

impl Default for Pool {
    fn default() -> Pool {
        Pool::with_idle(IDLE)
    }
}

impl Pool {
    /// A pool whose threads wait `wait` for a next job before they exit.
    pub fn with_idle(wait: Duration) -> Pool {
        let inner = Inner { state: Mutex::new(State::default()), wake: Condvar::new(), wait };
        Pool { inner: Arc::new(inner), fail_spawns: Default::default(), started: AtomicU64::new(0) }
    }

    /// Runs `job` on a waiting thread, or on a new one when none waits.
    /// `Err` when no thread could be started (the task limit): the job is
    /// dropped, not run here (a connection served on the caller's thread
    /// would stall the accept loop for as long as it stays open).
    pub fn run(&self, job: impl FnOnce() + Send + 'static) -> Result<(), std::io::Error> {
        let job: Job = Box::new(job);
        {
            let mut state = lock(&self.inner.state);
            if state.idle > 0 {
                state.idle -= 1;
                state.queue.push_back(job);
                drop(state);
                self.inner.wake.notify_one();
                return Ok(());
            }
            state.alive += 1;
        }
        let inner = Arc::clone(&self.inner);
        let spawned = if cfg!(test) && self.fail_spawns.load(Ordering::Relaxed) {
            Err(std::io::Error::from(std::io::ErrorKind::WouldBlock))
        } else {
            std::thread::Builder::new().name("conn".into()).spawn(move || worker(&inner, job))
        };
        match spawned {
            Ok(_) => {
                self.started.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                lock(&self.inner.state).alive -= 1;
                Err(e)
            }
        }
    }

    /// Threads started so far.
    pub fn started(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }

    /// Threads alive now: running a job or waiting for one.
    #[cfg(test)]
    pub fn alive(&self) -> usize {
        lock(&self.inner.state).alive
    }

    /// Threads waiting for a job now.
    #[cfg(test)]
    pub fn idle(&self) -> usize {
        lock(&self.inner.state).idle
    }
}

fn worker(inner: &Inner, mut job: Job) {
    loop {
        job();
        let mut state = lock(&inner.state);
        state.idle += 1;
        let deadline = Instant::now() + inner.wait;
        job = loop {
            if let Some(next) = state.queue.pop_front() {
                break next;
            }
            let now = Instant::now();
            if now >= deadline {
                // The queue is empty, so every waiter is unclaimed: this
                // one's slot is among `idle` and it may leave.
                debug_assert!(state.idle > 0);
                state.idle = state.idle.saturating_sub(1);
                state.alive -= 1;
                return;
            }
            state = match inner.wake.wait_timeout(state, deadline - now) {
                Ok((s, _)) => s,
                Err(poisoned) => poisoned.into_inner().0,
            };
        };
        drop(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::sync::Barrier;

    fn settle(pool: &Pool, done: impl Fn(&Pool) -> bool) {
        let t = Instant::now();
        while !done(pool) && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Where no thread can be started, the job is refused and dropped,
    /// never run on the submitter's thread (a connection served there
    /// stalled the accept loop until it closed); once threads can be had,
    /// jobs run again.
    #[test]
    fn a_job_no_thread_can_take_is_refused_not_run_here() {
        let pool = Pool::default();
        pool.fail_spawns.store(true, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel::<std::thread::ThreadId>();
        let tx2 = tx.clone();
        assert!(pool.run(move || tx2.send(std::thread::current().id()).unwrap()).is_err());
        drop(tx);
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "the refused job ran");
        assert_eq!(pool.alive(), 0);
        pool.fail_spawns.store(false, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        pool.run(move || tx.send(std::thread::current().id()).unwrap()).unwrap();
        assert_ne!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), std::thread::current().id());
    }

    /// One short job after another: one thread serves them all.
    #[test]
    fn sequential_jobs_reuse_a_thread() {
        let pool = Pool::default();
        for _ in 0..50 {
            let (tx, rx) = mpsc::channel();
            pool.run(move || tx.send(()).unwrap()).unwrap();
            rx.recv().unwrap();
            // Let the thread get back to waiting before the next job.
            settle(&pool, |p| p.idle() == 1);
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
            })
            .unwrap();
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
            pool.run(move || tx.send(round).unwrap()).unwrap();
            assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(round));
            std::thread::sleep(Duration::from_millis(u64::from(round % 4) * 10));
        }
        settle(&pool, |p| p.alive() == 0);
        assert_eq!((pool.alive(), pool.idle()), (0, 0), "idle threads left");
    }

    /// The race that leaked a thread before: jobs submitted from several
    /// threads while others finish, so that a new thread starts while a
    /// waiter is about to take the queue. Every job runs, and once nothing
    /// is submitted every thread leaves.
    #[test]
    fn concurrent_submitters_leak_no_thread() {
        let pool = Arc::new(Pool::with_idle(Duration::from_millis(5)));
        let (tx, rx) = mpsc::channel();
        let submitters: Vec<_> = (0..4)
            .map(|s| {
                let (pool, tx) = (Arc::clone(&pool), tx.clone());
                std::thread::spawn(move || {
                    for i in 0..300u32 {
                        let tx = tx.clone();
                        pool.run(move || {
                            if i % 7 == 0 {
                                std::thread::sleep(Duration::from_micros(200));
                            }
                            tx.send((s, i)).unwrap();
                        })
                        .unwrap();
                        if i % 13 == 0 {
                            std::thread::sleep(Duration::from_millis(6));
                        }
                    }
                })
            })
            .collect();
        for s in submitters {
            s.join().unwrap();
        }
        drop(tx);
        let ran = rx.iter().take(1200).count();
        assert_eq!(ran, 1200, "every job ran");
        settle(&pool, |p| p.alive() == 0);
        assert_eq!((pool.alive(), pool.idle()), (0, 0), "every idle thread left");
    }
}
