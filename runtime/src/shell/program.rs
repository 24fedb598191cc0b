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
use std::io;
use std::path::{Path, PathBuf};

use crate::spawn::{not_found, on_path};

use super::hook::{OUTPUT_END, OUTPUT_START};

/// The program a shell runs and how (see the module docs).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ShellProgram {
    program: Option<PathBuf>,
    restricted: bool,
    rc: Option<PathBuf>,
    prompt_command: Option<String>,
    ps1: Option<String>,
    args: Vec<OsString>,
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

    /// Whether it is a restricted shell.
    pub(crate) fn is_restricted(&self) -> bool {
        self.restricted
    }

    /// The command line: the program, then its arguments with the hook
    /// file as its rc file.
    pub(crate) fn argv(&self, hook: &Path) -> io::Result<Vec<OsString>> {
        let program = match &self.program {
            Some(p) => p.clone(),
            None => on_path("bash").ok_or_else(|| not_found("bash"))?,
        };
        // Long options first: bash refuses them after a short one.
        let mut argv: Vec<OsString> = vec![program.into(), "--noprofile".into(), "--rcfile".into(), hook.into()];
        if self.restricted {
            argv.push("-r".into());
        }
        argv.extend(self.args.iter().cloned());
        argv.push("-i".into());
        Ok(argv)
    }

    /// How the execution's record names the shell (a restricted one with
    /// ` -r -i`, which a runtime that takes the shell over reads back).
    pub(crate) fn describe(&self) -> String {
        let r = if self.restricted { " -r" } else { "" };
        let rc = self.rc.as_ref().map(|p| format!(", rc {}", p.display())).unwrap_or_default();
        format!("bash --noprofile --rcfile hook.sh{r} -i (the shell of this thread{rc})")
    }

    /// The hook file's text.
    pub(crate) fn rc_script(&self) -> String {
        let mut s = format!(
            r#"# Installed by winx-release: the prompt hook of this shell (docs/DESIGN.md, "Shells").
__winx_release_status() {{ return "$1"; }}
__winx_release_prompt() {{
  local rc=$?
  local __winx_release_c
  for __winx_release_c in "${{__winx_release_chain[@]}}"; do __winx_release_status "$rc"; eval "$__winx_release_c"; done
  [[ -o emacs || -o vi ]] || set -o emacs
  {{ builtin trap -p; [[ ${{TMOUT-}} != *[1-9]* ]] || printf 'TMOUT %s\n' "${{TMOUT//[^0-9.]/}}"; printf 'P %s\n' "$rc"; }} >&3 && IFS= read -r -u 3 __winx_release_ack
  printf '\033]{end};%s\007' "$__winx_release_ack"
  return "$rc"
}}
readonly -f __winx_release_status __winx_release_prompt
"#,
            end = OUTPUT_END,
        );
        s += "__winx_release_chain=()\n";
        let mut ps0 = "";
        if let Some(rc) = &self.rc {
            s += &format!("[[ ! -r {q} ]] || . {q}\n", q = quote(&rc.to_string_lossy()));
            // The rc's prompt command (a string, or bash 5.1's array) and
            // `PS0` are chained; without an rc, what the environment held
            // is replaced, as it always was.
            s += "[[ -z ${PROMPT_COMMAND[*]-} ]] || __winx_release_chain=(\"${PROMPT_COMMAND[@]}\")\n";
            ps0 = "\"${PS0-}\"";
        }
        if let Some(pc) = &self.prompt_command {
            s += &format!("__winx_release_chain+=({})\n", quote(pc));
        }
        s += "unset PROMPT_COMMAND\nPROMPT_COMMAND=__winx_release_prompt\n";
        s += &format!("PS0=$'\\033]{OUTPUT_START}\\007'{ps0}\n");
        if let Some(ps1) = &self.ps1 {
            s += &format!("PS1={}\n", quote(ps1));
        }
        s += "PS2='> '\nHISTFILE=\nbind 'set enable-bracketed-paste off' 2>/dev/null\n";
        s
    }
}

/// `text` as one single-quoted word of bash.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_the_engines_shell() {
        let p = ShellProgram::bash().program("/bin/bash");
        let argv = p.argv(Path::new("/d/hook.sh")).unwrap();
        assert_eq!(argv, ["/bin/bash", "--noprofile", "--rcfile", "/d/hook.sh", "-i"].map(OsString::from));
        let s = p.rc_script();
        assert!(s.contains("PS1='$ '\n"), "{s}");
        assert!(!s.contains(". '"), "{s}");
    }

    #[test]
    fn restricted_rc_and_the_hosts_prompt_command() {
        let p =
            ShellProgram::bash().program("/bin/bash").restricted().rc("/home/u/.bashrc").prompt_command("echo 'mark'");
        let argv = p.argv(Path::new("/d/hook.sh")).unwrap();
        assert_eq!(argv, ["/bin/bash", "--noprofile", "--rcfile", "/d/hook.sh", "-r", "-i"].map(OsString::from));
        let s = p.rc_script();
        assert!(s.contains("[[ ! -r '/home/u/.bashrc' ]] || . '/home/u/.bashrc'\n"), "{s}");
        assert!(s.contains(r"__winx_release_chain+=('echo '\''mark'\''')"), "{s}");
        assert!(!s.contains("PS1="), "the rc's prompt is kept: {s}");
        // The hook is defined read-only before the rc runs.
        assert!(s.find("readonly -f").unwrap() < s.find(". '/home").unwrap());
    }
}
