//! Test-only stop points: a debug build whose environment names one
//! ([`VAR`]) stops the calling thread there for ever, after creating a
//! file, so that a test can SIGKILL the process in exactly that window
//! (a guardian killed between two steps of a start). Release builds have
//! none: `stop_at` is empty there.
//!
//! The variable is read once; a point not named costs a comparison.

/// `WINX_RELEASE_STOP_AT=<point>:<file>`: at `<point>`, `<file>` is
/// created and the thread stops.
pub const VAR: &str = "WINX_RELEASE_STOP_AT";

/// The leader of a background shell was started and named by its monitor;
/// the record does not name it yet.
pub(crate) const BACKGROUND_SHELL_STARTED: &str = "background-shell-started";

/// Stops the calling thread for ever when [`VAR`] names `point` (debug
/// builds only).
#[cfg(debug_assertions)]
pub(crate) fn stop_at(point: &str) {
    use std::sync::OnceLock;
    static AT: OnceLock<Option<(String, std::path::PathBuf)>> = OnceLock::new();
    let at = AT.get_or_init(|| {
        let v = std::env::var(VAR).ok()?;
        let (p, f) = v.split_once(':')?;
        Some((p.to_owned(), f.into()))
    });
    let Some((p, file)) = at else { return };
    if p != point {
        return;
    }
    tracing::warn!(point, "stopped at a test stop point ({VAR})");
    let _ = std::fs::write(file, point);
    loop {
        std::thread::park();
    }
}

/// Release builds: nothing.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub(crate) fn stop_at(_point: &str) {}
