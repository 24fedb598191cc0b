//! One holder sweep for every release waiting at once: a group commit of
//! the `in_use` step's `/proc` sweep.
//!
//! A sweep costs a few system calls per process on the machine, and the
//! sweeps of releases running at once read the same tables. So one sweep
//! runs at a time: a release that asks while one runs waits for the next,
//! and the next looks for the targets of every release that asked before it
//! started. No release is answered by a sweep that started before it asked
//! (before its own leases were taken, that is): a sweep's reads all come
//! after the ask of every release it answers.
//!
//! Each release gets the answer its own [`sweep`](super::sweep) would give:
//! - the sweep looks for the union of the targets and reads, of each
//!   process, what the most demanding release asks (memory maps, every
//!   thread's table when one of them asks): reading more finds no less;
//! - it passes over only the processes that every waiting release exempts;
//!   a holder found is counted for each release that has that target and
//!   does not exempt the holder, nor its parent when the holder is a fork
//!   that has not called `exec` yet (as [`sweep`](super::sweep) judges it);
//! - a process of the user that cannot be read counts for every release
//!   that does not exempt it;
//! - the sweep stops once every release it serves has a holder.
//!
//! A sweep that fails fails every release it serves; one that panics
//! answers each of them "cannot tell".

use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::sync::{Condvar, Mutex};

use super::holders::{sweep_with, unexeced_fork_of, Holder, HolderScan, HowHeld, Sweep};
use super::ProcError;
use crate::identity::PhysicalId;
use crate::sys::lock;

/// One release's question.
struct Ask {
    ticket: u64,
    targets: HashSet<PhysicalId>,
    uid: u32,
    exempt: Vec<i32>,
    how: Sweep,
}

/// The answer to one [`Ask`].
type Answer = Result<HolderScan, ProcError>;

/// The sweeps' shared state.
struct State {
    /// Whether a sweep runs now.
    running: bool,
    /// The next ticket.
    next: u64,
    /// Asks no sweep has started for yet.
    waiting: Vec<Ask>,
    /// Answers not yet taken, with their tickets.
    answers: Vec<(u64, Answer)>,
}

static STATE: Mutex<State> = Mutex::new(State { running: false, next: 0, waiting: Vec::new(), answers: Vec::new() });
/// Notified when a sweep has handed out its answers.
static DONE: Condvar = Condvar::new();

/// Like [`sweep`](super::sweep), but run by one sweep shared with every
/// release that asks at the same moment (see the module's docs): waits for
/// the next sweep that starts after this call, or runs it.
pub fn shared_sweep(
    targets: &HashSet<PhysicalId>,
    uid: u32,
    exempt: &[i32],
    how: Sweep,
) -> Result<HolderScan, ProcError> {
    let mut state = lock(&STATE);
    let ticket = state.next;
    state.next += 1;
    state.waiting.push(Ask { ticket, targets: targets.clone(), uid, exempt: exempt.to_vec(), how });
    loop {
        if let Some(i) = state.answers.iter().position(|(t, _)| *t == ticket) {
            return state.answers.swap_remove(i).1;
        }
        if !state.running {
            // Every waiting ask of this user: this one among them.
            let (batch, rest): (Vec<Ask>, Vec<Ask>) =
                std::mem::take(&mut state.waiting).into_iter().partition(|a| a.uid == uid);
            state.waiting = rest;
            state.running = true;
            drop(state);
            let mut run = Running { tickets: batch.iter().map(|a| a.ticket).collect(), answers: Vec::new() };
            run.answers = sweep_for(&batch);
            #[cfg(test)]
            tests::pause(&batch, tests::Stage::AfterSweep);
            drop(run);
            state = lock(&STATE);
            continue;
        }
        state = DONE.wait(state).unwrap_or_else(|e| e.into_inner());
    }
}

/// A sweep in progress: when dropped (its answers made, or a panic), hands
/// out the answers, an error to each ask left without one, and lets the
/// next sweep start.
struct Running {
    tickets: Vec<u64>,
    answers: Vec<(u64, Answer)>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut state = lock(&STATE);
        let mut answers: HashMap<u64, Answer> = self.answers.drain(..).collect();
        for t in &self.tickets {
            let answer = answers
                .remove(t)
                .unwrap_or_else(|| Err(ProcError::Unavailable(std::io::Error::other("the /proc sweep panicked"))));
            state.answers.push((*t, answer));
        }
        state.running = false;
        DONE.notify_all();
    }
}

/// Runs one sweep for `batch` (asks of one user) and answers each.
fn sweep_for(batch: &[Ask]) -> Vec<(u64, Answer)> {
    let Some(first) = batch.first() else { return Vec::new() };
    #[cfg(test)]
    tests::pause(batch, tests::Stage::BeforeSweep);
    let union: HashSet<PhysicalId> = batch.iter().flat_map(|a| a.targets.iter().copied()).collect();
    let exempt: Vec<i32> =
        first.exempt.iter().copied().filter(|p| batch.iter().all(|a| a.exempt.contains(p))).collect();
    let how = Sweep { maps: batch.iter().any(|a| a.how.maps), threads: batch.iter().any(|a| a.how.threads) };
    let found: Mutex<Vec<Option<Holder>>> = Mutex::new(vec![None; batch.len()]);
    let hit = |proc: &OwnedFd, h: Holder| {
        let mut found = lock(&found);
        for (a, slot) in batch.iter().zip(found.iter_mut()) {
            if slot.is_some() || a.exempt.contains(&h.pid) {
                continue;
            }
            *slot = match h.how {
                HowHeld::Uninspectable => a.targets.iter().next().map(|&target| Holder { target, ..h }),
                _ if a.targets.contains(&h.target) && !unexeced_fork_of(proc, h.pid, &a.exempt) => Some(h),
                _ => None,
            };
        }
        found.iter().all(Option::is_some)
    };
    let scan = sweep_with(&union, first.uid, &exempt, how, &hit);
    let found = found.into_inner().unwrap_or_else(|e| e.into_inner());
    batch
        .iter()
        .zip(found)
        .map(|(a, holder)| {
            let answer = match &scan {
                Ok(scan) => Ok(HolderScan { holder, ..scan.clone() }),
                Err(e) => Err(copy(e)),
            };
            (a.ticket, answer)
        })
        .collect()
}

/// A copy of `e` with the same message.
fn copy(e: &ProcError) -> ProcError {
    let io = |e: &std::io::Error| std::io::Error::new(e.kind(), e.to_string());
    match e {
        ProcError::Unavailable(e) => ProcError::Unavailable(io(e)),
        ProcError::Unreadable { pid, file, error } => ProcError::Unreadable { pid: *pid, file, error: io(error) },
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;
    use std::time::Duration;

    /// Where a test holds a sweep up.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub(super) enum Stage {
        /// Its batch taken, nothing read yet.
        BeforeSweep,
        /// Every process read, no answer handed out yet.
        AfterSweep,
    }

    /// Pauses asked by the tests: a sweep whose batch looks for this
    /// target waits this long at this stage. (Tests of other modules may
    /// sweep at the same time: a pause names a target of its own test.)
    static PAUSES: Mutex<Vec<(PhysicalId, Stage, Duration)>> = Mutex::new(Vec::new());
    /// The targets of each batch swept while a pause was asked for.
    static BATCHES: Mutex<Vec<HashSet<PhysicalId>>> = Mutex::new(Vec::new());

    pub(super) fn pause(batch: &[Ask], stage: Stage) {
        let union: HashSet<PhysicalId> = batch.iter().flat_map(|a| a.targets.iter().copied()).collect();
        let wait: Vec<Duration> =
            lock(&PAUSES).iter().filter(|(t, s, _)| *s == stage && union.contains(t)).map(|p| p.2).collect();
        if stage == Stage::BeforeSweep && !lock(&PAUSES).is_empty() {
            lock(&BATCHES).push(union.clone());
        }
        for d in wait {
            std::thread::sleep(d);
        }
    }

    fn file(dir: &std::path::Path, name: &str) -> (std::path::PathBuf, PhysicalId) {
        let p = dir.join(name);
        std::fs::write(&p, name).unwrap();
        let m = std::fs::metadata(&p).unwrap();
        (p, PhysicalId { dev: m.dev(), ino: m.ino() })
    }

    fn holding(p: &std::path::Path) -> std::process::Child {
        std::process::Command::new("sleep").arg("30").stdin(std::fs::File::open(p).unwrap()).spawn().unwrap()
    }

    const FDS: Sweep = Sweep { maps: false, threads: false };

    /// Three releases wait while a fourth's sweep runs; the next sweep
    /// serves all three at once. A holder counts only for the releases that
    /// have its target and do not exempt it.
    #[test]
    fn one_sweep_answers_each_waiting_release_as_its_own_would() {
        let dir = tempfile::tempdir().unwrap();
        let ((_, marker), (a_path, a), (_, b)) = (file(dir.path(), "m"), file(dir.path(), "a"), file(dir.path(), "b"));
        let mut child = holding(&a_path);
        let (me, kid) = (std::process::id() as i32, child.id() as i32);
        let uid = rustix::process::geteuid().as_raw();
        lock(&PAUSES).push((marker, Stage::BeforeSweep, Duration::from_millis(1000)));
        lock(&BATCHES).retain(|_| false);
        let asks: Vec<(HashSet<PhysicalId>, Vec<i32>)> =
            vec![([a].into(), vec![me]), ([b].into(), vec![me]), ([a, b].into(), vec![me, kid])];
        let answers: Vec<Option<Holder>> = std::thread::scope(|s| {
            let pacer = s.spawn(|| shared_sweep(&[marker].into(), uid, &[me], FDS).unwrap());
            std::thread::sleep(Duration::from_millis(100));
            let waiting: Vec<_> = asks
                .iter()
                .map(|(targets, exempt)| s.spawn(move || shared_sweep(targets, uid, exempt, FDS).unwrap().holder))
                .collect();
            assert_eq!(pacer.join().unwrap().holder, None);
            waiting.into_iter().map(|h| h.join().unwrap()).collect()
        });
        lock(&PAUSES).retain(|p| p.0 != marker);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(answers[0], Some(Holder { pid: kid, how: HowHeld::Fd(0), target: a }));
        assert_eq!(answers[1], None, "b is held by nobody");
        assert_eq!(answers[2], None, "the third release exempts the holder");
        let batches = lock(&BATCHES).clone();
        assert!(batches.iter().any(|u| u.contains(&a) && u.contains(&b)), "one sweep served them: {batches:?}");
    }

    /// A release that asks while a sweep runs is answered by the next
    /// sweep, never by the running one, even when that one looks for its
    /// targets: a hold that began before the ask is found.
    #[test]
    fn a_release_asking_during_a_sweep_waits_for_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let ((_, marker), (b_path, b)) = (file(dir.path(), "m"), file(dir.path(), "b"));
        let me = std::process::id() as i32;
        let uid = rustix::process::geteuid().as_raw();
        lock(&PAUSES).push((marker, Stage::AfterSweep, Duration::from_millis(1000)));
        let (first, later, kid) = std::thread::scope(|s| {
            let first = s.spawn(|| shared_sweep(&[marker, b].into(), uid, &[me], FDS).unwrap().holder);
            // The first sweep has read every process (b held by none) and
            // is held up before its answers; b is opened, then asked for.
            std::thread::sleep(Duration::from_millis(600));
            let child = holding(&b_path);
            let later = shared_sweep(&[b].into(), uid, &[me], FDS).unwrap().holder;
            (first.join().unwrap(), later, child)
        });
        lock(&PAUSES).retain(|p| p.0 != marker);
        let mut kid = kid;
        let pid = kid.id() as i32;
        kid.kill().unwrap();
        kid.wait().unwrap();
        eprintln!("the first sweep found {first:?}");
        assert_eq!(later, Some(Holder { pid, how: HowHeld::Fd(0), target: b }));
    }
}
