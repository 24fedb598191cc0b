//! The input JSON schemas of the four tools (draft 2020-12): every
//! property has a `description`, and an optional one its `default`.

use serde_json::{json, Value};

/// A string property.
fn string(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

/// `"all"`, or a list of entries.
fn all_or_list(what: &str) -> Value {
    json!({"description": what, "anyOf": [
        {"type": "string", "enum": ["all"], "description": "Everything allowed"},
        {"type": "array", "items": {"type": "string", "description": "One entry"}, "description": "Only these"}]})
}

/// The `thread_id` property.
fn thread_id() -> Value {
    string("The thread_id that Initialize returned")
}

/// `Initialize`'s arguments.
pub(crate) fn initialize() -> Value {
    json!({
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
    })
}

/// `ReadFiles`'s arguments.
pub(crate) fn read_files() -> Value {
    json!({
        "type": "object",
        "properties": {
            "thread_id": thread_id(),
            "file_paths": {"type": "array",
                "items": string("An absolute path"),
                "description": "Absolute paths of the files to read, in the order of the result"}
        },
        "required": ["thread_id", "file_paths"],
        "additionalProperties": false
    })
}

/// `EditFiles`'s arguments.
pub(crate) fn edit_files() -> Value {
    json!({
        "type": "object",
        "properties": {
            "thread_id": thread_id(),
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
    })
}

/// `BashCommand`'s arguments.
pub(crate) fn bash_command() -> Value {
    json!({
        "type": "object",
        "properties": {
            "thread_id": thread_id(),
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
    })
}
