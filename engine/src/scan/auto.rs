//! Choosing a scan backend: `--backend auto|uring|sync`.
//!
//! - `sync`: [`SyncBackend`].
//! - `uring`: [`UringBackend`] where io_uring is available
//!   ([`crate::uring::probe()`]); otherwise [`SyncBackend`], with a `tracing`
//!   warning that says why.
//! - `auto`: see [`auto_backend`].
//!
//! # References
//! - [`io_uring_setup(2)`](https://man7.org/linux/man-pages/man2/io_uring_setup.2.html)

use std::sync::OnceLock;

use super::{ScanBackend, SyncBackend};
use crate::uring::{probe, UringBackend};

/// A backend as the command line names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendChoice {
    /// The faster backend on this machine, falling back to `sync`.
    Auto,
    /// io_uring, falling back to `sync` where it is unavailable.
    Uring,
    /// Synchronous system calls.
    Sync,
}

impl std::str::FromStr for BackendChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(BackendChoice::Auto),
            "uring" => Ok(BackendChoice::Uring),
            "sync" => Ok(BackendChoice::Sync),
            other => Err(format!("unknown backend {other:?} (auto, uring, sync)")),
        }
    }
}

static SYNC: SyncBackend = SyncBackend;
static URING: OnceLock<UringBackend> = OnceLock::new();

fn uring() -> &'static UringBackend {
    URING.get_or_init(UringBackend::default)
}

/// Idle cores the io_uring backend needs to be the faster one.
///
/// The kernel runs every io_uring `statx` on an io-wq worker thread, which
/// costs about 1.5 times the CPU of the same `statx` as a plain system call
/// (`benches/README.md`); the io_uring backend turns that into parallel
/// work. It is the faster backend when the work can spread over idle
/// cores, and the slower one when every core is already busy.
pub const URING_MIN_IDLE_CORES: f64 = 1.5;

/// Idle cores now: the available parallelism less the one-minute load
/// average (`/proc/loadavg`); `None` when the load is unknown.
pub fn idle_cores() -> Option<f64> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let loadavg = std::fs::read_to_string("/proc/loadavg").ok()?;
    idle_cores_from(cores, &loadavg)
}

/// [`idle_cores`] from a core count and the text of `/proc/loadavg`.
pub fn idle_cores_from(cores: f64, loadavg: &str) -> Option<f64> {
    let load: f64 = loadavg.split_whitespace().next()?.parse().ok()?;
    Some(cores - load)
}

/// Whether `auto` picks io_uring given `idle` cores (see
/// [`URING_MIN_IDLE_CORES`]); an unknown load picks the synchronous backend.
pub fn auto_prefers_uring(idle: Option<f64>) -> bool {
    idle.is_some_and(|i| i >= URING_MIN_IDLE_CORES)
}

/// The backend `auto` picks now.
///
/// The rule, from the measurements in `benches/README.md`: the io_uring
/// backend when io_uring is available and at least
/// [`URING_MIN_IDLE_CORES`] cores are idle ([`idle_cores`]), else the
/// synchronous backend. So a one-core machine, or a busy one, scans
/// synchronously. Where io_uring is unavailable the reason is logged
/// (`info`).
pub fn auto_backend() -> &'static dyn ScanBackend {
    match probe() {
        Ok(_) => {
            let idle = idle_cores();
            if auto_prefers_uring(idle) {
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

/// The backend for `choice`, falling back to [`SyncBackend`] (with a
/// `tracing` line saying why) where io_uring is unavailable.
pub fn backend_for(choice: BackendChoice) -> &'static dyn ScanBackend {
    match choice {
        BackendChoice::Sync => &SYNC,
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
    use crate::scan::BackendKind;

    #[test]
    fn choices_parse() {
        assert_eq!("auto".parse(), Ok(BackendChoice::Auto));
        assert_eq!("uring".parse(), Ok(BackendChoice::Uring));
        assert_eq!("sync".parse(), Ok(BackendChoice::Sync));
        assert!("fast".parse::<BackendChoice>().is_err());
    }

    #[test]
    fn auto_rule() {
        assert_eq!(idle_cores_from(2.0, "0.25 0.40 0.50 1/120 999\n"), Some(1.75));
        assert!(auto_prefers_uring(idle_cores_from(2.0, "0.25 0.40 0.50 1/120 999\n")));
        assert!(!auto_prefers_uring(idle_cores_from(2.0, "0.90 0.40 0.50 1/120 999\n")));
        assert!(!auto_prefers_uring(idle_cores_from(1.0, "0.00 0.00 0.00 1/120 999\n")));
        assert!(auto_prefers_uring(idle_cores_from(8.0, "5.00 5.00 5.00 1/120 999\n")));
        assert!(!auto_prefers_uring(None));
        assert_eq!(idle_cores_from(2.0, "garbage"), None);
        let k = auto_backend().kind();
        assert!(k == BackendKind::Sync || probe().is_ok());
    }

    #[test]
    fn sync_is_sync_and_uring_follows_the_probe() {
        assert_eq!(backend_for(BackendChoice::Sync).kind(), BackendKind::Sync);
        let want = if probe().is_ok() { BackendKind::Uring } else { BackendKind::Sync };
        assert_eq!(backend_for(BackendChoice::Uring).kind(), want);
    }
}
