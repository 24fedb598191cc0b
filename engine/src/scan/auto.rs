//! Choosing a scan backend: `--backend auto|uring|sync`.
//!
//! - `sync`: [`SyncBackend`].
//! - `uring`: [`UringBackend`] where io_uring is available
//!   ([`winx_release_kernel::uring::probe()`]); otherwise [`SyncBackend`], with a `tracing`
//!   warning that says why.
//! - `threads`: [`ThreadsBackend`].
//! - `auto`: [`AutoBackend`], which picks per scan, by its mode (see
//!   [`auto_backend`] and `docs/IO_URING.md`).
//!
//! # References
//! - [`io_uring_setup(2)`](https://man7.org/linux/man-pages/man2/io_uring_setup.2.html)

use std::sync::OnceLock;

use super::{BackendKind, ScanBackend, ScanMode, ScanReport, ScanRequest, SyncBackend, ThreadsBackend};
use crate::scan::UringBackend;
use winx_release_kernel::uring::probe;

/// A backend as the command line names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendChoice {
    /// The faster backend on this machine, falling back to `sync`.
    Auto,
    /// io_uring, falling back to `sync` where it is unavailable.
    Uring,
    /// Synchronous system calls.
    Sync,
    /// Parallel walkers on plain system calls.
    Threads,
}

impl std::str::FromStr for BackendChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(BackendChoice::Auto),
            "uring" => Ok(BackendChoice::Uring),
            "sync" => Ok(BackendChoice::Sync),
            "threads" => Ok(BackendChoice::Threads),
            other => Err(format!("unknown backend {other:?} (auto, uring, sync, threads)")),
        }
    }
}

static SYNC: SyncBackend = SyncBackend;
static URING: OnceLock<UringBackend> = OnceLock::new();

fn uring() -> &'static UringBackend {
    URING.get_or_init(UringBackend::default)
}

static THREADS: OnceLock<ThreadsBackend> = OnceLock::new();

fn threads() -> &'static ThreadsBackend {
    THREADS.get_or_init(ThreadsBackend::default)
}

/// Idle cores the io_uring backend (with sizes) and the threaded walkers
/// (lean) need to be the faster ones.
///
/// The kernel runs every io_uring `statx` on an io-wq worker thread, which
/// costs about 1.5 times the CPU of the same `statx` as a plain system call
/// (`benches/README.md`); the io_uring backend turns that into parallel
/// work. It is the faster backend when the work can spread over idle
/// cores, and the slower one when every core is already busy.
pub(crate) const URING_MIN_IDLE_CORES: f64 = 1.5;

/// Idle cores now: the available parallelism less the smaller of the
/// one-minute load average and the tasks other than the caller runnable
/// at this instant (`/proc/loadavg`: its first field, and its fourth,
/// `runnable/total`, which counts the reading thread itself); `None` when
/// that cannot be read.
///
/// The load average alone lags by a minute: a scan that follows other work
/// of its own caller (a benchmark's earlier rounds, a build that has just
/// ended) found the cores busy while nothing else ran (`sync` at load 1.5
/// on two idle cores took 1.17 times the threaded walk's time:
/// benches/log/2026-12.md, stop 45). The instant's count alone sees a
/// sibling that is only starting (the next command of a pipeline) as
/// load, so where that leaves a core free it looks again (below). A
/// machine busy for the last minute and now is busy by both.
///
/// # References
/// - [`proc_loadavg(5)`](https://man7.org/linux/man-pages/man5/proc_loadavg.5.html)
pub(crate) fn idle_cores() -> Option<f64> {
    let cores = winx_release_kernel::sys::cores() as f64;
    most_idle(
        || idle_cores_from(cores, &std::fs::read_to_string("/proc/loadavg").ok()?),
        || std::thread::sleep(std::time::Duration::from_micros(100)),
    )
}

/// The most idle of up to [`IDLE_LOOKS`] calls of `look`, with `pause`
/// between them; `None` when a look fails.
///
/// The instant's count catches tasks that run for a moment only (the shell
/// that started this process, on its way to wait for it; a kernel worker).
/// Where a core is free even so, pausing is cheap: it looks again while no
/// look has found enough idle cores for a parallel scan. Where every core
/// is busy (less than one idle), a pause may cost a whole time slice: no
/// more looks.
fn most_idle(mut look: impl FnMut() -> Option<f64>, mut pause: impl FnMut()) -> Option<f64> {
    let mut idle = look()?;
    for _ in 1..IDLE_LOOKS {
        if parallel_scan_pays(Some(idle)) || idle < 1.0 {
            break;
        }
        pause();
        idle = idle.max(look()?);
    }
    Some(idle)
}

/// How many times [`idle_cores`] looks at most.
const IDLE_LOOKS: usize = 4;

/// [`idle_cores`] from a core count and the text of `/proc/loadavg`.
pub(crate) fn idle_cores_from(cores: f64, loadavg: &str) -> Option<f64> {
    let mut fields = loadavg.split_whitespace();
    let load: f64 = fields.next()?.parse().ok()?;
    let (runnable, _) = fields.nth(2)?.split_once('/')?;
    let others = f64::from(runnable.parse::<u32>().ok()?.saturating_sub(1));
    Some(cores - load.min(others))
}

/// Whether `idle` cores are enough for `auto` to pick a parallel backend
/// (io_uring for a scan with sizes, the threaded walkers for a lean one; see
/// [`URING_MIN_IDLE_CORES`]); an unknown load picks the synchronous backend.
pub(crate) fn parallel_scan_pays(idle: Option<f64>) -> bool {
    idle.is_some_and(|i| i >= URING_MIN_IDLE_CORES)
}

/// The backend `auto` picks now for a scan that measures sizes
/// ([`ScanMode::Sizes`]).
///
/// The rule, from the measurements in `benches/README.md`: the io_uring
/// backend when io_uring is available and at least
/// [`URING_MIN_IDLE_CORES`] cores are idle ([`idle_cores`]), else the
/// synchronous backend. So a one-core machine, or a busy one, scans
/// synchronously. Where io_uring is unavailable the reason is logged
/// (`info`).
fn sizes_backend() -> &'static dyn ScanBackend {
    match probe() {
        Ok(_) => {
            let idle = idle_cores();
            if parallel_scan_pays(idle) {
                tracing::debug!(?idle, "auto: io_uring scan backend");
                uring()
            } else {
                tracing::debug!(?idle, "auto: too few idle cores for io_uring; synchronous scan backend");
                &SYNC
            }
        }
        Err(why) => {
            tracing::info!(reason = %why, "io_uring unavailable; auto picks the synchronous scan backend");
            &SYNC
        }
    }
}

/// The backend `auto` runs a scan in `mode` on.
///
/// - [`ScanMode::Lean`] (every release; `winx-release scan` without
///   `--sizes`): the threaded walkers ([`ThreadsBackend`]) when at least
///   1.5 cores (`URING_MIN_IDLE_CORES`) are idle, else the synchronous backend.
///   A lean scan makes a handful of system calls per directory and none per
///   file. Measured on the 50,000-entry tree (`benches/README.md`,
///   2026-11-30): on an idle machine the threaded walk took 0.72 of the
///   synchronous walk's wall time for 1.2 times its CPU; with every core
///   busy (load 11) it was no faster and still cost 1.2 times the CPU, and
///   io_uring cost 1.4 times the CPU of the synchronous walk either way.
/// - [`ScanMode::Sizes`]: io_uring when enough cores are idle, else the
///   synchronous backend (1.5 idle cores, `URING_MIN_IDLE_CORES`).
pub fn auto_pick(mode: ScanMode) -> &'static dyn ScanBackend {
    match mode {
        ScanMode::Lean => {
            let idle = idle_cores();
            let parallel = parallel_scan_pays(idle);
            tracing::debug!(?idle, parallel, "auto: lean scan backend");
            if parallel {
                threads()
            } else {
                &SYNC
            }
        }
        ScanMode::Sizes => sizes_backend(),
    }
}

/// `auto`: runs each scan on `auto_pick`'s backend for its mode; the
/// report names the backend that ran.
#[derive(Clone, Copy, Debug, Default)]
pub struct AutoBackend;

impl ScanBackend for AutoBackend {
    /// The backend a scan with sizes would run on now.
    fn kind(&self) -> BackendKind {
        sizes_backend().kind()
    }

    fn scan(&self, req: &ScanRequest<'_>) -> ScanReport {
        auto_pick(req.mode).scan(req)
    }
}

static AUTO: AutoBackend = AutoBackend;

/// The `auto` backend ([`AutoBackend`]).
pub fn auto_backend() -> &'static dyn ScanBackend {
    &AUTO
}

/// The backend for `choice`, falling back to [`SyncBackend`] (with a
/// `tracing` line saying why) where io_uring is unavailable.
pub fn backend_for(choice: BackendChoice) -> &'static dyn ScanBackend {
    match choice {
        BackendChoice::Sync => &SYNC,
        BackendChoice::Threads => threads(),
        BackendChoice::Auto => auto_backend(),
        BackendChoice::Uring => match probe() {
            Ok(_) => uring(),
            Err(why) => {
                tracing::warn!(reason = %why, "io_uring unavailable; using the synchronous scan backend");
                &SYNC
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse() {
        assert_eq!("auto".parse(), Ok(BackendChoice::Auto));
        assert_eq!("uring".parse(), Ok(BackendChoice::Uring));
        assert_eq!("sync".parse(), Ok(BackendChoice::Sync));
        assert!("fast".parse::<BackendChoice>().is_err());
    }

    #[test]
    fn auto_rule() {
        // Only the reader runnable: every core idle, whatever the average
        // of the last minute says.
        assert_eq!(idle_cores_from(2.0, "1.50 0.40 0.50 1/120 999\n"), Some(2.0));
        assert!(parallel_scan_pays(idle_cores_from(2.0, "1.50 0.40 0.50 1/120 999\n")));
        // A sibling starting now on a machine idle for the last minute.
        assert_eq!(idle_cores_from(2.0, "0.25 0.40 0.50 2/120 999\n"), Some(1.75));
        assert!(parallel_scan_pays(idle_cores_from(2.0, "0.25 0.40 0.50 2/120 999\n")));
        // Busy for the last minute and now.
        assert_eq!(idle_cores_from(2.0, "1.50 0.40 0.50 3/120 999\n"), Some(0.5));
        assert!(!parallel_scan_pays(idle_cores_from(2.0, "0.90 0.40 0.50 2/120 999\n")));
        assert!(!parallel_scan_pays(idle_cores_from(1.0, "0.00 0.00 0.00 1/120 999\n")));
        assert!(parallel_scan_pays(idle_cores_from(8.0, "5.00 5.00 5.00 6/120 999\n")));
        assert!(!parallel_scan_pays(idle_cores_from(8.0, "7.00 5.00 5.00 9/120 999\n")));
        assert_eq!(idle_cores_from(2.0, "0.25 0.40 0.50"), None);
        assert!(!parallel_scan_pays(None));
        assert_eq!(idle_cores_from(2.0, "garbage"), None);
        let k = auto_backend().kind();
        assert!(k == BackendKind::Sync || probe().is_ok());
        let lean = auto_pick(ScanMode::Lean).kind();
        assert!(lean == BackendKind::Sync || lean == BackendKind::Threads, "{lean:?}");
    }

    /// Looks again only while a core is free but not enough for a
    /// parallel scan, and never pauses when every core is busy.
    #[test]
    fn looks_again_only_where_a_core_is_free() {
        let run = |seq: &[f64]| {
            let (mut i, mut pauses) = (0, 0);
            let got = most_idle(
                || {
                    i += 1;
                    seq.get(i - 1).copied()
                },
                || pauses += 1,
            );
            (got, i, pauses)
        };
        // A moment's task, gone at the second look.
        assert_eq!(run(&[1.0, 2.0, 1.0]), (Some(2.0), 2, 1));
        // Idle at once, or every core busy: one look, no pause.
        assert_eq!(run(&[2.0, 0.0]), (Some(2.0), 1, 0));
        assert_eq!(run(&[0.5, 2.0]), (Some(0.5), 1, 0));
        // One core busy throughout: four looks, three pauses.
        assert_eq!(run(&[1.0, 1.0, 1.0, 1.0, 2.0]), (Some(1.0), 4, 3));
        assert_eq!(run(&[]), (None, 1, 0));
    }

    #[test]
    fn sync_is_sync_and_uring_follows_the_probe() {
        assert_eq!(backend_for(BackendChoice::Sync).kind(), BackendKind::Sync);
        let want = if probe().is_ok() { BackendKind::Uring } else { BackendKind::Sync };
        assert_eq!(backend_for(BackendChoice::Uring).kind(), want);
    }
}
