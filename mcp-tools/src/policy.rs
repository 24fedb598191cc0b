//! Tool policy of a session's shell mode.
//!
//! - `wcgw`: everything allowed.
//! - `architect`: read-only. Every file mutation (a release included) and
//!   every new command is `policy_denied`; reads and status checks are not.
//! - `code_writer`: a mutated path must match one of `allowed_globs`
//!   (`"all"`: any), matched with [`globset`] against the exact absolute path
//!   and, for a path inside the workspace, against its workspace-relative
//!   form; `*` may cross `/` as in winx's `fnmatch`. The session directory
//!   gets no exemption: a release is an edit. A command may run only when its
//!   trimmed text equals one of `allowed_commands` (`"all"`: any); prefixes
//!   do not count, since shell text after an allowed prefix could do anything.

use std::path::Path;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::wire::{AllOrList, CodeWriterConfig, ModeName};
use winx_release_host::error::FrontendError;

/// The compiled policy of one session.
#[derive(Clone, Debug)]
pub(crate) struct Policy {
    mode: ModeName,
    globs: Option<GlobSet>,
    commands: Option<Vec<String>>,
}

impl Policy {
    /// Compiles the policy of `mode`; `code_writer` without a config allows
    /// everything, as in winx. An invalid glob is `invalid_input`.
    pub(crate) fn new(mode: ModeName, config: Option<&CodeWriterConfig>) -> Result<Policy, FrontendError> {
        let (mut globs, mut commands) = (None, None);
        if let (ModeName::CodeWriter, Some(c)) = (mode, config) {
            if let AllOrList::List(patterns) = &c.allowed_globs {
                let mut b = GlobSetBuilder::new();
                for p in patterns {
                    let g = GlobBuilder::new(p)
                        .literal_separator(false)
                        .build()
                        .map_err(|e| FrontendError::invalid(format!("allowed_globs: {p:?}: {e}")))?;
                    b.add(g);
                }
                globs = Some(b.build().map_err(|e| FrontendError::invalid(format!("allowed_globs: {e}")))?);
            }
            if let AllOrList::List(list) = &c.allowed_commands {
                commands = Some(list.iter().map(|c| c.trim().to_owned()).collect());
            }
        }
        Ok(Policy { mode, globs, commands })
    }

    /// The mode.
    pub(crate) fn mode(&self) -> ModeName {
        self.mode
    }

    /// Whether `path` may be mutated (written or released).
    pub(crate) fn mutation_allowed(&self, workspace: &Path, path: &Path) -> bool {
        match self.mode {
            ModeName::Wcgw => true,
            ModeName::Architect => false,
            ModeName::CodeWriter => match &self.globs {
                None => true,
                Some(set) => set.is_match(path) || path.strip_prefix(workspace).is_ok_and(|rel| set.is_match(rel)),
            },
        }
    }

    /// Whether `command` may be started.
    pub(crate) fn command_allowed(&self, command: &str) -> bool {
        match self.mode {
            ModeName::Wcgw => true,
            ModeName::Architect => false,
            ModeName::CodeWriter => match &self.commands {
                None => true,
                Some(list) => list.iter().any(|c| c == command.trim()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cw(globs: AllOrList, cmds: AllOrList) -> Policy {
        Policy::new(ModeName::CodeWriter, Some(&CodeWriterConfig { allowed_globs: globs, allowed_commands: cmds }))
            .unwrap()
    }

    #[test]
    fn modes() {
        let ws = Path::new("/ws");
        let p = Path::new("/ws/src/a.rs");
        assert!(Policy::new(ModeName::Wcgw, None).unwrap().mutation_allowed(ws, p));
        let arch = Policy::new(ModeName::Architect, None).unwrap();
        assert!(!arch.mutation_allowed(ws, p));
        assert!(!arch.command_allowed("ls"));
        let c =
            cw(AllOrList::List(vec!["src/**".into(), "/abs/*.txt".into()]), AllOrList::List(vec!["make test".into()]));
        assert!(c.mutation_allowed(ws, p));
        assert!(c.mutation_allowed(ws, Path::new("/abs/x/y.txt")));
        assert!(!c.mutation_allowed(ws, Path::new("/ws/.winx/tmp/session-0123456789abcdef/h.py")));
        assert!(c.command_allowed(" make test "));
        assert!(!c.command_allowed("make test; rm -rf /"));
        let all = cw(AllOrList::All, AllOrList::All);
        assert!(all.mutation_allowed(ws, Path::new("/anything")));
        assert!(all.command_allowed("anything"));
        assert!(Policy::new(
            ModeName::CodeWriter,
            Some(&CodeWriterConfig {
                allowed_globs: AllOrList::List(vec!["a[".into()]),
                allowed_commands: AllOrList::All
            })
        )
        .is_err());
    }
}
