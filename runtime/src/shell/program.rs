//! What a shell runs: the program, its arguments and its rc file, chosen
//! by the host; the engine's prompt hook chained with the host's own.
//!
//! [`ShellProgram::bash`] is the engine's default: `bash --noprofile
//! --rcfile <hook> -i`, the hook alone, `PS1='$ '`. A host chooses
//! instead:
//! - [`ShellProgram::rc`]: the user's rc file (`~/.bashrc`), sourced by the
//!   hook file before the hook is installed, with the prompt it sets;
//! - [`ShellProgram::restricted`]: `bash -r` (restrictions apply after the
//!   rc files, so the hook is installed as usual; its `.` refuses a path
//!   with a slash, so a command is typed as `eval "$(< 'FILE')"`,
//!   [`super::CommandRecord::typed_line`]);
//! - [`ShellProgram::prompt_command`]: the host's own prompt command
//!   (its prompt detection), chained after the rc's;
//! - [`ShellProgram::ps1`]: the prompt string, or none to keep the rc's;
//! - [`ShellProgram::program`] and [`ShellProgram::arg`]: another `bash`
//!   binary, more arguments (`-o posix`, `--noediting` is refused by the
//!   idle rule, which waits for the line editor).
//!
//! The hook's protocol, for a host that keeps its own prompt detection:
//! before every prompt bash runs `PROMPT_COMMAND`, which the hook file sets
//! to the read-only function `__winx_release_prompt`. It keeps the last
//! command's status, runs the chained commands (the rc's `PROMPT_COMMAND`,
//! then the host's) with `$?` still that status, then reports to the
//! engine and waits for its acknowledgement, prints the end marker
//! ([`super::OUTPUT_END`]) and returns the status. `PS0`, printed when a
//! command line is accepted, starts with the start marker
//! ([`super::OUTPUT_START`]) followed by any `PS0` the rc set. The chained
//! commands run *before* the report: anything they start runs while the
//! shell is not yet at its prompt, so it is counted; their output comes
//! before the end marker. Reassigning `PROMPT_COMMAND` later (a command the
//! agent types) replaces the hook: the shell then never reports a prompt
//! again and stays busy (fail closed), as before.
//!
//! The rc runs inside the shell's execution: what it starts is counted,
//! and what it leaves set is judged like anything typed (a signal trap
//! with an action or a `TMOUT` keeps the shell busy; a `DEBUG` trap, as
//! bash-preexec installs for prompt frameworks, runs only before commands
//! the shell runs and does not). An rc that `exec`s another program
//! (`exec zsh`) leaves a shell that never reports a prompt: releases are
//! refused (fail closed) rather than count a shell the hook cannot see.
//!
//! Only bash is supported: the idle rule reads bash's line editor wait,
//! and the hook is bash. A host that runs another shell (zsh) itself
//! answers releases of that thread with
//! [`winx_release_engine::Unsupported`].
//!
//! # References
//! - [bash(1), `PROMPT_COMMAND`, `PS0`, `--rcfile`, restricted shell](https://www.gnu.org/software/bash/manual/bash.html#The-Restricted-Shell)

use std::ffi::OsString;
use std::path::PathBuf;

/// The program a shell runs and how (see the module docs).
#[derive(Clone, Debug)]
#[non_exhaustive]
#[cfg_attr(not(all(target_os = "linux", not(winx_foreign))), allow(dead_code))] // read by `script.rs`
pub struct ShellProgram {
    pub(super) program: Option<PathBuf>,
    pub(super) restricted: bool,
    pub(super) rc: Option<PathBuf>,
    pub(super) prompt_command: Option<String>,
    pub(super) ps1: Option<String>,
    pub(super) args: Vec<OsString>,
}

impl Default for ShellProgram {
    fn default() -> ShellProgram {
        ShellProgram::bash()
    }
}

impl ShellProgram {
    /// `bash` found on `PATH`, no rc file but the hook, `PS1='$ '`.
    pub fn bash() -> ShellProgram {
        ShellProgram {
            program: None,
            restricted: false,
            rc: None,
            prompt_command: None,
            ps1: Some("$ ".into()),
            args: Vec::new(),
        }
    }

    /// Runs this `bash` binary instead of the one on `PATH`.
    pub fn program(mut self, path: impl Into<PathBuf>) -> ShellProgram {
        self.program = Some(path.into());
        self
    }

    /// A restricted shell (`bash -r`).
    pub fn restricted(mut self) -> ShellProgram {
        self.restricted = true;
        self
    }

    /// Sources `path` (the user's rc file) before the hook is installed,
    /// and keeps the prompt string it sets (no [`ShellProgram::ps1`]
    /// unless one is set after this call). Its `PROMPT_COMMAND` and `PS0`
    /// are chained with the hook's. A file that is missing is skipped.
    pub fn rc(mut self, path: impl Into<PathBuf>) -> ShellProgram {
        self.rc = Some(path.into());
        self.ps1 = None;
        self
    }

    /// The host's own prompt command, run before every prompt after the
    /// rc's, with `$?` the last command's status.
    pub fn prompt_command(mut self, command: impl Into<String>) -> ShellProgram {
        self.prompt_command = Some(command.into());
        self
    }

    /// The prompt string the hook sets; `None` keeps the rc's (or bash's).
    pub fn ps1(mut self, ps1: Option<String>) -> ShellProgram {
        self.ps1 = ps1;
        self
    }

    /// One more argument for bash, before `-i`.
    pub fn arg(mut self, arg: impl Into<OsString>) -> ShellProgram {
        self.args.push(arg.into());
        self
    }
}
