//! The MCP tool definitions: names, descriptions and input JSON schemas,
//! for the server shell to list.

use serde_json::{json, Value};

/// One tool as the MCP server lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    /// The tool name.
    pub name: &'static str,
    /// What it does.
    pub description: &'static str,
    /// The JSON schema of its arguments.
    pub input_schema: Value,
}

/// The four tools of the contract's section 3.
pub fn tool_specs() -> Vec<ToolSpec> {
    let all_or_list = json!({"anyOf": [{"type": "string", "enum": ["all"]},
        {"type": "array", "items": {"type": "string"}}]});
    vec![
        ToolSpec {
            name: "Initialize",
            description: "Initialise or re-attach a thread in a workspace. Returns thread_id, workspace_root, the \
                          session's temporary_artifact_dir, whether temporary_release is available, the helper \
                          quotas, and a usage audit (nothing is deleted).",
            input_schema: json!({
                "type": "object",
                "properties": {
                    "any_workspace_path": {"type": "string", "description": "Absolute path of an existing directory"},
                    "thread_id": {"type": "string", "description": "Reuse to re-attach; empty or absent for a new one"},
                    "mode_name": {"type": "string", "enum": ["wcgw", "architect", "code_writer"]},
                    "code_writer_config": {
                        "type": "object",
                        "properties": {"allowed_globs": all_or_list, "allowed_commands": all_or_list},
                        "required": ["allowed_globs", "allowed_commands"],
                        "additionalProperties": false
                    },
                    "type": {"type": "string"}
                },
                "required": ["any_workspace_path"],
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: "ReadFiles",
            description: "Read files by absolute path. A helper of this thread's session directory also gets a \
                          temporary_artifact.artifact_generation token to release it with EditFiles.",
            input_schema: json!({
                "type": "object",
                "properties": {
                    "thread_id": {"type": "string"},
                    "file_paths": {"type": "array", "items": {"type": "string"}}
                },
                "required": ["thread_id", "file_paths"],
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: "EditFiles",
            description: "Write whole files (mode \"replace\" with content), or release helpers of this thread's \
                          session (operation \"release_temporary\"; every entry mode \"release_temporary\" with the \
                          expected_revision and artifact_generation from ReadFiles).",
            input_schema: json!({
                "type": "object",
                "properties": {
                    "thread_id": {"type": "string"},
                    "workspace_root": {"type": "string"},
                    "operation": {"type": "string", "enum": ["release_temporary", "edit"]},
                    "files": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "file_path": {"type": "string"},
                                "mode": {"type": "string", "enum": ["release_temporary", "replace"]},
                                "expected_revision": {"type": "string"},
                                "artifact_generation": {"type": "string"},
                                "content": {"type": "string"}
                            },
                            "required": ["file_path", "mode"],
                            "additionalProperties": false
                        }
                    },
                    "verify_command": {"type": "string"}
                },
                "required": ["thread_id", "workspace_root", "files"],
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: "BashCommand",
            description: "Run a shell command in the workspace (WINX_TEMP_DIR is the session directory), or check \
                          on one with status_check and command_id.",
            input_schema: json!({
                "type": "object",
                "properties": {
                    "thread_id": {"type": "string"},
                    "command": {"type": "string"},
                    "wait_for_seconds": {"type": "number", "minimum": 0},
                    "is_background": {"type": "boolean"},
                    "status_check": {"type": "boolean"},
                    "command_id": {"type": "string"}
                },
                "required": ["thread_id"],
                "additionalProperties": false
            }),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_tools() {
        let names: Vec<_> = tool_specs().iter().map(|t| t.name).collect();
        assert_eq!(names, ["Initialize", "ReadFiles", "EditFiles", "BashCommand"]);
        assert!(tool_specs().iter().all(|t| t.input_schema["type"] == "object"));
    }
}
