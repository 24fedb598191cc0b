//! `EditFiles` releases.
//!
//! The steps of a release, named as in the README and `docs/DESIGN.md`:
//!
//! - `replay`: the request's shape is parsed ([`parse_edit_files`]); then
//!   the receipt of exactly this request is looked up by its fingerprint and
//!   replayed, touching nothing, before anything else (so a replay works
//!   after a frontend restart, also for a thread this process does not
//!   know); identical requests in flight in this process are serialised so
//!   that the second one replays the first one's receipt;
//! - `shape`: `file_count`, `duplicate_path`, `path_not_exact`,
//!   `glob_not_allowed` (the engine's [`shape`]);
//! - `scope`: the thread (`thread_mismatch`), the exact workspace string
//!   (`workspace_mismatch`), policy (`policy_denied`);
//! - `preflight`: the engine's [`preflight`] (`reserved_namespace`,
//!   `other_session`, `not_session_helper`, then every target opened through
//!   no-follow handles: `symlink`, `hardlink`, `not_regular_file`,
//!   `not_found`, `rename_unsupported`), then the token over the identity
//!   found and the claimed digest (`read_required`), the revision
//!   (`revision_mismatch`); the bytes are read ([`read_pinned`]) only to
//!   name a refusal, since the guardian re-hashes them;
//! - `owner`: `embedded_runtime`, `unsupported_platform`,
//!   `owner_unavailable` (no guardian), `owner_unsupported` (no
//!   `temporary_release` in its hello: the release is never sent),
//!   `owner_unavailable` (not the guardian instance the session was
//!   initialised with; checked after the capability so that an older
//!   guardian is always `owner_unsupported`); then the guardian runs the
//!   release with the pins (`unknown_op` is `owner_unsupported`);
//! - when the guardian reports that the run touched the filesystem, the
//!   receipt is written durably, then the result is returned. When the
//!   receipt cannot be written, the result's `status` is `failed` with
//!   `errorCode: "receipt_unavailable"` ([`ReleaseCode::ReceiptUnavailable`])
//!   and a `receipt_error` message; the per-target outcomes (what was
//!   released, restored or preserved) are still returned.
//!
//! A transport failure after the release was sent is a `failed` result with
//! `errorCode: "owner_unavailable"`, `outcome_unknown: true` and every file
//! `failed`; the release is never re-sent automatically.

use std::path::Path;
use std::sync::Arc;

use serde::{Serialize, Serializer};
use serde_json::{json, Value};
use winx_release_engine::preflight::{preflight, shape};
use winx_release_engine::read::{read_pinned, Keep};
use winx_release_engine::sys::lock;
use winx_release_engine::{revision, Pin, Refusal};
use winx_release_engine::{Outcome, Reason, ReleaseReport, Status, Target, TargetCode, TargetReason, TargetResult};

use super::{Frontend, Session};
use crate::error::{Code, FrontendError};
use crate::receipt::Fingerprint;
use crate::token::TokenSubject;
use crate::wire::{parse_edit_files, EditRequest, ReleaseArgs, RELEASE_MODE};
use winx_release_protocol::client::ClientError;

/// The request-level `errorCode` of a release result: a contract code, or
/// the frontend's own `receipt_unavailable` (a run that touched the
/// filesystem but whose receipt could not be written).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseCode {
    /// A contract reason code (request- or target-level).
    Code(TargetCode),
    /// The receipt of a touching run could not be persisted.
    ReceiptUnavailable,
}

impl ReleaseCode {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseCode::Code(c) => c.code(),
            ReleaseCode::ReceiptUnavailable => "receipt_unavailable",
        }
    }
}

impl Serialize for ReleaseCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// The contract's `EditFiles` result of a release, built from the engine's
/// own types (outcomes, statuses and reason codes are never spelled here).
#[derive(Debug, Serialize)]
pub struct ReleaseResult {
    /// Overall status.
    pub status: Status,
    /// Always `release_temporary`.
    pub operation: &'static str,
    /// The request-level code, when there is one.
    #[serde(rename = "errorCode", skip_serializing_if = "Option::is_none")]
    pub error_code: Option<ReleaseCode>,
    /// The receipt's id, whenever the filesystem was touched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receipt_id: Option<String>,
    /// Whether the filesystem was touched (unknown after a lost reply).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub touched: Option<bool>,
    /// Whether this is a replay of a recorded receipt.
    pub replayed: bool,
    /// Bytes reclaimed in all.
    pub bytes_reclaimed: u64,
    /// The release was sent but its reply was lost.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub outcome_unknown: bool,
    /// Per-target outcomes, in request order.
    pub files: Vec<TargetResult>,
    /// A human-readable detail.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Why the receipt could not be written (with `receipt_unavailable`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receipt_error: Option<String>,
}

impl ReleaseResult {
    /// The result as the JSON object a tool returns.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|e| json!({"status": Status::Failed, "message": e.to_string()}))
    }

    /// The same refusal, as a failure of the frontend itself (`failed`
    /// rather than `denied`): nothing was touched, but not because the
    /// request was refused.
    fn failed(mut self) -> Self {
        self.status = Status::Failed;
        self
    }

    /// A touching run whose receipt could not be persisted: it must not read
    /// as a replayable success, so it fails with `receipt_unavailable`,
    /// keeping every per-target outcome.
    fn receipt_unavailable(mut self, e: &std::io::Error) -> Self {
        self.status = Status::Failed;
        self.error_code = Some(ReleaseCode::ReceiptUnavailable);
        self.receipt_error = Some(format!("the receipt could not be persisted, a replay is impossible: {e}"));
        self
    }
}

/// The code of a refusal as a target reason: a contract reason, or
/// `io_error` (the only other code a release can be refused with).
fn target_code(code: Code) -> TargetCode {
    code.reason().map_or(TargetCode::Target(TargetReason::IoError), TargetCode::Request)
}

fn result_of(file_path: &str, outcome: Outcome, reason: TargetCode) -> TargetResult {
    TargetResult {
        file_path: file_path.to_owned(),
        outcome,
        reason: Some(reason),
        bytes_reclaimed: 0,
        quarantine_path: None,
    }
}

/// A release refused before anything was touched: every file `denied`, with
/// its own reason where it has one, else the request's code.
pub(crate) fn release_denial(paths: &[String], e: &FrontendError, own: &[Option<Code>]) -> ReleaseResult {
    let files = paths
        .iter()
        .enumerate()
        .map(|(i, p)| result_of(p, Outcome::Denied, target_code(own.get(i).copied().flatten().unwrap_or(e.code))))
        .collect();
    let invalid = e.code.reason().is_some_and(Reason::is_invalid_input);
    ReleaseResult {
        status: if invalid { Status::InvalidInput } else { Status::Denied },
        operation: RELEASE_MODE,
        error_code: Some(ReleaseCode::Code(target_code(e.code))),
        receipt_id: None,
        touched: Some(false),
        replayed: false,
        bytes_reclaimed: 0,
        outcome_unknown: false,
        files,
        message: Some(e.message.clone()),
        receipt_error: None,
    }
}

/// The contract's release result for a guardian report.
pub(crate) fn release_result(report: &ReleaseReport, receipt_id: Option<String>) -> ReleaseResult {
    ReleaseResult {
        status: report.status,
        operation: RELEASE_MODE,
        error_code: report.request_code().map(ReleaseCode::Code),
        receipt_id,
        touched: Some(report.touched),
        replayed: false,
        bytes_reclaimed: report.bytes_reclaimed,
        outcome_unknown: false,
        files: report.files.clone(),
        message: report.detail.clone(),
        receipt_error: None,
    }
}

fn lost_reply(paths: &[String], e: &ClientError) -> ReleaseResult {
    ReleaseResult {
        status: Status::Failed,
        operation: RELEASE_MODE,
        error_code: Some(ReleaseCode::Code(Reason::OwnerUnavailable.into())),
        receipt_id: None,
        touched: None,
        replayed: false,
        bytes_reclaimed: 0,
        outcome_unknown: true,
        files: paths.iter().map(|p| result_of(p, Outcome::Failed, Reason::OwnerUnavailable.into())).collect(),
        message: Some(format!(
            "{e}. The release was sent but its reply was lost; it is not re-sent automatically. Inspect the exact \
             targets (ReadFiles): missing or changed generations fail closed on a later explicit retry."
        )),
        receipt_error: None,
    }
}

/// A refusal of the engine's preflight as the frontend's error and each
/// target's own code.
fn refused(f: Refusal) -> (FrontendError, Vec<Option<Code>>) {
    let own = f.own.iter().map(|o| o.map(Code::from)).collect();
    (FrontendError::new(f.reason, f.detail), own)
}

impl Frontend {
    pub(super) fn edit(&self, args: &Value) -> Value {
        match parse_edit_files(args) {
            Err(e) if e.release => release_denial(&e.paths, &e.error, &[]).to_value(),
            Err(e) => super::write::write_denial(&e.paths, &e.error, &[]),
            Ok(EditRequest::Release(r)) => self.release(&r),
            Ok(EditRequest::Write(w)) => self.write(&w),
        }
    }

    fn inflight(&self, fp: &Fingerprint) -> Arc<std::sync::Mutex<()>> {
        lock(&self.inflight).entry(fp.0).or_default().clone()
    }

    fn inflight_done(&self, fp: &Fingerprint, slot: Arc<std::sync::Mutex<()>>) {
        let mut map = lock(&self.inflight);
        // The map's reference and ours: nobody else waits on it.
        if Arc::strong_count(&slot) == 2 {
            map.remove(&fp.0);
        }
    }

    /// Runs a parsed release request (the steps of the module docs).
    pub(crate) fn release(&self, r: &ReleaseArgs) -> Value {
        let fp = Fingerprint::of(r);
        let slot = self.inflight(&fp);
        let result = {
            let _serial = lock(&slot);
            self.release_serialised(r, &fp)
        };
        self.inflight_done(&fp, slot);
        result
    }

    fn release_serialised(&self, r: &ReleaseArgs, fp: &Fingerprint) -> Value {
        let paths = r.paths();
        // replay
        match self.receipts.lookup(r) {
            Ok(Some(v)) => return v,
            Ok(None) => {}
            Err(e) => {
                let e = FrontendError::new(Code::IoError, format!("receipt: {e}"));
                return release_denial(&paths, &e, &[]).failed().to_value();
            }
        }
        // shape
        if let Err(f) = shape(&paths) {
            let (e, own) = refused(f);
            return release_denial(&paths, &e, &own).to_value();
        }
        // scope, preflight
        let (session, targets) = match self.check_release(r) {
            Ok(t) => t,
            Err((e, own)) => return release_denial(&paths, &e, &own).to_value(),
        };
        // owner
        let report = match self.send_release(&session, &targets) {
            Ok(report) => report,
            Err(result) => return result.to_value(),
        };
        // The receipt, then the answer.
        if !report.touched {
            return release_result(&report, None).to_value();
        }
        let result = release_result(&report, Some(fp.to_hex()));
        match self.receipts.record(r, &result.to_value()) {
            Ok(_) => result.to_value(),
            Err(e) => result.receipt_unavailable(&e).to_value(),
        }
    }

    /// Step `owner`: embedded, platform, guardian reachable, capability,
    /// the same instance as at `Initialize`; then the release is sent, once.
    fn send_release(&self, session: &Session, targets: &[Target]) -> Result<ReleaseReport, Box<ReleaseResult>> {
        let paths: Vec<String> = targets.iter().map(|t| t.path.to_string_lossy().into_owned()).collect();
        let deny =
            |reason: Reason, msg: String| Box::new(release_denial(&paths, &FrontendError::new(reason, msg), &[]));
        if self.config.embedded {
            return Err(deny(
                Reason::EmbeddedRuntime,
                "the frontend runs embedded: no guardian owns the session".into(),
            ));
        }
        if !cfg!(target_os = "linux") {
            return Err(deny(Reason::UnsupportedPlatform, "Linux only".into()));
        }
        let (mut client, hello) = self.guardian(false).map_err(|e| {
            let reason = e.reason().unwrap_or(Reason::OwnerUnavailable);
            deny(reason, e.to_string())
        })?;
        if !hello.supports_temporary_release() {
            return Err(deny(Reason::OwnerUnsupported, "the guardian does not advertise temporary_release".into()));
        }
        if hello.instance.is_none() || hello.instance != session.guardian_instance {
            return Err(deny(
                Reason::OwnerUnavailable,
                "the guardian that owned this session at Initialize is gone; Initialize the thread again to re-attach"
                    .into(),
            ));
        }
        client.release_with(&session.workspace, &session.thread_id, targets, self.config.dry_run).map_err(|e| {
            if e.outcome_unknown() {
                return Box::new(lost_reply(&paths, &e));
            }
            let msg = e.to_string();
            match e.reason() {
                Some(reason) => deny(reason, msg),
                None => Box::new(release_denial(&paths, &FrontendError::new(Code::IoError, msg), &[]).failed()),
            }
        })
    }

    /// Steps `scope` (thread, workspace, policy) and `preflight` (the
    /// engine's: placement, every target opened through no-follow handles),
    /// then each target's token over the identity found and the claimed
    /// digest. Returns the session and the pinned targets.
    #[allow(clippy::type_complexity)]
    fn check_release(&self, r: &ReleaseArgs) -> Result<(Session, Vec<Target>), (FrontendError, Vec<Option<Code>>)> {
        let n = r.entries.len();
        let whole = |e: FrontendError| (e, vec![None; n]);
        let session = self.session(&r.thread_id).map_err(whole)?;
        if r.workspace_root != session.workspace {
            let msg = format!("workspace_root is not the initialised workspace {:?}", session.workspace);
            return Err(whole(FrontendError::new(Reason::WorkspaceMismatch, msg)));
        }
        let ws = Path::new(&session.workspace);
        let own: Vec<Option<Code>> = r
            .entries
            .iter()
            .map(|e| {
                (!session.policy.mutation_allowed(ws, Path::new(&e.file_path))).then_some(Reason::PolicyDenied.into())
            })
            .collect();
        if own.iter().any(Option::is_some) {
            let msg = format!("mode {} does not allow releasing these paths", session.mode().as_str());
            return Err((FrontendError::new(Reason::PolicyDenied, msg), own));
        }
        let paths = r.paths();
        let pre = preflight(&session.layout, &session.thread_id, &paths).map_err(refused)?;
        let session_dir = session.layout.session_dir(&session.thread_id);
        let mut own: Vec<Option<Reason>> = vec![None; n];
        let mut why: Vec<Option<String>> = vec![None; n];
        let mut targets = Vec::with_capacity(n);
        for t in pre.targets {
            let (i, e) = (t.index, &r.entries[t.index]);
            // Fast path, no read: the token must verify over the file's
            // current identity and the digest the request claims. The
            // guardian then re-hashes the bytes under its barrier and
            // compares them with that same digest, so the bytes are proven
            // equal to what was read without a third hash pass.
            if let Some(digest) = revision::parse(&e.expected_revision) {
                let pin = Pin::new(&t.identity, digest);
                let subject = TokenSubject {
                    thread_id: &session.thread_id,
                    workspace_root: &session.workspace,
                    path: &e.file_path,
                    pin,
                };
                if self.key.verify(e.artifact_generation.as_deref(), &subject).is_ok() {
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
            let subject = TokenSubject {
                thread_id: &session.thread_id,
                workspace_root: &session.workspace,
                path: &e.file_path,
                pin: read.pin,
            };
            if let Err(reason) = self.key.verify(e.artifact_generation.as_deref(), &subject) {
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
            Some(f) => Err(refused(f)),
            None => Ok((session, targets)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run that failed before anything moved answers `failed` with its
    /// code as `errorCode` (`no_space` or `io_error`) and `touched: false`.
    #[test]
    fn a_run_that_failed_before_anything_moved_names_its_code() {
        for code in [TargetReason::NoSpace, TargetReason::IoError] {
            let report = ReleaseReport {
                status: Status::Failed,
                error_code: None,
                detail: Some("no space: the tmpfs filesystem tmpfs mounted at /m is full".into()),
                touched: false,
                bytes_reclaimed: 0,
                files: vec![
                    result_of("/w/a", Outcome::Failed, code.into()),
                    result_of("/w/b", Outcome::NotAttempted, TargetReason::StoppedAfterFailure.into()),
                ],
            };
            let v = release_result(&report, None).to_value();
            assert_eq!(
                (&v["status"], &v["errorCode"], &v["touched"]),
                (&json!("failed"), &json!(code.code()), &json!(false))
            );
            assert!(v["message"].as_str().unwrap().contains("/m"));
        }
        // A completed run has no errorCode.
        let done = ReleaseReport {
            status: Status::Completed,
            error_code: None,
            detail: None,
            touched: true,
            bytes_reclaimed: 0,
            files: vec![],
        };
        assert!(release_result(&done, Some("k".into())).to_value().get("errorCode").is_none());
    }

    /// A refusal before the owner is asked names the refused target and the
    /// cause, in its `message`; the codes are the contract's.
    #[test]
    fn a_refusal_message_names_the_path_and_the_cause() {
        use crate::frontend::FrontendConfig;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let ws = root.join("ws");
        std::fs::create_dir(&ws).unwrap();
        let fe = Frontend::new(FrontendConfig::new(root.join("g.sock"), root.join("data"), true)).unwrap();
        let v = fe.initialize(json!({"any_workspace_path": ws, "thread_id": "t"}));
        let session = std::path::PathBuf::from(v["temporary_artifact_dir"].as_str().unwrap());
        let h = session.join("x.sh");
        std::fs::write(&h, "echo 1\n").unwrap();
        let read = fe.read_files(json!({"thread_id": "t", "file_paths": [h]}));
        let f = &read["files"][0];
        let entry = json!({"file_path": h, "mode": "release_temporary", "expected_revision": f["revision"],
            "artifact_generation": f["temporary_artifact"]["artifact_generation"]});
        let req = |entries: Vec<Value>| json!({"thread_id": "t", "workspace_root": ws, "operation": "release_temporary", "files": entries});
        std::fs::write(&h, "echo 2\n").unwrap();
        let v = fe.edit_files(req(vec![entry.clone()]));
        assert_eq!(v["errorCode"], "read_required", "{v}");
        let msg = v["message"].as_str().unwrap();
        assert!(msg.starts_with(&format!("{}: read_required (its generation token", h.display())), "{msg}");
        std::fs::remove_file(&h).unwrap();
        let v = fe.edit_files(req(vec![entry.clone()]));
        assert_eq!(v["message"], format!("{}: not_found (the file does not exist)", h.display()), "{v}");
        let twice = fe.edit_files(req(vec![entry.clone(), entry]));
        assert_eq!(twice["errorCode"], "duplicate_path");
        assert_eq!(twice["message"], format!("{}: duplicate_path (the same path is named twice)", h.display()));
    }
}
