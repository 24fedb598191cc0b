//! Off Linux no command starts, so there is no monitor to be: a host calls
//! [`enter`] first thing in `main` on every platform, and here it returns.

use std::path::PathBuf;

/// Returns at once: off Linux this program is never a monitor.
pub fn enter() {}

/// `None`: no monitor can be started off Linux.
pub fn program() -> Option<PathBuf> {
    None
}
