//! Tool arguments as they arrive on the wire, and their shape validation.
//!
//! Every argument object is parsed from a [`serde_json::Value`] with unknown
//! fields refused, so that a malformed shape is an `invalid_input` refusal and
//! never a panic.
//!
//! `EditFiles` is classified by [`parse_edit_files`] into a release or a
//! whole-file write:
//!
//! - a request is a **release** when `operation` is `"release_temporary"` or
//!   when any entry has `mode: "release_temporary"` (an `operation` may be
//!   omitted: entries alone make a release);
//! - in a release, an `operation` other than `"release_temporary"` or an
//!   entry of another mode is `mixed_modes`, and a `verify_command` is
//!   `verification_not_allowed`;
//! - otherwise `operation` is absent or `"edit"`, and every entry must be
//!   `mode: "replace"` with `content`; any other mode is `invalid_input`.
//!
//! The order of checks is: the top-level shape (`invalid_input`), then, for
//! a release, the frontend library's [`request::of_args`]: `mixed_modes`,
//! `verification_not_allowed`, each entry's shape (`invalid_input`, a
//! missing token or revision and a malformed `expected_revision` included).
//! The path rules (`file_count`, `duplicate_path`, `path_not_exact`,
//! `glob_not_allowed`) are [`ReleaseArgs::check_shape`], which the frontend
//! runs after its receipt lookup.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use winx_release_engine::Reason;
use winx_release_host::request;
pub use winx_release_protocol::shell::ShellAction;

pub use crate::bash_args::{BashAction, BashCommandArgs, DEFAULT_WAIT_SECONDS, MAX_WAIT_SECONDS};
use crate::from_value::from_value;

use winx_release_host::error::FrontendError;

pub use winx_release_host::request::{EditFilesArgs, ReleaseArgs, ReleaseEntry};
pub use winx_release_host::result::RELEASE_MODE;
/// The `mode` of a whole-file write.
pub const REPLACE_MODE: &str = "replace";
/// The explicit `operation` of a non-release `EditFiles` request.
pub const EDIT_OPERATION: &str = "edit";

/// The shell mode of a session (`mode_name`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModeName {
    /// Everything allowed (the default).
    #[default]
    Wcgw,
    /// Read-only: every file mutation and every new command is `policy_denied`.
    Architect,
    /// Mutations only on `allowed_globs`, commands only from `allowed_commands`.
    CodeWriter,
}

impl ModeName {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ModeName::Wcgw => "wcgw",
            ModeName::Architect => "architect",
            ModeName::CodeWriter => "code_writer",
        }
    }
}

/// `"all"` or an explicit list, as in winx's `code_writer_config`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawAllOrList", into = "RawAllOrList")]
pub enum AllOrList {
    /// The string `"all"`: no restriction.
    All,
    /// Only these entries.
    List(Vec<String>),
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum RawAllOrList {
    One(String),
    Many(Vec<String>),
}

impl TryFrom<RawAllOrList> for AllOrList {
    type Error = String;

    fn try_from(raw: RawAllOrList) -> Result<AllOrList, String> {
        match raw {
            RawAllOrList::One(s) if s == "all" => Ok(AllOrList::All),
            RawAllOrList::One(s) => Err(format!("expected \"all\" or a list of strings, got {s:?}")),
            RawAllOrList::Many(v) => Ok(AllOrList::List(v)),
        }
    }
}

impl From<AllOrList> for RawAllOrList {
    fn from(v: AllOrList) -> RawAllOrList {
        match v {
            AllOrList::All => RawAllOrList::One("all".to_owned()),
            AllOrList::List(l) => RawAllOrList::Many(l),
        }
    }
}

/// The restrictions of `code_writer` mode.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeWriterConfig {
    /// Glob patterns that a mutated path must match.
    pub allowed_globs: AllOrList,
    /// Commands that may run (exact text).
    pub allowed_commands: AllOrList,
}

/// Arguments of `Initialize`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitializeArgs {
    /// An absolute path of an existing directory: the workspace.
    pub any_workspace_path: String,
    /// The thread to (re-)attach to; absent or empty: a new one.
    #[serde(default)]
    pub thread_id: Option<String>,
    /// The shell mode, `wcgw` when absent.
    #[serde(default)]
    pub mode_name: Option<ModeName>,
    /// The restrictions of `code_writer` mode (only with it).
    #[serde(default)]
    pub code_writer_config: Option<CodeWriterConfig>,
    /// winx's call type (`first_call`, `user_asked_mode_change`, ...); echoed.
    #[serde(default, rename = "type")]
    pub init_type: Option<String>,
    /// winx's files to read with the call: accepted and not read (read
    /// them with `ReadFiles`, which pins helpers for release).
    #[serde(default)]
    pub initial_files_to_read: Option<Vec<String>>,
    /// winx's task to resume: accepted; nothing is resumed (a thread's
    /// state is its shell, which `thread_id` re-attaches to).
    #[serde(default)]
    pub task_id_to_resume: Option<String>,
}

impl InitializeArgs {
    /// Parses `Initialize` arguments.
    pub fn parse(v: &Value) -> Result<InitializeArgs, FrontendError> {
        let a: InitializeArgs = from_value("Initialize arguments", v)?;
        let mode = a.mode_name.unwrap_or_default();
        if a.code_writer_config.is_some() && mode != ModeName::CodeWriter {
            return Err(FrontendError::invalid("code_writer_config is only accepted with mode_name \"code_writer\""));
        }
        if let Some(t) = a.thread_id.as_deref() {
            check_thread_id(t)?;
        }
        Ok(a)
    }
}

/// Longest accepted thread id, in bytes.
pub const MAX_THREAD_ID_BYTES: usize = winx_release_protocol::messages::MAX_THREAD_ID_BYTES;

/// A thread id is at most 256 bytes without control characters (empty means
/// "none" at `Initialize`).
pub fn check_thread_id(t: &str) -> Result<(), FrontendError> {
    if !winx_release_protocol::messages::thread_id_shape_ok(t) {
        return Err(FrontendError::invalid("thread_id must be at most 256 bytes without control characters"));
    }
    Ok(())
}

/// Arguments of `ReadFiles`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadFilesArgs {
    /// The thread, from `Initialize`.
    pub thread_id: String,
    /// Absolute paths to read.
    pub file_paths: Vec<String>,
}

/// Most paths one `ReadFiles` request names; more are refused
/// `file_count` before any path is looked at (a request of 1,000,000 paths
/// had taken 15.9 s and 1.71 GB).
pub const MAX_READ_PATHS: usize = 1000;

impl ReadFilesArgs {
    /// Parses `ReadFiles` arguments; more than [`MAX_READ_PATHS`] paths
    /// are `file_count`, counted before they are parsed.
    pub fn parse(v: &Value) -> Result<ReadFilesArgs, FrontendError> {
        if let Some(n) = v.get("file_paths").and_then(Value::as_array).map(Vec::len) {
            if n > MAX_READ_PATHS {
                return Err(FrontendError::new(
                    Reason::FileCount,
                    format!("file_paths names {n} paths; one ReadFiles reads at most {MAX_READ_PATHS}"),
                ));
            }
        }
        from_value("ReadFiles arguments", v)
    }
}

/// One whole-file write entry of `EditFiles`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplaceEntry {
    /// The exact path to write.
    pub file_path: String,
    /// Always `"replace"`.
    pub mode: String,
    /// The new content.
    pub content: String,
}

/// A whole-file write request, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteArgs {
    /// The thread.
    pub thread_id: String,
    /// The workspace root as given.
    pub workspace_root: String,
    /// The entries, in order.
    pub entries: Vec<ReplaceEntry>,
    /// A command to run after the writes.
    pub verify_command: Option<String>,
}

impl WriteArgs {
    /// The requested paths, in order.
    pub fn paths(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.file_path.clone()).collect()
    }
}

/// An `EditFiles` request, classified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EditRequest {
    /// A release of helpers.
    Release(ReleaseArgs),
    /// Whole-file writes.
    Write(WriteArgs),
}

/// An `EditFiles` refusal at parse time, with what could be learnt of the
/// request: whether it looks like a release (its `operation` or any entry's
/// `mode` is `"release_temporary"`), and the entries' paths (empty strings
/// where an entry had none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EditParseError {
    /// The refusal.
    pub error: FrontendError,
    /// Whether the request was recognised as a release.
    pub release: bool,
    /// Each entry's `file_path`, best effort.
    pub paths: Vec<String>,
}

/// Parses and classifies `EditFiles` arguments (see the module docs for the
/// rules and their order). Path rules are left to [`ReleaseArgs::check_shape`].
pub fn parse_edit_files(v: &Value) -> Result<EditRequest, EditParseError> {
    let paths = request::paths_of(v);
    let fail = |error: FrontendError, release: bool| EditParseError { error, release, paths: paths.clone() };
    let looks_like_release = request::looks_like_release(v);
    let args: EditFilesArgs = from_value("EditFiles arguments", v).map_err(|e| fail(e, looks_like_release))?;
    let modes = request::modes(&args).map_err(|e| fail(e, looks_like_release))?;
    let release = args.operation.as_deref() == Some(RELEASE_MODE) || modes.contains(&RELEASE_MODE);
    if release {
        return request::of_args(&args, &modes).map(EditRequest::Release).map_err(|e| fail(e, true));
    }
    if let Some(op) = args.operation.as_deref().filter(|op| *op != EDIT_OPERATION) {
        return Err(fail(FrontendError::invalid(format!("unknown operation {op:?}")), false));
    }
    let mut entries = Vec::with_capacity(args.files.len());
    for (i, f) in args.files.iter().enumerate() {
        if modes[i] != REPLACE_MODE {
            let msg = format!("files[{i}] has unsupported mode {:?} (\"replace\" or \"release_temporary\")", modes[i]);
            return Err(fail(FrontendError::invalid(msg), false));
        }
        entries.push(from_value::<ReplaceEntry>(&format!("files[{i}]"), f).map_err(|e| fail(e, false))?);
    }
    Ok(EditRequest::Write(WriteArgs {
        thread_id: args.thread_id,
        workspace_root: args.workspace_root,
        entries,
        verify_command: args.verify_command,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const REV: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

    fn rel(path: &str) -> Value {
        json!({"file_path": path, "mode": "release_temporary", "expected_revision": REV, "artifact_generation": "g1.x"})
    }

    fn code(r: Result<EditRequest, EditParseError>) -> &'static str {
        r.unwrap_err().error.code.as_str()
    }

    #[test]
    fn release_classification() {
        let base =
            json!({"thread_id": "t", "workspace_root": "/w", "operation": "release_temporary", "files": [rel("/a")]});
        assert!(matches!(parse_edit_files(&base), Ok(EditRequest::Release(_))));
        // Entries alone make a release.
        let no_op = json!({"thread_id": "t", "workspace_root": "/w", "files": [rel("/a")]});
        assert!(matches!(parse_edit_files(&no_op), Ok(EditRequest::Release(_))));
        // A release with a replace entry.
        let mixed = json!({"thread_id": "t", "workspace_root": "/w", "files": [rel("/a"),
            {"file_path": "/b", "mode": "replace", "content": "x"}]});
        assert_eq!(code(parse_edit_files(&mixed)), "mixed_modes");
        // operation release with a non-release entry.
        let op_mixed = json!({"thread_id": "t", "workspace_root": "/w", "operation": "release_temporary",
            "files": [{"file_path": "/b", "mode": "replace", "content": "x"}]});
        assert_eq!(code(parse_edit_files(&op_mixed)), "mixed_modes");
        // A release entry under another operation.
        let other_op = json!({"thread_id": "t", "workspace_root": "/w", "operation": "edit", "files": [rel("/a")]});
        assert_eq!(code(parse_edit_files(&other_op)), "mixed_modes");
        let verify = json!({"thread_id": "t", "workspace_root": "/w", "files": [rel("/a")], "verify_command": "true"});
        assert_eq!(code(parse_edit_files(&verify)), "verification_not_allowed");
        // Mixed modes is checked before verification.
        let both = json!({"thread_id": "t", "workspace_root": "/w", "files": [rel("/a"),
            {"file_path": "/b", "mode": "replace", "content": "x"}], "verify_command": "true"});
        assert_eq!(code(parse_edit_files(&both)), "mixed_modes");
    }

    #[test]
    fn malformed_shapes_are_invalid_input() {
        for v in [
            json!(null),
            json!([]),
            json!({"thread_id": 1, "workspace_root": "/w", "files": []}),
            json!({"thread_id": "t", "workspace_root": "/w"}),
            json!({"thread_id": "t", "workspace_root": "/w", "files": [], "extra": 1}),
            json!({"thread_id": "t", "workspace_root": "/w", "files": [{"file_path": "/a"}]}),
            json!({"thread_id": "t", "workspace_root": "/w", "files": ["x"]}),
            json!({"thread_id": "t", "workspace_root": "/w", "files": [{"file_path": "/a", "mode": "edit"}]}),
            json!({"thread_id": "t", "workspace_root": "/w", "operation": "zap", "files": []}),
            json!({"thread_id": "t", "workspace_root": "/w", "files": [{"file_path": "/a", "mode": "replace"}]}),
            json!({"thread_id": "t", "workspace_root": "/w", "files": [{"file_path": "/a", "mode": "release_temporary",
                "expected_revision": REV, "artifact_generation": "g", "extra": true}]}),
            json!({"thread_id": "t", "workspace_root": "/w", "files": [{"file_path": "/a", "mode": "release_temporary",
                "artifact_generation": "g"}]}),
            json!({"thread_id": "t", "workspace_root": "/w", "files": [{"file_path": "/a", "mode": "release_temporary",
                "expected_revision": "sha256:ABC", "artifact_generation": "g"}]}),
        ] {
            let e = parse_edit_files(&v).unwrap_err();
            assert_eq!(e.error.code.as_str(), "invalid_input", "{v}");
        }
    }

    /// The contract: a release entry without `artifact_generation` is
    /// `invalid_input`, and the message says to read the file first.
    #[test]
    fn missing_token_is_invalid_input() {
        let v = json!({"thread_id": "t", "workspace_root": "/w", "files": [{"file_path": "/a",
            "mode": "release_temporary", "expected_revision": REV}]});
        let e = parse_edit_files(&v).unwrap_err();
        assert!(e.release);
        assert_eq!(e.error.code.as_str(), "invalid_input");
        assert!(e.error.message.contains("ReadFiles"), "{}", e.error.message);
    }

    #[test]
    fn write_classification() {
        let v = json!({"thread_id": "t", "workspace_root": "/w", "files": [
            {"file_path": "/a", "mode": "replace", "content": "x"}], "verify_command": "make"});
        match parse_edit_files(&v) {
            Ok(EditRequest::Write(w)) => {
                assert_eq!(w.paths(), vec!["/a".to_owned()]);
                assert_eq!(w.verify_command.as_deref(), Some("make"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn initialize_args() {
        let a = InitializeArgs::parse(&json!({"any_workspace_path": "/w", "mode_name": "code_writer",
            "code_writer_config": {"allowed_globs": ["src/**"], "allowed_commands": "all"}, "type": "first_call"}))
        .unwrap();
        assert_eq!(a.mode_name, Some(ModeName::CodeWriter));
        let c = a.code_writer_config.unwrap();
        assert_eq!(c.allowed_globs, AllOrList::List(vec!["src/**".into()]));
        assert_eq!(c.allowed_commands, AllOrList::All);
        // winx's other arguments are accepted.
        let winx = json!({"any_workspace_path": "/w", "type": "first_call", "initial_files_to_read": ["/w/a"],
            "task_id_to_resume": "", "thread_id": ""});
        assert!(InitializeArgs::parse(&winx).is_ok());
        for bad in [
            json!({}),
            json!({"any_workspace_path": "/w", "mode_name": "root"}),
            json!({"any_workspace_path": "/w", "bogus": 1}),
            json!({"any_workspace_path": "/w", "code_writer_config": {"allowed_globs": "all", "allowed_commands": "all"}}),
            json!({"any_workspace_path": "/w", "mode_name": "code_writer",
                "code_writer_config": {"allowed_globs": "some", "allowed_commands": "all"}}),
            json!({"any_workspace_path": "/w", "thread_id": "a\nb"}),
        ] {
            assert!(InitializeArgs::parse(&bad).is_err(), "{bad}");
        }
    }
}
