//! Phase 1's threads: the calling thread as worker 0, more workers once
//! there is work to share, each with its own [`Walker`] (ring) and a
//! last-in-first-out queue that idle workers steal from.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_deque::{Stealer, Worker};

use super::walker::Walker;
use super::{DirSlot, ScanShared};
use winx_release_kernel::sys::lock;

/// Runs phase 1: the calling thread as worker 0, helpers spawned once
/// there is more work than one worker keeps in flight.
pub(super) fn run_phase1(sh: &ScanShared<'_>, walker: &mut Walker) {
    let threads = sh.config.thread_count();
    let workers: Vec<Worker<Arc<DirSlot>>> = (0..threads).map(|_| Worker::new_lifo()).collect();
    let stealers: Vec<Stealer<Arc<DirSlot>>> = workers.iter().map(Worker::stealer).collect();
    let mut workers = workers.into_iter();
    let mine = workers.next().expect("one worker");
    std::thread::scope(|s| {
        let mut helpers = Some(workers);
        work_loop(sh, &mine, 0, &stealers, walker, &mut |local_len| {
            if local_len > 1 {
                if let Some(rest) = helpers.take() {
                    for (k, w) in rest.enumerate() {
                        let stealers = &stealers;
                        // A helper no thread can be had for (the user's task
                        // limit) takes nothing: its deque stays empty, and
                        // the others steal nothing from it.
                        let _ = std::thread::Builder::new().spawn_scoped(s, move || {
                            let mut walker = Walker::new(sh, sh.pipes.clone());
                            work_loop(sh, &w, k + 1, stealers, &mut walker, &mut |_| {});
                        });
                    }
                }
            }
        });
    });
}

fn work_loop(
    sh: &ScanShared<'_>,
    local: &Worker<Arc<DirSlot>>,
    me: usize,
    stealers: &[Stealer<Arc<DirSlot>>],
    walker: &mut Walker,
    after_round: &mut dyn FnMut(usize),
) {
    let in_flight = sh.config.batch_dirs.max(1);
    loop {
        let cancelled = sh.cancel.load(Ordering::Relaxed);
        if !cancelled {
            while walker.live < in_flight {
                let Some(t) = local.pop().or_else(|| steal(sh, local, me, stealers)) else { break };
                walker.begin(sh, t, usize::MAX, true);
            }
        }
        walker.advance(sh);
        if walker.live == 0 {
            if cancelled || sh.outstanding.load(Ordering::Acquire) == 0 {
                return;
            }
            sh.sleepers.fetch_add(1, Ordering::AcqRel);
            let guard = lock(&sh.idle);
            let _ = sh.wake.wait_timeout(guard, Duration::from_micros(200));
            sh.sleepers.fetch_sub(1, Ordering::AcqRel);
            continue;
        }
        if walker.finished.is_empty() {
            walker.pump_some(sh.aliases);
            walker.advance(sh);
        }
        let (children, ended) = walker.finish(sh);
        // Count the new work before it becomes visible to thieves, so
        // `outstanding` never drops to zero while work exists.
        sh.outstanding.fetch_add(children.len(), Ordering::AcqRel);
        for child in children.iter().rev() {
            local.push(child.clone());
        }
        if !children.is_empty() && sh.sleepers.load(Ordering::Acquire) > 0 {
            sh.wake.notify_all();
        }
        let left = sh.outstanding.fetch_sub(ended, Ordering::AcqRel) - ended;
        if left == 0 {
            sh.wake.notify_all();
        }
        after_round(local.len());
    }
}

fn steal(
    sh: &ScanShared<'_>,
    local: &Worker<Arc<DirSlot>>,
    me: usize,
    stealers: &[Stealer<Arc<DirSlot>>],
) -> Option<Arc<DirSlot>> {
    loop {
        let mut retry = false;
        match sh.injector.steal_batch_and_pop(local) {
            crossbeam_deque::Steal::Success(t) => return Some(t),
            crossbeam_deque::Steal::Retry => retry = true,
            crossbeam_deque::Steal::Empty => {}
        }
        for (k, s) in stealers.iter().enumerate() {
            if k == me {
                continue;
            }
            match s.steal_batch_and_pop(local) {
                crossbeam_deque::Steal::Success(t) => return Some(t),
                crossbeam_deque::Steal::Retry => retry = true,
                crossbeam_deque::Steal::Empty => {}
            }
        }
        if !retry {
            return None;
        }
    }
}
