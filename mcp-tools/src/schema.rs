//! The MCP tool definitions: descriptions and input JSON schemas of each
//! [`Tool`], and the list a server shell serves.

use serde_json::{json, Value};

use crate::tool::Tool;

/// One tool as the MCP server lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    /// The tool name.
    pub name: &'static str,
    /// What it does.
    pub description: &'static str,
    /// The JSON schema of its arguments (draft 2020-12): every property has
    /// a `description`, and an optional one its `default`.
    pub input_schema: Value,
    /// The JSON schema of its result, the `structuredContent` object
    /// (MCP 2025-06-18 `outputSchema`; draft 2020-12). Results may carry
    /// members beyond those listed.
    pub output_schema: Value,
}

/// A string property.
fn string(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

/// The four tools of the contract's section 3, in its order.
pub fn tool_specs() -> Vec<ToolSpec> {
    Tool::ALL
        .into_iter()
        .map(|t| ToolSpec {
            name: t.name(),
            description: t.description(),
            input_schema: t.input_schema(),
            output_schema: t.output_schema(),
        })
        .collect()
}

/// What `tool` does ([`Tool::description`]).
pub(crate) fn description(tool: Tool) -> &'static str {
    match tool {
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

/// The JSON schema of `tool`'s arguments ([`Tool::input_schema`]).
pub(crate) fn input_schema(tool: Tool) -> Value {
    let all_or_list = |what: &str| {
        json!({"description": what, "anyOf": [
            {"type": "string", "enum": ["all"], "description": "Everything allowed"},
            {"type": "array", "items": {"type": "string", "description": "One entry"}, "description": "Only these"}]})
    };
    let thread_id = string("The thread_id that Initialize returned");
    match tool {
        Tool::Initialize => json!({
            "type": "object",
            "properties": {
                "any_workspace_path": string("Absolute path of an existing directory: the workspace. Its \
                    canonical form is returned as workspace_root."),
                "thread_id": {"type": "string", "default": "",
                    "description": "A thread_id from an earlier Initialize, to re-attach to its session \
                        (reattached: true in the result); empty or absent starts a new thread"},
                "mode_name": {"type": "string", "enum": ["wcgw", "architect", "code_writer"], "default": "wcgw",
                    "description": "Shell mode: wcgw allows everything; architect is read-only (every \
                        write, command and release is refused with policy_denied); code_writer allows the \
                        writes and commands of code_writer_config"},
                "code_writer_config": {
                    "type": "object",
                    "description": "Only with mode_name code_writer (required there): what may be written \
                        and run",
                    "properties": {
                        "allowed_globs": all_or_list("Glob patterns a written or released path must match, \
                            or \"all\""),
                        "allowed_commands": all_or_list("Commands BashCommand may run (exact text), or \
                            \"all\"")
                    },
                    "required": ["allowed_globs", "allowed_commands"],
                    "additionalProperties": false
                },
                "type": string("winx's call type (first_call, user_asked_mode_change, reset_shell, \
                    user_asked_change_workspace); echoed in the result, nothing else. Absent by default: \
                    nothing echoed"),
                "initial_files_to_read": {"type": "array", "items": string("An absolute path"),
                    "description": "winx's files to read with the call: accepted, not read (use ReadFiles). Absent by \
                        default: nothing"},
                "task_id_to_resume": string("winx's task to resume: accepted, nothing is resumed. Absent by \
                    default: nothing")
            },
            "required": ["any_workspace_path"],
            "additionalProperties": false
        }),
        Tool::ReadFiles => json!({
            "type": "object",
            "properties": {
                "thread_id": thread_id,
                "file_paths": {"type": "array",
                    "items": string("An absolute path"),
                    "description": "Absolute paths of the files to read, in the order of the result"}
            },
            "required": ["thread_id", "file_paths"],
            "additionalProperties": false
        }),
        Tool::EditFiles => json!({
            "type": "object",
            "properties": {
                "thread_id": thread_id,
                "workspace_root": string("Exactly the workspace_root that Initialize returned"),
                "operation": {"type": "string", "enum": ["release_temporary", "edit"], "default": "edit",
                    "description": "release_temporary to release helpers (every entry then has mode \
                        release_temporary); edit (the default) to write files"},
                "files": {
                    "type": "array",
                    "description": "The files, 1 to 100 unique exact absolute paths for a release",
                    "items": {
                        "type": "object",
                        "description": "One file",
                        "properties": {
                            "file_path": string("Exact absolute path of the file"),
                            "mode": {"type": "string", "enum": ["release_temporary", "replace"],
                                "description": "replace: write content as the whole file; \
                                    release_temporary: release this helper (no default: always given)"},
                            "expected_revision": string("Release only (required there): the revision \
                                ReadFiles returned for this file, sha256:<64 hex>"),
                            "artifact_generation": string("Release only (required there): \
                                temporary_artifact.artifact_generation from ReadFiles, copied verbatim"),
                            "content": string("Replace only (required there): the whole new content")
                        },
                        "required": ["file_path", "mode"],
                        "additionalProperties": false
                    }
                },
                "verify_command": string("Writes only, never with a release: a command to run after every \
                    file was written; its result is returned as verification. Absent by default: nothing \
                    runs")
            },
            "required": ["thread_id", "workspace_root", "files"],
            "additionalProperties": false
        }),
        Tool::BashCommand => json!({
            "type": "object",
            "properties": {
                "thread_id": thread_id,
                "action_json": {"type": ["object", "string"],
                    "description": "winx's shape: {\"type\": \"command\" | \"status_check\" | \"send_text\" | \
                        \"send_specials\" | \"send_ascii\" | \"screen\", ...that action's flat fields} (the \
                        type may be left out when one action field says it; status_check: true and screen: \
                        true are accepted; the object may come as a JSON string); instead of the flat fields. \
                        Absent by default: the flat fields say the action"},
                "type": string("With the flat fields: the action's name, as winx's objects carry it; alone, \
                    status_check or screen. Absent by default: the flat fields say the action"),
                "command": string("The command, typed into the thread's shell whole however long (refused \
                    with execution_active while the shell is busy); required unless another action is given"),
                "wait_for_seconds": {"type": "number", "minimum": 0,
                    "default": crate::wire::DEFAULT_WAIT_SECONDS,
                    "description": "How long to wait for the command to be back at the prompt before returning \
                        status running with the output so far (every action; at most 600)"},
                "is_background": {"type": "boolean", "default": false,
                    "description": "Run the command in a shell on a PTY of its own; its command_id is its \
                        bg_command_id"},
                "status_check": {"type": "boolean", "default": false,
                    "description": "What is new in the thread's shell (or bg_command_id's, or command_id's \
                        whole output), and the exit code once back at the prompt"},
                "command_id": string("With status_check: one command's whole output and state"),
                "bg_command_id": string("The background shell an action is for. Absent by default: the \
                    thread's own shell"),
                "send_text": string("Text for the program running in the foreground (refused at an idle \
                    prompt). Absent by default"),
                "send_specials": {"type": "array", "items": {"type": "string", "enum": ["Enter", "Tab", "Escape",
                    "Key-up", "Key-down", "Key-left", "Key-right", "Ctrl-c", "Ctrl-d", "Ctrl-z"]},
                    "description": "Keys for the program running in the foreground. Absent by default"},
                "send_ascii": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 255},
                    "description": "Bytes for the program running in the foreground. Absent by default"},
                "submit": {"type": "boolean", "default": false,
                    "description": "With send_text, send_specials or send_ascii: append Enter"},
                "screen": {"type": "boolean", "default": false,
                    "description": "Return the terminal as rendered now, ANSI stripped"},
                "lines": {"type": "integer", "minimum": 1,
                    "description": "Only with screen: its last rows. Absent by default: every row"}
            },
            "required": ["thread_id"],
            "additionalProperties": false
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_tools() {
        let names: Vec<_> = tool_specs().iter().map(|t| t.name).collect();
        assert_eq!(names, ["Initialize", "ReadFiles", "EditFiles", "BashCommand"]);
        assert!(tool_specs().iter().all(|t| t.input_schema["type"] == "object"));
        assert!(tool_specs().iter().all(|t| t.output_schema["type"] == "object"));
    }

    /// Every property of `schema` (inputs and outputs, nested ones and
    /// array items included): its path, when it has no description.
    fn undescribed(schema: &Value, path: &str, out: &mut Vec<String>) {
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                let p = format!("{path}.{k}");
                if v.get("description").and_then(Value::as_str).is_none_or(str::is_empty) {
                    out.push(p.clone());
                }
                undescribed(v, &p, out);
            }
        }
        if let Some(items) = schema.get("items") {
            undescribed(items, &format!("{path}[]"), out);
        }
        for key in ["anyOf", "oneOf"] {
            for (i, alt) in schema.get(key).and_then(Value::as_array).into_iter().flatten().enumerate() {
                undescribed(alt, &format!("{path}|{i}"), out);
            }
        }
    }

    #[test]
    fn every_property_has_a_description() {
        let mut missing = Vec::new();
        for t in tool_specs() {
            undescribed(&t.input_schema, &format!("{}.input", t.name), &mut missing);
            undescribed(&t.output_schema, &format!("{}.output", t.name), &mut missing);
        }
        assert!(missing.is_empty(), "properties without a description: {missing:?}");
    }

    #[test]
    fn optional_inputs_with_a_default_say_it() {
        let specs = tool_specs();
        let prop =
            |tool: &str, p: &str| specs.iter().find(|t| t.name == tool).unwrap().input_schema["properties"][p].clone();
        assert_eq!(prop("BashCommand", "wait_for_seconds")["default"], json!(5.0));
        assert_eq!(prop("BashCommand", "is_background")["default"], json!(false));
        assert_eq!(prop("BashCommand", "status_check")["default"], json!(false));
        assert_eq!(prop("Initialize", "mode_name")["default"], json!("wcgw"));
        assert_eq!(prop("Initialize", "thread_id")["default"], json!(""));
        assert_eq!(prop("EditFiles", "operation")["default"], json!("edit"));
        // Every optional scalar input names its default, or says in its
        // description what its absence means.
        for t in &specs {
            let required: Vec<&str> =
                t.input_schema["required"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
            for (k, v) in t.input_schema["properties"].as_object().unwrap() {
                let optional = !required.contains(&k.as_str());
                let says = v.get("default").is_some()
                    || v["description"].as_str().is_some_and(|d| {
                        ["Absent by default", "required unless", "Only with", "With status_check"]
                            .iter()
                            .any(|w| d.contains(w))
                    });
                assert!(!optional || says, "{}.{k} is optional and says nothing of its default", t.name);
            }
        }
    }
}
