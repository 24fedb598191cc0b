//! The contract's `EditFiles` release result, as one serde type.
//!
//! [`ReleaseResult`] serialises to exactly the contract's object (section
//! 3): `status`, `operation`, `errorCode`, `receipt_id`, `replayed`,
//! `bytes_reclaimed`, and `files[]` with `file_path`, `outcome`, `reason`,
//! `bytes_reclaimed` and (for `preserved`) `quarantine_path`; besides them
//! `touched`, `outcome_unknown`, `message` and `receipt_error` where they
//! apply. Outcomes, statuses and reason codes are the engine's types, never
//! spelled here. It is the `structuredContent` of an MCP tool result; its
//! `isError` is [`ReleaseResult::is_error`].

use serde::de::IntoDeserializer;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{json, Value};
use winx_release_engine::{Outcome, Reason, ReleaseReport, Status, TargetCode, TargetReason, TargetResult, WireCode};

use crate::error::{Code, FrontendError};

/// The `mode` of a release entry and the `operation` of a release request.
pub const RELEASE_MODE: &str = "release_temporary";

/// The request-level `errorCode` of a release result: a contract code, or
/// the frontend's own `receipt_unavailable` (a run that touched the
/// filesystem but whose receipt could not be written). A view of the
/// engine's registry ([`WireCode`]), which spells it.
#[non_exhaustive]
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
        self.code().as_str()
    }

    /// This code in the registry.
    pub fn code(self) -> WireCode {
        match self {
            ReleaseCode::Code(c) => c.code(),
            ReleaseCode::ReceiptUnavailable => WireCode::ReceiptUnavailable,
        }
    }
}

impl Serialize for ReleaseCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ReleaseCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ReleaseCode, D::Error> {
        let s = String::deserialize(d)?;
        if s == ReleaseCode::ReceiptUnavailable.as_str() {
            return Ok(ReleaseCode::ReceiptUnavailable);
        }
        let de: serde::de::value::StringDeserializer<D::Error> = s.into_deserializer();
        TargetCode::deserialize(de).map(ReleaseCode::Code)
    }
}

/// The `operation` of a release result: always `release_temporary`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Operation {
    /// `release_temporary`.
    #[default]
    #[serde(rename = "release_temporary")]
    ReleaseTemporary,
}

/// The contract's `EditFiles` result of a release.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseResult {
    /// Overall status.
    pub status: Status,
    /// Always `release_temporary`.
    #[serde(default)]
    pub operation: Operation,
    /// The request-level code, when there is one.
    #[serde(rename = "errorCode", skip_serializing_if = "Option::is_none", default)]
    pub error_code: Option<ReleaseCode>,
    /// The receipt's id, whenever the filesystem was touched.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub receipt_id: Option<String>,
    /// Whether the filesystem was touched (unknown after a lost reply).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub touched: Option<bool>,
    /// Whether this is a replay of a recorded receipt.
    #[serde(default)]
    pub replayed: bool,
    /// Bytes reclaimed in all.
    #[serde(default)]
    pub bytes_reclaimed: u64,
    /// The release was sent but its reply was lost.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub outcome_unknown: bool,
    /// Per-target outcomes, in request order.
    pub files: Vec<TargetResult>,
    /// A human-readable detail.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub message: Option<String>,
    /// Why the receipt could not be written (with `receipt_unavailable`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub receipt_error: Option<String>,
}

/// A code of a refusal as a target reason: a contract reason, or `io_error`
/// (the only other code a release can be refused with).
fn target_code(code: Code) -> TargetCode {
    code.reason().map_or(TargetCode::Target(TargetReason::IoError), TargetCode::Request)
}

impl ReleaseResult {
    /// A release refused before anything was touched: every file `denied`,
    /// with its own code where `e` names one, else the request's; `status`
    /// `invalid_input` for a malformed request, else `denied`.
    pub fn denied(paths: &[String], e: &FrontendError) -> ReleaseResult {
        let files =
            paths.iter().enumerate().map(|(i, p)| TargetResult::unmoved(p, Outcome::Denied, target_code(e.code_of(i))));
        let invalid = e.code.reason().is_some_and(Reason::is_invalid_input);
        ReleaseResult {
            status: if invalid { Status::InvalidInput } else { Status::Denied },
            operation: Operation::ReleaseTemporary,
            error_code: Some(ReleaseCode::Code(target_code(e.code))),
            receipt_id: None,
            touched: Some(false),
            replayed: false,
            bytes_reclaimed: 0,
            outcome_unknown: false,
            files: files.collect(),
            message: Some(e.message.clone()),
            receipt_error: None,
        }
    }

    /// The result of the engine's report of a run; `receipt_id` is the
    /// request's fingerprint when the run touched the filesystem (then
    /// record the result before answering: [`crate::receipt::ReceiptStore::record`]).
    pub fn of_report(report: &ReleaseReport, receipt_id: Option<String>) -> ReleaseResult {
        ReleaseResult {
            status: report.status,
            operation: Operation::ReleaseTemporary,
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

    /// A release that was sent to its owner whose reply was lost: `failed`,
    /// `owner_unavailable`, `outcome_unknown`, every file `failed`. It must
    /// never be re-sent automatically; `why` says what was lost.
    pub fn lost_reply(paths: &[String], why: impl std::fmt::Display) -> ReleaseResult {
        let code = TargetCode::from(Reason::OwnerUnavailable);
        ReleaseResult {
            status: Status::Failed,
            operation: Operation::ReleaseTemporary,
            error_code: Some(ReleaseCode::Code(code)),
            receipt_id: None,
            touched: None,
            replayed: false,
            bytes_reclaimed: 0,
            outcome_unknown: true,
            files: paths.iter().map(|p| TargetResult::unmoved(p, Outcome::Failed, code)).collect(),
            message: Some(format!(
                "{why}. The release was sent but its reply was lost; it is not re-sent automatically. Inspect the \
                 exact targets (ReadFiles): missing or changed generations fail closed on a later explicit retry."
            )),
            receipt_error: None,
        }
    }

    /// The same refusal, as a failure of the frontend itself (`failed`
    /// rather than `denied`): nothing was touched, but not because the
    /// request was refused (a receipt could not be read, say).
    pub fn failed(mut self) -> ReleaseResult {
        self.status = Status::Failed;
        self
    }

    /// A touching run whose receipt could not be persisted: it must not read
    /// as a replayable success, so it fails with `receipt_unavailable`,
    /// keeping every per-target outcome.
    pub fn receipt_unavailable(mut self, e: &std::io::Error) -> ReleaseResult {
        self.status = Status::Failed;
        self.error_code = Some(ReleaseCode::ReceiptUnavailable);
        self.receipt_error = Some(format!("the receipt could not be persisted, a replay is impossible: {e}"));
        self
    }

    /// MCP's `isError`: true for `denied`, `invalid_input` and `failed`.
    pub fn is_error(&self) -> bool {
        matches!(self.status, Status::Denied | Status::InvalidInput | Status::Failed)
    }

    /// The result as the JSON object a tool returns (`structuredContent`).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|e| json!({"status": Status::Failed, "message": e.to_string()}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The contract's field names, exactly.
    #[test]
    fn field_names_are_the_contracts() {
        let r = ReleaseResult {
            status: Status::Partial,
            operation: Operation::ReleaseTemporary,
            error_code: Some(ReleaseCode::Code(Reason::InUse.into())),
            receipt_id: Some("ab".into()),
            touched: Some(true),
            replayed: false,
            bytes_reclaimed: 4096,
            outcome_unknown: false,
            files: vec![TargetResult {
                file_path: "/w/x".into(),
                outcome: Outcome::Preserved,
                reason: Some(TargetReason::RestoreBlocked.into()),
                bytes_reclaimed: 0,
                quarantine_path: Some("/w/.q/x".into()),
            }],
            message: None,
            receipt_error: None,
        };
        let v = r.to_value();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut want =
            ["status", "operation", "errorCode", "receipt_id", "touched", "replayed", "bytes_reclaimed", "files"];
        let mut keys = keys;
        keys.sort_unstable();
        want.sort_unstable();
        assert_eq!(keys, want, "{v}");
        assert_eq!(v["operation"], "release_temporary");
        assert_eq!(v["status"], "partial");
        assert_eq!(v["errorCode"], "in_use");
        let f = v["files"][0].as_object().unwrap();
        let mut fk: Vec<&str> = f.keys().map(String::as_str).collect();
        fk.sort_unstable();
        assert_eq!(fk, ["bytes_reclaimed", "file_path", "outcome", "quarantine_path", "reason"]);
        assert_eq!((&f["outcome"], &f["reason"]), (&json!("preserved"), &json!("restore_blocked")));
        // It reads back as itself.
        assert_eq!(serde_json::from_value::<ReleaseResult>(v).unwrap(), r);
    }

    #[test]
    fn denied_names_each_targets_code() {
        let e = FrontendError::new(Reason::NotFound, "/a: not_found")
            .with_targets(vec![None, Some(Reason::Symlink.into())]);
        let v = ReleaseResult::denied(&["/a".into(), "/b".into()], &e).to_value();
        assert_eq!(
            (&v["status"], &v["errorCode"], &v["touched"]),
            (&json!("denied"), &json!("not_found"), &json!(false))
        );
        assert_eq!((&v["files"][0]["reason"], &v["files"][1]["reason"]), (&json!("not_found"), &json!("symlink")));
        assert_eq!(v["files"][1]["outcome"], "denied");
        let invalid = ReleaseResult::denied(&["/a".into()], &FrontendError::new(Reason::MixedModes, "m"));
        assert_eq!((invalid.status, invalid.is_error()), (Status::InvalidInput, true));
        let io = ReleaseResult::denied(&["/a".into()], &FrontendError::new(Code::IoError, "m")).failed().to_value();
        assert_eq!((&io["status"], &io["errorCode"]), (&json!("failed"), &json!("io_error")));
    }

    #[test]
    fn lost_reply_and_receipt_unavailable() {
        let v = ReleaseResult::lost_reply(&["/a".into()], "connection reset").to_value();
        assert_eq!(
            (&v["status"], &v["errorCode"], &v["outcome_unknown"]),
            (&json!("failed"), &json!("owner_unavailable"), &json!(true))
        );
        assert!(v.get("touched").is_none() && v["files"][0]["outcome"] == "failed");
        assert!(v["message"].as_str().unwrap().starts_with("connection reset. "));
        let report = ReleaseReport {
            status: Status::Completed,
            error_code: None,
            detail: None,
            touched: true,
            bytes_reclaimed: 8,
            files: vec![],
        };
        let r = ReleaseResult::of_report(&report, Some("k".into()));
        assert!(!r.is_error() && r.to_value().get("errorCode").is_none());
        let v = r.receipt_unavailable(&std::io::Error::other("disk full")).to_value();
        assert_eq!(
            (&v["status"], &v["errorCode"], &v["receipt_id"]),
            (&json!("failed"), &json!("receipt_unavailable"), &json!("k"))
        );
        assert!(v["receipt_error"].as_str().unwrap().ends_with("disk full"));
        assert_eq!(
            serde_json::from_value::<ReleaseResult>(v).unwrap().error_code,
            Some(ReleaseCode::ReceiptUnavailable)
        );
    }
}
