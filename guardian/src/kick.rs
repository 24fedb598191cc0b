//! The retention worker's doorbell: a kick asks for a pass soon and names
//! the workspace whose backing roots are counted from then on.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use winx_release_kernel::sys::lock;

/// Wakes the retention worker.
#[derive(Default)]
pub struct Kick {
    state: Mutex<KickState>,
    cv: Condvar,
}

#[derive(Default)]
struct KickState {
    pending: bool,
    workspaces: BTreeSet<PathBuf>,
}

impl Kick {
    /// Asks for a pass soon; `workspace`, when given, is counted in the
    /// backing-usage check from now on.
    pub fn kick(&self, workspace: Option<&str>) {
        let mut st = lock(&self.state);
        st.pending = true;
        if let Some(ws) = workspace {
            if !st.workspaces.contains(Path::new(ws)) {
                st.workspaces.insert(PathBuf::from(ws));
            }
        }
        self.cv.notify_all();
    }

    /// Forgets a pending kick (a pass is starting anyway).
    pub(crate) fn clear(&self) {
        lock(&self.state).pending = false;
    }

    /// The workspaces kicked so far.
    pub(crate) fn workspaces(&self) -> Vec<PathBuf> {
        lock(&self.state).workspaces.iter().cloned().collect()
    }

    /// Waits until kicked (true) or `timeout` passes or `stop` is set
    /// (false). Takes the kick.
    pub(crate) fn wait(&self, timeout: Duration, stop: &AtomicBool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = lock(&self.state);
        loop {
            if st.pending {
                st.pending = false;
                return true;
            }
            let now = Instant::now();
            if now >= deadline || stop.load(Ordering::SeqCst) {
                return false;
            }
            let step = (deadline - now).min(Duration::from_millis(100));
            st = self.cv.wait_timeout(st, step).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}
