//! The shell's last report, kept in its execution directory
//! (`prompt.json`) so that a runtime that takes the shell over
//! (`runtime/reattach.rs`) knows where it was.

use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::handle::State;

/// The hook's last report, in the shell's execution directory.
pub(crate) const PROMPT_FILE: &str = "prompt.json";

#[derive(Default, Serialize, Deserialize)]
pub(crate) struct Prompt {
    pub(crate) prompts: u64,
    pub(crate) binary: Option<(u64, u64)>,
    pub(crate) held: Vec<String>,
    /// The exit code the last report carried (a command that ended just
    /// before its runtime died is concluded with it).
    #[serde(default)]
    pub(crate) last_exit: Option<i32>,
}

/// Writes what a report left in `st` to `dir/prompt.json` (not durably: a
/// runtime that dies leaves the page cache; a machine that dies, no shell).
pub(crate) fn save_prompt(dir: &Path, st: &State) {
    let p = Prompt { prompts: st.prompts, binary: st.binary, held: st.held.clone(), last_exit: st.last_exit };
    if let Ok(bytes) = serde_json::to_vec(&p) {
        let _ = fs::write(dir.join(PROMPT_FILE), bytes);
    }
}
