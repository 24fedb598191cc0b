//! A release request: the seed's JSON parsed and checked into typed
//! targets, in the contract's order, with its codes.
//!
//! The request is exactly the seed's `EditFiles` arguments:
//!
//! ```json
//! {"thread_id": "…", "workspace_root": "/exact/initialized/workspace",
//!  "operation": "release_temporary",
//!  "files": [{"file_path": "/exact/session/helper.py", "mode": "release_temporary",
//!             "expected_revision": "sha256:…", "artifact_generation": "g1.…"}]}
//! ```
//!
//! A host runs these steps in this order; each refusal is one
//! [`FrontendError`] with the contract's code (and each target's own code):
//!
//! 1. [`parse`] checks the top-level shape (`invalid_input`, unknown fields
//!    refused), `mixed_modes` (an `operation` other than
//!    `release_temporary`, or an entry of another mode), then
//!    `verification_not_allowed` (`verify_command`), then each entry's shape
//!    (`invalid_input`; an entry without `expected_revision` or
//!    `artifact_generation` says to read the file with `ReadFiles` first and
//!    which fields to copy; a malformed `expected_revision`);
//! 2. replay: [`crate::receipt::ReceiptStore::find`], before anything else,
//!    so that a replay works after a restart;
//! 3. [`ReleaseArgs::check_shape`] checks `file_count`, `duplicate_path`,
//!    `path_not_exact`, `glob_not_allowed` (the engine's one copy of these
//!    rules);
//! 4. [`ReleaseArgs::check_binding`] checks `thread_mismatch`,
//!    `workspace_mismatch` against the session the host initialised (the
//!    host's own policy, such as a read-only mode, comes next);
//! 5. [`ReleaseArgs::targets`] runs the engine's placement and no-follow opens
//!    (`reserved_namespace`, `other_session`, `not_session_helper`,
//!    `symlink`, `hardlink`, `not_regular_file`, `not_found`,
//!    `rename_unsupported`), then each token against the file found
//!    (`read_required`) and the revision (`revision_mismatch`), giving the
//!    pinned [`Target`]s the engine's `release()` takes.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use winx_release_engine::layout::Layout;
use winx_release_engine::preflight::check_shape;
use winx_release_engine::{Reason, Target};

use crate::error::FrontendError;
use crate::result::RELEASE_MODE;
use crate::token::TokenKey;

/// One release entry of `EditFiles`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseEntry {
    /// The exact path of the helper.
    pub file_path: String,
    /// Always `"release_temporary"`.
    pub mode: String,
    /// `sha256:<hex>` as `ReadFiles` returned it.
    pub expected_revision: String,
    /// The token `ReadFiles` returned. [`parse`] refuses an entry without
    /// one (`invalid_input`); `None` only in receipts of earlier versions.
    #[serde(default)]
    pub artifact_generation: Option<String>,
}

/// The top-level object of `EditFiles`, entries still unparsed.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditFilesArgs {
    /// The thread, from `Initialize`.
    pub thread_id: String,
    /// The exact workspace root `Initialize` returned.
    pub workspace_root: String,
    /// `"release_temporary"`, `"edit"`, or absent.
    #[serde(default)]
    pub operation: Option<String>,
    /// The entries, in order.
    pub files: Vec<Value>,
    /// A command to run after a write (not with a release).
    #[serde(default)]
    pub verify_command: Option<String>,
}

/// A release request, parsed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseArgs {
    /// The thread.
    pub thread_id: String,
    /// The workspace root as given.
    pub workspace_root: String,
    /// The entries, in order.
    pub entries: Vec<ReleaseEntry>,
}

/// The session a request must belong to: the thread and the workspace root
/// exactly as the host's `Initialize` returned them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding<'a> {
    /// The initialised thread id.
    pub thread_id: &'a str,
    /// The initialised workspace root.
    pub workspace_root: &'a str,
}

pub(crate) fn from_value<T: serde::de::DeserializeOwned>(what: &str, v: &Value) -> Result<T, FrontendError> {
    T::deserialize(v).map_err(|e| FrontendError::invalid(format!("{what}: {e}")))
}

/// Whether `v` asks for a release: its `operation` or any entry's `mode`
/// is `"release_temporary"` (a host that also serves writes sends these to
/// [`parse`]).
pub fn looks_like_release(v: &Value) -> bool {
    v.get("operation").and_then(Value::as_str) == Some(RELEASE_MODE)
        || v.get("files")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|e| e.get("mode").and_then(Value::as_str) == Some(RELEASE_MODE)))
}

/// Each entry's `file_path` of an unparsed request, best effort (empty where
/// an entry has none): what a refusal of a request that did not parse
/// names ([`crate::result::ReleaseResult::denied`]).
pub fn paths_of(v: &Value) -> Vec<String> {
    match v.get("files") {
        Some(Value::Array(a)) => {
            a.iter().map(|e| e.get("file_path").and_then(Value::as_str).unwrap_or_default().to_owned()).collect()
        }
        _ => Vec::new(),
    }
}

/// Step 1: parses a release request (see the module docs for the checks
/// and their order).
///
/// # Errors
/// `invalid_input`, `mixed_modes` or `verification_not_allowed`.
pub fn parse(v: &Value) -> Result<ReleaseArgs, FrontendError> {
    let args: EditFilesArgs = from_value("EditFiles arguments", v)?;
    let modes = modes(&args)?;
    if args.operation.as_deref() != Some(RELEASE_MODE) && !modes.contains(&RELEASE_MODE) {
        return Err(FrontendError::invalid("not a release: no operation or mode \"release_temporary\""));
    }
    of_args(&args, &modes)
}

/// Each entry's `mode`.
///
/// # Errors
/// `invalid_input` for an entry that is not an object with a string `mode`.
pub fn modes(args: &EditFilesArgs) -> Result<Vec<&str>, FrontendError> {
    let mut modes = Vec::with_capacity(args.files.len());
    for (i, f) in args.files.iter().enumerate() {
        match f.get("mode").and_then(Value::as_str) {
            Some(m) if f.is_object() => modes.push(m),
            _ => return Err(FrontendError::invalid(format!("files[{i}] lacks a string \"mode\""))),
        }
    }
    Ok(modes)
}

/// The release checks of [`parse`] after the top-level shape, for a host
/// that parsed `EditFiles` itself (to tell releases from writes).
///
/// # Errors
/// `mixed_modes`, `verification_not_allowed` or `invalid_input`.
pub fn of_args(args: &EditFilesArgs, modes: &[&str]) -> Result<ReleaseArgs, FrontendError> {
    if let Some(op) = args.operation.as_deref().filter(|op| *op != RELEASE_MODE) {
        let msg = format!("a release cannot be mixed into operation {op:?}");
        return Err(FrontendError::new(Reason::MixedModes, msg));
    }
    if let Some(i) = modes.iter().position(|m| *m != RELEASE_MODE) {
        let msg = format!("files[{i}] has mode {:?}: every entry of a release is \"release_temporary\"", modes[i]);
        return Err(FrontendError::new(Reason::MixedModes, msg));
    }
    if args.verify_command.is_some() {
        let msg = "verify_command is not accepted with a release";
        return Err(FrontendError::new(Reason::VerificationNotAllowed, msg));
    }
    let mut entries = Vec::with_capacity(args.files.len());
    for (i, f) in args.files.iter().enumerate() {
        for field in ["expected_revision", "artifact_generation"] {
            if f.get(field).is_none_or(Value::is_null) {
                return Err(FrontendError::invalid(format!(
                    "files[{i}] lacks {field}: read the file with ReadFiles first, then copy its \"revision\" into \
                     expected_revision and its \"temporary_artifact.artifact_generation\" into artifact_generation"
                )));
            }
        }
        let e: ReleaseEntry = from_value(&format!("files[{i}]"), f)?;
        if winx_release_kernel::revision::parse(&e.expected_revision).is_none() {
            let msg = format!("files[{i}].expected_revision is not \"sha256:<64 lowercase hex>\"");
            return Err(FrontendError::invalid(msg));
        }
        entries.push(e);
    }
    Ok(ReleaseArgs { thread_id: args.thread_id.clone(), workspace_root: args.workspace_root.clone(), entries })
}

impl ReleaseArgs {
    /// The requested paths, in order.
    pub fn paths(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.file_path.clone()).collect()
    }

    /// Step 3: 1–100 entries, each path unique and exact, no glob.
    ///
    /// # Errors
    /// `file_count`, `duplicate_path`, `path_not_exact`, `glob_not_allowed`
    /// (all `invalid_input` statuses), naming each target's own code.
    pub fn check_shape(&self) -> Result<(), FrontendError> {
        check_shape(&self.paths()).map_err(FrontendError::from)
    }

    /// Step 4: the request belongs to `session`, the thread and workspace
    /// the host initialised (`None`: the host knows no such thread). Returns
    /// that session's binding.
    ///
    /// # Errors
    /// `thread_mismatch` (unknown or another thread), `workspace_mismatch`
    /// (`workspace_root` not exactly the initialised one).
    pub fn check_binding<'b>(&self, session: Option<Binding<'b>>) -> Result<Binding<'b>, FrontendError> {
        let Some(b) = session.filter(|b| b.thread_id == self.thread_id) else {
            let msg = format!("thread {:?} is not initialised: call Initialize first", self.thread_id);
            return Err(FrontendError::new(Reason::ThreadMismatch, msg));
        };
        if self.workspace_root != b.workspace_root {
            let msg = format!("workspace_root is not the initialised workspace {:?}", b.workspace_root);
            return Err(FrontendError::new(Reason::WorkspaceMismatch, msg));
        }
        Ok(b)
    }

    /// Step 5: the pinned targets. Every path is placed and opened through
    /// the engine (no-follow directory handles, one link, a regular file);
    /// then each entry's token must verify over the identity found and the
    /// digest the request claims. The guardian re-hashes the bytes under its
    /// barrier and compares them with that same digest, so no bytes are read
    /// here — except to name a refusal: a target whose token does not verify
    /// is read ([`winx_release_engine::read::read_pinned`]) to tell a changed
    /// file (`read_required`) from a wrong `expected_revision`
    /// (`revision_mismatch`).
    ///
    /// `layout` is the session's workspace and data directory; call it after
    /// [`ReleaseArgs::check_binding`] with the same `session`.
    ///
    /// # Errors
    /// The engine's placement and target codes, `read_required`,
    /// `revision_mismatch`, each target's own; `unsupported_platform` off
    /// Linux.
    pub fn targets(&self, key: &TokenKey, session: Binding<'_>, layout: &Layout) -> Result<Vec<Target>, FrontendError> {
        targets(self, key, session, layout)
    }
}

#[cfg(all(target_os = "linux", not(winx_foreign)))]
fn targets(r: &ReleaseArgs, key: &TokenKey, b: Binding<'_>, layout: &Layout) -> Result<Vec<Target>, FrontendError> {
    use winx_release_engine::preflight::preflight;
    use winx_release_engine::read::{read_pinned, Keep};
    use winx_release_engine::{Pin, Refusal};
    use winx_release_kernel::revision;

    use crate::token::TokenSubject;

    let n = r.entries.len();
    let paths = r.paths();
    let pre = preflight(layout, b.thread_id, &paths).map_err(FrontendError::from)?;
    let session_dir = layout.session_dir(b.thread_id);
    let mut own: Vec<Option<Reason>> = vec![None; n];
    let mut why: Vec<Option<String>> = vec![None; n];
    let mut targets = Vec::with_capacity(n);
    for t in pre.targets {
        let (i, e) = (t.index, &r.entries[t.index]);
        let subject = |pin: Pin| TokenSubject {
            thread_id: b.thread_id,
            workspace_root: b.workspace_root,
            path: &e.file_path,
            pin,
        };
        // Fast path, no read: the token verifies over the file's current
        // identity and the digest the request claims.
        if let Some(digest) = revision::parse(&e.expected_revision) {
            let pin = Pin::new(&t.identity, digest);
            if key.verify(e.artifact_generation.as_deref(), &subject(pin)).is_ok() {
                targets.push(Target::new(&e.file_path, pin));
                continue;
            }
        }
        drop(t);
        // Slow path, only to name the refusal: read what is there now.
        let read = match read_pinned(&session_dir, Path::new(&e.file_path), Keep::Nothing) {
            Ok(read) => read,
            Err(reason) => {
                own[i] = Some(reason);
                continue;
            }
        };
        if let Err(reason) = key.verify(e.artifact_generation.as_deref(), &subject(read.pin)) {
            own[i] = Some(reason);
            why[i] = Some("its generation token does not match the file as it is now: read it again".into());
            continue;
        }
        // The token matches the bytes now there, but not the claimed
        // revision.
        own[i] = Some(Reason::RevisionMismatch);
        why[i] = Some(format!("its content is {}, not expected_revision", read.revision()));
    }
    match Refusal::of_targets(&paths, own, |i| why[i].clone()) {
        Some(f) => Err(f.into()),
        None => Ok(targets),
    }
}

#[cfg(not(all(target_os = "linux", not(winx_foreign))))]
fn targets(r: &ReleaseArgs, _: &TokenKey, _: Binding<'_>, _: &Layout) -> Result<Vec<Target>, FrontendError> {
    let _ = Path::new(&r.workspace_root);
    Err(FrontendError::new(Reason::UnsupportedPlatform, "release is supported on Linux only"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const REV: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

    fn rel(path: &str) -> Value {
        json!({"file_path": path, "mode": "release_temporary", "expected_revision": REV, "artifact_generation": "g1.x"})
    }

    fn code(r: Result<ReleaseArgs, FrontendError>) -> &'static str {
        r.unwrap_err().code.as_str()
    }

    fn req(files: Vec<Value>) -> Value {
        json!({"thread_id": "t", "workspace_root": "/w", "operation": "release_temporary", "files": files})
    }

    /// The codes of step 1, in the contract's order: shape, then mixed
    /// modes, then verification, then the entries.
    #[test]
    fn parse_in_the_contracts_order() {
        let ok = parse(&req(vec![rel("/a")])).unwrap();
        assert_eq!(ok.paths(), ["/a"]);
        assert_eq!(ok.entries[0].artifact_generation.as_deref(), Some("g1.x"));
        let replace = json!({"file_path": "/b", "mode": "replace", "content": "x"});
        assert_eq!(code(parse(&req(vec![rel("/a"), replace.clone()]))), "mixed_modes");
        let other_op = json!({"thread_id": "t", "workspace_root": "/w", "operation": "edit", "files": [rel("/a")]});
        assert_eq!(code(parse(&other_op)), "mixed_modes");
        let mut verify = req(vec![rel("/a")]);
        verify["verify_command"] = json!("make");
        assert_eq!(code(parse(&verify)), "verification_not_allowed");
        let mut both = req(vec![rel("/a"), replace]);
        both["verify_command"] = json!("make");
        assert_eq!(code(parse(&both)), "mixed_modes");
        let mut extra = req(vec![rel("/a")]);
        extra["bogus"] = json!(1);
        assert_eq!(code(parse(&extra)), "invalid_input");
        // Not a release at all.
        let write = json!({"thread_id": "t", "workspace_root": "/w", "files": [{"file_path": "/b", "mode": "replace", "content": "x"}]});
        assert_eq!(code(parse(&write)), "invalid_input");
        assert!(!looks_like_release(&write) && looks_like_release(&req(vec![])));
        // A path rule is not step 1's: an empty list parses.
        assert!(parse(&req(vec![])).is_ok());
    }

    /// An entry without `expected_revision` or `artifact_generation` (or
    /// with `null`) is `invalid_input`, and the message says what to do.
    #[test]
    fn a_missing_revision_or_token_says_to_read_first() {
        for field in ["expected_revision", "artifact_generation"] {
            for how in ["absent", "null"] {
                let mut e = rel("/a");
                if how == "absent" {
                    e.as_object_mut().unwrap().remove(field);
                } else {
                    e[field] = Value::Null;
                }
                let err = parse(&req(vec![e])).unwrap_err();
                assert_eq!(err.code.as_str(), "invalid_input", "{field} {how}");
                let m = &err.message;
                assert!(m.contains(field) && m.contains("ReadFiles"), "{m}");
                assert!(m.contains("\"revision\"") && m.contains("\"temporary_artifact.artifact_generation\""), "{m}");
            }
        }
        let mut bad = rel("/a");
        bad["expected_revision"] = json!("sha256:ABC");
        assert!(parse(&req(vec![bad])).unwrap_err().message.contains("expected_revision"));
        assert_eq!(paths_of(&req(vec![rel("/a"), json!({"mode": 1})])), ["/a", ""]);
    }

    #[test]
    fn shape_and_binding() {
        let r = |paths: &[&str]| parse(&req(paths.iter().map(|p| rel(p)).collect())).unwrap();
        assert_eq!(r(&[]).check_shape().unwrap_err().code.as_str(), "file_count");
        let many: Vec<String> = (0..101).map(|i| format!("/w/a{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(r(&many).check_shape().unwrap_err().code.as_str(), "file_count");
        assert!(r(&many[..100]).check_shape().is_ok());
        let dup = r(&["/w/a", "/w/a"]).check_shape().unwrap_err();
        assert_eq!(
            (dup.code.as_str(), dup.code_of(0).as_str(), dup.code_of(1).as_str()),
            ("duplicate_path", "duplicate_path", "duplicate_path")
        );
        assert_eq!(dup.targets, vec![None, Some(Reason::DuplicatePath.into())]);
        assert_eq!(r(&["/w/../a"]).check_shape().unwrap_err().code.as_str(), "path_not_exact");
        assert_eq!(r(&["/w/*.py"]).check_shape().unwrap_err().code.as_str(), "glob_not_allowed");
        let one = r(&["/w/a"]);
        let b = Binding { thread_id: "t", workspace_root: "/w" };
        assert_eq!(one.check_binding(Some(b)), Ok(b));
        assert_eq!(one.check_binding(None).unwrap_err().code.as_str(), "thread_mismatch");
        let other = Binding { thread_id: "u", ..b };
        assert_eq!(one.check_binding(Some(other)).unwrap_err().code.as_str(), "thread_mismatch");
        let ws = Binding { workspace_root: "/w/", ..b };
        assert_eq!(one.check_binding(Some(ws)).unwrap_err().code.as_str(), "workspace_mismatch");
    }

    /// Step 5 on a real session: the token and revision of what was read
    /// give a pinned target; a changed file (identical bytes too) is
    /// `read_required`, a wrong revision `revision_mismatch`, another
    /// thread's token `read_required`, a placement rule the engine's.
    #[cfg(all(target_os = "linux", not(winx_foreign)))]
    #[test]
    fn targets_pin_what_was_read() {
        use crate::token::TokenSubject;
        use winx_release_engine::read::{read_pinned, Keep};

        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().canonicalize().unwrap().join("ws");
        std::fs::create_dir(&ws).unwrap();
        let layout = Layout::new(&ws, tmp.path().join("data")).unwrap();
        layout.create_session_dir("t").unwrap();
        let dir = layout.session_dir("t");
        let (h, g) = (dir.join("h.py"), dir.join("g.py"));
        std::fs::write(&h, "print(1)\n").unwrap();
        std::fs::write(&g, "print(1)\n").unwrap();
        let key = TokenKey::from_secret([9; 32]);
        let wss = ws.to_str().unwrap();
        let b = Binding { thread_id: "t", workspace_root: wss };
        let token = |path: &Path, thread: &str| {
            let read = read_pinned(&dir, path, Keep::Nothing).unwrap();
            let subject =
                TokenSubject { thread_id: thread, workspace_root: wss, path: path.to_str().unwrap(), pin: read.pin };
            (read.revision(), key.mint(&subject), read.pin)
        };
        let args = |entries: Vec<(&Path, &str, &str)>| ReleaseArgs {
            thread_id: "t".into(),
            workspace_root: wss.into(),
            entries: entries
                .into_iter()
                .map(|(p, rev, tok)| ReleaseEntry {
                    file_path: p.to_str().unwrap().into(),
                    mode: RELEASE_MODE.into(),
                    expected_revision: rev.into(),
                    artifact_generation: Some(tok.into()),
                })
                .collect(),
        };
        let (rev, tok, pin) = token(&h, "t");
        let got = args(vec![(&h, &rev, &tok)]).targets(&key, b, &layout).unwrap();
        assert_eq!(got, vec![Target::new(&h, pin)]);
        let code = |r: Result<Vec<Target>, FrontendError>| r.unwrap_err().code.as_str();
        assert_eq!(code(args(vec![(&h, REV, &tok)]).targets(&key, b, &layout)), "revision_mismatch");
        let (_, other_thread, _) = token(&h, "u");
        assert_eq!(code(args(vec![(&h, &rev, &other_thread)]).targets(&key, b, &layout)), "read_required");
        let (g_rev, _, _) = token(&g, "t");
        assert_eq!(g_rev, rev);
        assert_eq!(code(args(vec![(&g, &rev, &tok)]).targets(&key, b, &layout)), "read_required");
        // An identical replacement is another file.
        std::fs::remove_file(&h).unwrap();
        std::fs::write(&h, "print(1)\n").unwrap();
        let e = args(vec![(&g, &g_rev, &token(&g, "t").1), (&h, &rev, &tok)]).targets(&key, b, &layout).unwrap_err();
        assert_eq!((e.code.as_str(), e.code_of(1).as_str()), ("read_required", "read_required"));
        assert_eq!(e.targets[0], None);
        let outside = ws.join("src.py");
        std::fs::write(&outside, "x").unwrap();
        assert_eq!(code(args(vec![(&outside, &rev, &tok)]).targets(&key, b, &layout)), "not_session_helper");
    }
}
