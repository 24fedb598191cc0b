//! The output schemas of the four tools (MCP 2025-06-18 `outputSchema`):
//! the `structuredContent` object of each result, refusals included, as
//! JSON Schema draft 2020-12.
//!
//! Only `status` is required: a refusal carries `status`, `errorCode` and
//! `message` and none of the success members. No schema closes its object
//! (`additionalProperties` is left open): a result may carry members beyond
//! those listed (a newer frontend's, or diagnostics such as `guardian`),
//! and a client that validates results must not reject them.
//!
//! No schema names its dialect (`$schema`): they use only keywords that
//! draft 2020-12 (MCP's default dialect) and draft-07 read alike, so a
//! client validating with either (the official TypeScript SDK uses a
//! draft-07 Ajv; Python's SDK `jsonschema`) reads them the same.

use serde_json::{json, Value};

fn described(kind: Value, description: &str) -> Value {
    let mut v = kind;
    v["description"] = json!(description);
    v
}

fn string(description: &str) -> Value {
    described(json!({"type": "string"}), description)
}

fn integer(description: &str) -> Value {
    described(json!({"type": "integer", "minimum": 0}), description)
}

fn boolean(description: &str) -> Value {
    described(json!({"type": "boolean"}), description)
}

fn nullable_string(description: &str) -> Value {
    described(json!({"type": ["string", "null"]}), description)
}

/// The members every result may have; `status` is required.
fn result(description: &str, status_help: &str, mut properties: Value) -> Value {
    properties["status"] = json!({"type": "string",
        "enum": ["completed", "partial", "running", "denied", "invalid_input", "failed"],
        "description": status_help});
    properties["errorCode"] = string("Why the request as a whole was refused or failed: a reason code of the contract");
    properties["message"] = string("A human-readable explanation of a refusal or a note");
    json!({
        "type": "object",
        "description": description,
        "properties": properties,
        "required": ["status"]
    })
}

/// `Initialize`.
pub(crate) fn initialize() -> Value {
    result(
        "The initialised thread, or a refusal (status denied or invalid_input)",
        "completed, or denied / invalid_input when the workspace cannot be used",
        json!({
            "thread_id": string("The thread: pass it to every other tool"),
            "workspace_root": string("The canonical workspace: EditFiles takes exactly this"),
            "mode_name": string("The shell mode in force"),
            "temporary_artifact_dir": string("This thread's session directory (WINX_TEMP_DIR of its commands): \
                helpers written here can be released"),
            "temporary_release": {
                "type": "object",
                "description": "Whether helpers can be released in this session",
                "properties": {
                    "available": boolean("True when a guardian that can release owns the session and the mode \
                        allows releases"),
                    "reason": nullable_string("Why not: owner_unavailable, owner_unsupported, embedded_runtime, \
                        unsupported_platform, policy_denied (architect mode); null when available"),
                    "detail": string("With owner_unavailable: one line naming the socket tried, the cause, and \
                        what to do")
                },
                "required": ["available", "reason"]
            },
            "temporary_artifact_max_files": integer("Most helpers per session (128)"),
            "temporary_artifact_max_session_bytes": integer("Most helper bytes per session (64 MiB)"),
            "temporary_artifact_max_file_bytes": integer("Most bytes per helper (32 MiB)"),
            "temporary_artifact_max_bytes": integer("Most helper bytes per workspace (256 MiB)"),
            "temporary_artifact_stale_pruned_files": integer("Always 0: nothing is pruned by age"),
            "deletion_deferred": string("runtime_protection_unknown: age-based deletion is deferred"),
            "stale_audit": {"type": ["object", "null"],
                "description": "Helper usage per session of this workspace (deletes nothing)"},
            "reattached": boolean("True when thread_id named a thread this frontend process had already \
                initialised (its session and policy replaced); false for a new thread, and for a known \
                thread_id after a frontend restart"),
            "guardian": {"type": ["object", "null"],
                "description": "The guardian found at Initialize (socket, version, instance, capabilities); \
                    null without one"},
            "liveness": nullable_string("How the guardian tells that a command still runs: cgroup or proc; \
                null without a guardian"),
            "type": string("The type argument, echoed")
        }),
    )
}

/// `ReadFiles`.
pub(crate) fn read_files() -> Value {
    result(
        "The files read, in request order, and those that could not be read",
        "completed (all read), partial (some failed), failed (none read), or invalid_input / denied for \
         the whole request",
        json!({
            "files": {
                "type": "array",
                "description": "One entry per readable file, in request order",
                "items": {
                    "type": "object",
                    "description": "One file",
                    "properties": {
                        "file_path": string("The path as requested"),
                        "revision": string("sha256:<64 hex> of the file's bytes: EditFiles' expected_revision"),
                        "size": integer("Size in bytes"),
                        "content": nullable_string("The text (the first 256 KiB when truncated); null when \
                            binary"),
                        "binary": boolean("True when the bytes are not UTF-8 text or hold a NUL"),
                        "truncated": boolean("True when content holds only the first 256 KiB"),
                        "temporary_artifact": {
                            "type": "object",
                            "description": "Only for a helper of this thread's session",
                            "properties": {
                                "artifact_generation": string("The token to release exactly this file with \
                                    EditFiles (artifact_generation); valid in this frontend process only"),
                                "in_use": {"type": "null", "description": "Unknown at read time (always null)"},
                                "releasable": {"type": "null",
                                    "description": "Unknown at read time (always null): checked at release"}
                            }
                        }
                    }
                }
            },
            "failed_files": {
                "type": "array",
                "description": "One entry per file that could not be read",
                "items": {
                    "type": "object",
                    "description": "One failure",
                    "properties": {
                        "file_path": string("The path as requested"),
                        "errorCode": string("Why: a reason code (not_found, symlink, hardlink, \
                            not_regular_file, read_required, io_error, ...)"),
                        "message": string("More about it, when there is more")
                    }
                }
            }
        }),
    )
}

/// `EditFiles`.
pub(crate) fn edit_files() -> Value {
    result(
        "The outcome of a release or of whole-file writes, one entry per requested file in request order",
        "completed (every target released or written), partial (the filesystem was touched, not every \
         target), denied / invalid_input (nothing was touched), failed",
        json!({
            "operation": string("release_temporary or edit"),
            "receipt_id": string("The durable receipt of a release that touched the filesystem"),
            "replayed": boolean("True when this is the recorded outcome of the same request replayed: \
                nothing was touched now"),
            "bytes_reclaimed": integer("Bytes the release freed (allocated blocks x 512)"),
            "touched": boolean("With failed: whether anything on disk was touched"),
            "outcome_unknown": boolean("True when the guardian's reply was lost after the release was sent: \
                inspect the targets; the release is never re-sent"),
            "receipt_error": string("Why the receipt of a release that touched files could not be written"),
            "verification": {"type": "object",
                "description": "The result of verify_command (a BashCommand result), after writes"},
            "files": {
                "type": "array",
                "description": "One entry per requested file, in request order",
                "items": {
                    "type": "object",
                    "description": "One target",
                    "properties": {
                        "file_path": string("The path as requested"),
                        "outcome": string("released, restored, preserved, denied, not_attempted, failed; \
                            written for a write"),
                        "reason": nullable_string("A reason code, or null"),
                        "bytes_reclaimed": integer("Bytes this target's removal freed"),
                        "quarantine_path": string("Only for preserved: where the file now is")
                    }
                }
            }
        }),
    )
}

/// `BashCommand`.
pub(crate) fn bash_command() -> Value {
    result(
        "The command's state and output, or a refusal",
        "completed (the command ended), running (it still runs: check again with status_check), or \
         denied / invalid_input / failed",
        json!({
            "command_id": string("The command: pass it with status_check"),
            "exit_code": {"type": ["integer", "null"], "description": "Its exit status; null while running"},
            "output": {"type": ["string", "null"], "description": "Its output (stdout and stderr) so far"},
            "output_truncated": boolean("True when output beyond the inline limit was dropped into \
                W/.winx/scratch"),
            "queued": boolean("True when it waits behind a running command of the thread"),
            "leader_exited": boolean("True when its own process ended while processes it started still run"),
            "leader_exit_code": {"type": ["integer", "null"], "description": "The exit status of its own \
                process, when leader_exited"},
            "adopted": boolean("True when it was started by an earlier guardian"),
            "still_running": {"type": "array", "items": {"type": "integer"},
                "description": "Processes the command left behind (jobs, daemons), by pid: they keep releases \
                    refused; empty while it runs"},
            "bg_command_id": string("The background shell of an is_background command: pass it to status_check, \
                send_text, send_specials, send_ascii or screen"),
            "screen": string("With screen: the terminal as rendered now, ANSI stripped"),
            "shell_busy": string("Why the thread's shell, back at its prompt, still keeps releases refused by \
                itself: a trap or TMOUT of its own (remove it: trap - SIGNAL, unset TMOUT), an exec'd program"),
            "output_path": string("Where the whole output was dropped (W/.winx/scratch) when too long to inline")
        }),
    )
}
