//! What the runtime's integration tests share: waiting for a condition
//! with a deadline, never a bare sleep that hopes it is long enough.
//!
//! A sleep stays only where a test checks that something does *not*
//! happen (it says so where it sleeps).

#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

/// How often [`eventually`] looks again.
const POLL: Duration = Duration::from_millis(10);

/// Waits until `cond` holds, looking every 10 ms; panics naming `what`
/// once `deadline` has passed without it (`cond` is looked at once more at
/// the deadline).
pub fn eventually(deadline: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + deadline;
    while !cond() {
        assert!(Instant::now() < end, "timed out after {deadline:?}: {what}");
        std::thread::sleep(POLL);
    }
}

/// The pid a command wrote to `path`, once it is there (within 10 s).
pub fn read_pid(path: &Path) -> i32 {
    let mut pid = None;
    eventually(Duration::from_secs(10), &format!("a pid in {}", path.display()), || {
        pid = std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse().ok());
        pid.is_some()
    });
    pid.unwrap_or_default()
}
