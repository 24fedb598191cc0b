//! The four MCP tools of the contract's section 3 as one type: each
//! [`Tool`] carries its name, description, input and output schemas, its
//! MCP annotation hints and how its result's `files` are rendered, so that
//! no other place spells a tool's name.

use serde_json::Value;

/// One tool of the contract's section 3.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tool {
    /// `Initialize`: a thread in a workspace.
    Initialize,
    /// `ReadFiles`: files by absolute path, a helper's token.
    ReadFiles,
    /// `EditFiles`: whole-file writes, or a release of helpers.
    EditFiles,
    /// `BashCommand`: the thread's persistent shell.
    BashCommand,
}

/// The MCP annotation hints of a tool (`ToolAnnotations`; hints only: the
/// frontend enforces its own policy). `None`: the hint is not given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hints {
    /// `readOnlyHint`.
    pub read_only: Option<bool>,
    /// `destructiveHint`.
    pub destructive: Option<bool>,
    /// `idempotentHint`.
    pub idempotent: Option<bool>,
    /// `openWorldHint`.
    pub open_world: Option<bool>,
}

/// How the text rendering of a tool's result writes each `files` entry.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilesBlock {
    /// A read file: its fields, then its content in a fence.
    Read,
    /// Every field on a line of its own.
    Fields,
}

impl Tool {
    /// The tools, in the contract's order.
    pub const ALL: [Tool; 4] = [Tool::Initialize, Tool::ReadFiles, Tool::EditFiles, Tool::BashCommand];

    /// The tool's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Initialize => "Initialize",
            Tool::ReadFiles => "ReadFiles",
            Tool::EditFiles => "EditFiles",
            Tool::BashCommand => "BashCommand",
        }
    }

    /// The tool named `name`.
    pub fn from_name(name: &str) -> Option<Tool> {
        Tool::ALL.into_iter().find(|t| t.name() == name)
    }

    /// What it does, as `tools/list` says.
    pub fn description(self) -> &'static str {
        match self {
            Tool::Initialize => {
                "Initialise or re-attach a thread in a workspace. Returns thread_id, workspace_root, the \
                          session's temporary_artifact_dir, whether temporary_release is available, the helper \
                          quotas, and a usage audit (nothing is deleted)."
            }
            Tool::ReadFiles => {
                "Read files by absolute path. A helper of this thread's session directory also gets a \
                          temporary_artifact.artifact_generation token to release it with EditFiles."
            }
            Tool::EditFiles => {
                "Write whole files (mode \"replace\" with content), or release helpers of this thread's \
                          session (operation \"release_temporary\"; every entry mode \"release_temporary\" with the \
                          expected_revision and artifact_generation from ReadFiles)."
            }
            Tool::BashCommand => {
                "Run a command in this thread's persistent shell (bash on a PTY: cd, export and functions \
                          persist; WINX_TEMP_DIR is the session directory), answer a program waiting for input \
                          (send_text, send_specials, send_ascii), check on it (status_check) or look at its terminal \
                          (screen). Flat arguments, or winx's action_json with a type."
            }
        }
    }

    /// The JSON schema of its arguments (draft 2020-12): every property has
    /// a `description`, and an optional one its `default`.
    pub fn input_schema(self) -> Value {
        match self {
            Tool::Initialize => crate::input_schema::initialize(),
            Tool::ReadFiles => crate::input_schema::read_files(),
            Tool::EditFiles => crate::input_schema::edit_files(),
            Tool::BashCommand => crate::input_schema::bash_command(),
        }
    }

    /// The JSON schema of its result, the `structuredContent` object.
    pub fn output_schema(self) -> Value {
        match self {
            Tool::Initialize => crate::output_schema::initialize(),
            Tool::ReadFiles => crate::output_schema::read_files(),
            Tool::EditFiles => crate::output_schema::edit_files(),
            Tool::BashCommand => crate::output_schema::bash_command(),
        }
    }

    /// Its MCP annotation hints.
    pub fn hints(self) -> Hints {
        let (t, f) = (Some(true), Some(false));
        match self {
            Tool::ReadFiles => Hints { read_only: t, open_world: f, ..Hints::default() },
            Tool::Initialize => Hints { read_only: f, destructive: f, idempotent: t, open_world: f },
            Tool::EditFiles => Hints { read_only: f, destructive: t, idempotent: t, open_world: f },
            Tool::BashCommand => Hints { read_only: f, destructive: t, ..Hints::default() },
        }
    }

    /// How the text rendering writes each entry of its result's `files`.
    pub fn files_block(self) -> FilesBlock {
        match self {
            Tool::ReadFiles => FilesBlock::Read,
            _ => FilesBlock::Fields,
        }
    }
}

impl std::fmt::Display for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for t in Tool::ALL {
            assert_eq!(Tool::from_name(t.name()), Some(t));
        }
        assert_eq!(Tool::from_name("readfiles"), None);
    }
}
