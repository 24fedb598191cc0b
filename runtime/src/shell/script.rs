//! What the runtime makes of a [`ShellProgram`] when it starts it: the
//! command line and the hook file (`program.rs` is the builder, every
//! platform's).

use std::ffi::OsString;
use std::io;
use std::path::Path;

use super::hook::{OUTPUT_END, OUTPUT_START};
use super::program::ShellProgram;
use crate::spawn::{not_found, on_path};

impl ShellProgram {
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
