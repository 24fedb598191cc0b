//! `EditFiles` releases.
//!
//! Order of a release:
//!
//! 1. the request's shape is parsed ([`parse_edit_files`]); then the receipt
//!    of exactly this request is looked up by its fingerprint and replayed,
//!    touching nothing, before anything else (so a replay works after a
//!    frontend restart, also for a thread this process does not know);
//!    identical requests in flight in this process are serialised so that
//!    the second one replays the first one's receipt;
//! 2. path rules: `file_count`, `duplicate_path`, `path_not_exact`,
//!    `glob_not_allowed`;
//! 3. the thread (`thread_mismatch`) and the exact workspace string
//!    (`workspace_mismatch`);
//! 4. policy (`policy_denied`);
//! 5. placement (`reserved_namespace`, `other_session`, `not_session_helper`),
//!    then every target opened through no-follow handles (`symlink`,
//!    `hardlink`, `not_regular_file`, `not_found`), the identity from the
//!    opened descriptor, the token over that identity and the claimed digest
//!    (`read_required`), the revision (`revision_mismatch`); the bytes are
//!    read only to name a refusal, since the guardian re-hashes them;
//! 6. the owner: `embedded_runtime`, `unsupported_platform`,
//!    `owner_unavailable` (no guardian), `owner_unsupported` (no
//!    `temporary_release` in its hello: the release is never sent),
//!    `owner_unavailable` (not the guardian instance the session was
//!    initialised with; checked after the capability so that an older
//!    guardian is always `owner_unsupported`); then the guardian runs the
//!    release with the pins (`unknown_op` is `owner_unsupported`);
//! 7. when the guardian reports that the run touched the filesystem, the
//!    receipt is written durably, then the result is returned. When the
//!    receipt cannot be written, the result's `status` is `failed` with
//!    `errorCode: "receipt_unavailable"` and a `receipt_error` message; the
//!    per-target outcomes (what was released, restored or preserved) are
//!    still returned.
//!
//! A transport failure after the release was sent is a `failed` result with
//! `errorCode: "owner_unavailable"`, `outcome_unknown: true` and every file
//! `failed`; the release is never re-sent automatically.

use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{json, Value};
use winx_release_engine::hash::{parse_revision, Keep};
use winx_release_engine::path_rules::place_helper;
use winx_release_engine::release::open_session_dir;
use winx_release_engine::resolve::open_regular_beneath;
use winx_release_engine::Pin;
use winx_release_engine::{Outcome, Reason, ReleaseReport, Status, Target, TargetCode, TargetReason, TargetResult};

use super::read::read_helper;
use super::{Frontend, Session};
use crate::error::{Code, FrontendError};
use crate::receipt::Fingerprint;
use crate::token::TokenSubject;
use crate::wire::{parse_edit_files, EditRequest, ReleaseArgs, RELEASE_MODE};
use winx_release_engine::path_rules::check_shape;
use winx_release_engine::sync::lock;
use winx_release_protocol::client::ClientError;

/// `errorCode` of a touching release whose receipt could not be written.
pub(crate) const RECEIPT_UNAVAILABLE: &str = "receipt_unavailable";

/// The contract's `EditFiles` result of a release, built from the engine's
/// own types (outcomes, statuses and reason codes are never spelled here).
#[derive(Debug, Serialize)]
struct ReleaseResult<'a> {
    status: Status,
    operation: &'static str,
    #[serde(rename = "errorCode", skip_serializing_if = "Option::is_none")]
    error_code: Option<TargetCode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    receipt_id: Option<&'a str>,
    /// Whether the filesystem was touched (unknown after a lost reply).
    #[serde(skip_serializing_if = "Option::is_none")]
    touched: Option<bool>,
    replayed: bool,
    bytes_reclaimed: u64,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    outcome_unknown: bool,
    files: Vec<TargetResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

impl ReleaseResult<'_> {
    fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|e| json!({"status": Status::Failed, "message": e.to_string()}))
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
pub(crate) fn release_denial(paths: &[String], e: &FrontendError, own: &[Option<Code>]) -> Value {
    let files = paths
        .iter()
        .enumerate()
        .map(|(i, p)| result_of(p, Outcome::Denied, target_code(own.get(i).copied().flatten().unwrap_or(e.code))))
        .collect();
    let invalid = e.code.reason().is_some_and(Reason::is_invalid_input);
    ReleaseResult {
        status: if invalid { Status::InvalidInput } else { Status::Denied },
        operation: RELEASE_MODE,
        error_code: Some(target_code(e.code)),
        receipt_id: None,
        touched: Some(false),
        replayed: false,
        bytes_reclaimed: 0,
        outcome_unknown: false,
        files,
        message: Some(e.message.clone()),
    }
    .to_value()
}

/// The contract's release result for a guardian report.
pub(crate) fn release_result(report: &ReleaseReport, receipt_id: Option<&str>) -> Value {
    ReleaseResult {
        status: report.status,
        operation: RELEASE_MODE,
        error_code: report.request_code(),
        receipt_id,
        touched: Some(report.touched),
        replayed: false,
        bytes_reclaimed: report.bytes_reclaimed,
        outcome_unknown: false,
        files: report.files.clone(),
        message: report.detail.clone(),
    }
    .to_value()
}

fn lost_reply(paths: &[String], e: &ClientError) -> Value {
    ReleaseResult {
        status: Status::Failed,
        operation: RELEASE_MODE,
        error_code: Some(Reason::OwnerUnavailable.into()),
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
    }
    .to_value()
}

impl Frontend {
    pub(super) fn edit(&self, args: &Value) -> Value {
        match parse_edit_files(args) {
            Err(e) if e.release => release_denial(&e.paths, &e.error, &[]),
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

    /// Runs a parsed release request (steps 1–7 of the module docs).
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
        // 1. Replay.
        match self.receipts.lookup(r) {
            Ok(Some(v)) => return v,
            Ok(None) => {}
            Err(e) => {
                let mut v = release_denial(&paths, &FrontendError::new(Code::IoError, format!("receipt: {e}")), &[]);
                v["status"] = json!("failed");
                return v;
            }
        }
        // 2. Path rules.
        if let Err((code, own)) = check_shape(&paths) {
            let own: Vec<Option<Code>> = own.into_iter().map(|o| o.map(Code::from)).collect();
            return release_denial(&paths, &FrontendError::new(code, "a path was refused"), &own);
        }
        // 3–5.
        let (session, targets) = match self.check_release(r) {
            Ok(t) => t,
            Err((e, own)) => return release_denial(&paths, &e, &own),
        };
        // 6. Owner.
        if self.config.embedded {
            let e =
                FrontendError::new(Reason::EmbeddedRuntime, "the frontend runs embedded: no guardian owns the session");
            return release_denial(&paths, &e, &[]);
        }
        if !cfg!(target_os = "linux") {
            return release_denial(&paths, &FrontendError::new(Reason::UnsupportedPlatform, "Linux only"), &[]);
        }
        let (mut client, hello) = match self.guardian(false) {
            Ok(c) => c,
            Err(e) => {
                let reason = e.reason().unwrap_or(Reason::OwnerUnavailable);
                return release_denial(&paths, &FrontendError::new(reason, e.to_string()), &[]);
            }
        };
        if !hello.supports_temporary_release() {
            let e = FrontendError::new(Reason::OwnerUnsupported, "the guardian does not advertise temporary_release");
            return release_denial(&paths, &e, &[]);
        }
        if hello.instance.is_none() || hello.instance != session.guardian_instance {
            let e = FrontendError::new(
                Reason::OwnerUnavailable,
                "the guardian that owned this session at Initialize is gone; Initialize the thread again to re-attach",
            );
            return release_denial(&paths, &e, &[]);
        }
        let report = match client.release(&session.workspace, &session.thread_id, &targets) {
            Ok(report) => report,
            Err(e) if e.outcome_unknown() => return lost_reply(&paths, &e),
            Err(e) => {
                let msg = e.to_string();
                return match e.reason() {
                    Some(reason) => release_denial(&paths, &FrontendError::new(reason, msg), &[]),
                    None => {
                        let mut v = release_denial(&paths, &FrontendError::new(Code::IoError, msg), &[]);
                        v["status"] = json!("failed");
                        v
                    }
                };
            }
        };
        // 7. Receipt, then the answer.
        if !report.touched {
            return release_result(&report, None);
        }
        let id = fp.to_hex();
        let mut result = release_result(&report, Some(&id));
        if let Err(e) = self.receipts.record(r, &result) {
            // The run touched the filesystem but its receipt is not durable:
            // the answer must not read as a replayable success. It fails
            // with `receipt_unavailable`, keeping every per-target outcome.
            result["status"] = json!(Status::Failed);
            result["errorCode"] = json!(RECEIPT_UNAVAILABLE);
            result["receipt_error"] = json!(format!("the receipt could not be persisted, a replay is impossible: {e}"));
        }
        result
    }

    /// Steps 3–5: thread, workspace, policy, placement, targets. Returns
    /// the session and the pinned targets.
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
        let mut own: Vec<Option<Code>> = vec![None; n];
        let mut helpers = Vec::with_capacity(n);
        for (i, e) in r.entries.iter().enumerate() {
            match place_helper(&session.layout, &session.thread_id, &e.file_path) {
                Ok(h) => helpers.push(Some(h)),
                Err(reason) => {
                    own[i] = Some(reason.into());
                    helpers.push(None);
                }
            }
        }
        if let Some(first) = own.iter().flatten().next().copied() {
            return Err((FrontendError::new(first, "a path is not a helper of this thread's session"), own));
        }
        let dir = open_session_dir(&session.layout, &session.thread_id)
            .map_err(|reason| whole(FrontendError::new(reason, "the session directory cannot be opened")))?;
        let mut targets = Vec::with_capacity(n);
        for (i, (e, h)) in r.entries.iter().zip(helpers.iter().flatten()).enumerate() {
            // Fast path, no read: the token must verify over the file's
            // current identity and the digest the request claims. The
            // guardian then re-hashes the bytes under its barrier and
            // compares them with that same digest, so the bytes are proven
            // equal to what was read without a third hash pass.
            let claimed = parse_revision(&e.expected_revision);
            let opened = match open_regular_beneath(dir.as_fd(), &h.rel) {
                Ok(o) => o,
                Err(reason) => {
                    own[i] = Some(reason.into());
                    continue;
                }
            };
            if opened.identity.nlink > 1 {
                own[i] = Some(Reason::Hardlink.into());
                continue;
            }
            if let Some(digest) = claimed {
                let pin = Pin::new(&opened.identity, digest);
                let subject = TokenSubject {
                    thread_id: &session.thread_id,
                    workspace_root: &session.workspace,
                    path: &e.file_path,
                    pin,
                };
                if self.key.verify(e.artifact_generation.as_deref(), &subject).is_ok() {
                    targets.push(Target { path: e.file_path.clone(), pin });
                    continue;
                }
            }
            drop(opened);
            // Slow path, only to name the refusal: hash what is there now.
            let read = match read_helper(&dir, h, Keep::Nothing) {
                Ok(read) => read,
                Err(reason) => {
                    own[i] = Some(reason.into());
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
                own[i] = Some(reason.into());
                continue;
            }
            // The token matches the bytes now there, but not the claimed
            // revision.
            own[i] = Some(Reason::RevisionMismatch.into());
        }
        if let Some(first) = own.iter().flatten().next().copied() {
            return Err((FrontendError::new(first, "a target failed its check"), own));
        }
        Ok((session, targets))
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
            let v = release_result(&report, None);
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
        assert!(release_result(&done, Some("k")).get("errorCode").is_none());
    }
}
