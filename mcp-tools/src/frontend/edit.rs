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
//!   `glob_not_allowed` ([`ReleaseArgs::check_shape`], the engine's rules);
//! - `scope`: the thread (`thread_mismatch`), the exact workspace string
//!   (`workspace_mismatch`, [`ReleaseArgs::check_binding`]), policy
//!   (`policy_denied`, this frontend's modes);
//! - `preflight`: [`ReleaseArgs::targets`], the engine's preflight (`reserved_namespace`,
//!   `other_session`, `not_session_helper`, then every target opened through
//!   no-follow handles: `symlink`, `hardlink`, `not_regular_file`,
//!   `not_found`, `rename_unsupported`), then the token over the identity
//!   found and the claimed digest (`read_required`), the revision
//!   (`revision_mismatch`); the bytes are read only to name a refusal,
//!   since the guardian re-hashes them;
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
//!   `errorCode: "receipt_unavailable"` ([`winx_release_host::ReleaseCode::ReceiptUnavailable`])
//!   and a `receipt_error` message; the per-target outcomes (what was
//!   released, restored or preserved) are still returned.
//!
//! A transport failure after the release was sent is a `failed` result with
//! `errorCode: "owner_unavailable"`, `outcome_unknown: true` and every file
//! `failed`; the release is never re-sent automatically.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use winx_release_engine::{Reason, ReleaseReport, Target};
use winx_release_host::request::Binding;
use winx_release_host::ReleaseResult;
use winx_release_kernel::sys::lock;

use super::{Frontend, InitializedThread};
use crate::wire::{parse_edit_files, EditRequest, ReleaseArgs};
use winx_release_host::error::{Code, FrontendError};
use winx_release_host::receipt::Fingerprint;

impl Frontend {
    pub(super) fn edit(&self, args: &Value) -> Value {
        match parse_edit_files(args) {
            Err(e) if e.release => ReleaseResult::denied(&e.paths, &e.error).to_value(),
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
            self.release_serialised(r)
        };
        self.inflight_done(&fp, slot);
        result
    }

    fn release_serialised(&self, r: &ReleaseArgs) -> Value {
        let paths = r.paths();
        // replay
        match self.receipts.find(r) {
            Ok(Some(replay)) => return replay.to_value(),
            Ok(None) => {}
            Err(e) => {
                let e = FrontendError::new(Code::IoError, format!("receipt: {e}"));
                return ReleaseResult::denied(&paths, &e).failed().to_value();
            }
        }
        // shape
        if let Err(e) = r.check_shape() {
            return ReleaseResult::denied(&paths, &e).to_value();
        }
        // scope, preflight
        let (session, targets) = match self.check_release(r) {
            Ok(t) => t,
            Err(e) => return ReleaseResult::denied(&paths, &e).to_value(),
        };
        // owner
        let report = match self.send_release(&session, &targets) {
            Ok(report) => report,
            Err(result) => return result.to_value(),
        };
        // The receipt (when the run touched anything), then the answer.
        self.receipts.answer(r, &report).to_value()
    }

    /// Step `owner`: embedded, platform, guardian reachable, capability,
    /// the same instance as at `Initialize`; then the release is sent, once.
    fn send_release(
        &self,
        session: &InitializedThread,
        targets: &[Target],
    ) -> Result<ReleaseReport, Box<ReleaseResult>> {
        let paths: Vec<String> = targets.iter().map(|t| t.path.to_string_lossy().into_owned()).collect();
        let deny =
            |reason: Reason, msg: String| Box::new(ReleaseResult::denied(&paths, &FrontendError::new(reason, msg)));
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
            // Another guardian: it owns the thread's commands only when it
            // serves this frontend's data directory, whose executions it
            // adopts (a restart); the thread is then re-attached to it.
            let same_data = hello.data_dir.as_deref().is_some_and(|d| {
                std::fs::canonicalize(&self.config.data_dir).is_ok_and(|own| Path::new(d) == own.as_path())
            });
            if !same_data {
                return Err(deny(
                    Reason::OwnerUnavailable,
                    "the guardian that owned this session at Initialize is gone, and the one answering serves \
                     another data directory; Initialize the thread again to re-attach"
                        .into(),
                ));
            }
            let mode = session.policy.mode();
            if let Err(e) = client.session_open_with(
                &session.workspace,
                &session.thread_id,
                Some(mode.as_str()),
                session.policy_config.as_ref(),
            ) {
                return Err(deny(
                    Reason::OwnerUnavailable,
                    format!("re-attaching the thread to the new guardian: {e}"),
                ));
            }
            if let Some(t) = lock(&self.threads).get_mut(&session.thread_id) {
                t.guardian_instance = hello.instance.clone();
            }
        }
        let sent = client.release_with(&session.workspace, &session.thread_id, targets, self.config.dry_run);
        if sent.is_ok() {
            self.keep(client, hello);
        }
        sent.map_err(|e| {
            if e.outcome_unknown() {
                return Box::new(ReleaseResult::lost_reply(&paths, &e));
            }
            let msg = e.to_string();
            match e.reason() {
                Some(reason) => deny(reason, msg),
                None => Box::new(ReleaseResult::denied(&paths, &FrontendError::new(Code::IoError, msg)).failed()),
            }
        })
    }

    /// Steps `scope` (thread, workspace, policy) and `preflight`: the
    /// frontend library's binding check, this frontend's policy, then the
    /// library's targets (the engine's placement and no-follow opens, each
    /// token over the identity found and the claimed digest). Returns the
    /// session and the pinned targets.
    fn check_release(&self, r: &ReleaseArgs) -> Result<(InitializedThread, Vec<Target>), FrontendError> {
        let session = self.session(&r.thread_id)?;
        let binding = Binding { thread_id: &session.thread_id, workspace_root: &session.workspace };
        r.check_binding(Some(binding))?;
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
            return Err(FrontendError::new(Reason::PolicyDenied, msg).with_targets(own));
        }
        let targets = r.targets(&self.key, binding, &session.layout)?;
        Ok((session, targets))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use winx_release_engine::{Outcome, Status, TargetReason, TargetResult};

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
                    TargetResult::unmoved("/w/a", Outcome::Failed, code.into()),
                    TargetResult::unmoved("/w/b", Outcome::NotAttempted, TargetReason::StoppedAfterFailure.into()),
                ],
            };
            let v = ReleaseResult::of_report(&report, None).to_value();
            assert_eq!(
                (&v["status"], &v["errorCode"], &v["touched"]),
                (&json!("failed"), &json!(code.as_str()), &json!(false))
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
        assert!(ReleaseResult::of_report(&done, Some("k".into())).to_value().get("errorCode").is_none());
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
