//! Locking that survives a panicked holder.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, taking the data even if a holder panicked.
///
/// The tables behind these mutexes (sessions, executions, ring pools) are
/// updated by whole assignments, so a panic cannot leave one half-written;
/// refusing every later lock would only turn one failure into many.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
