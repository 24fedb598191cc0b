//! How a release's report reads: `Display` for the report, its status and
//! each outcome, so that an embedder prints it without `serde_json`.

use std::fmt;

use super::{Outcome, ReleaseReport, Status};

impl Status {
    /// The contract's name (`completed`, `partial`, `denied`,
    /// `invalid_input`, `failed`).
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Completed => "completed",
            Status::Partial => "partial",
            Status::Denied => "denied",
            Status::InvalidInput => "invalid_input",
            Status::Failed => "failed",
        }
    }
}

impl Outcome {
    /// The contract's name (`released`, `restored`, `preserved`, `denied`,
    /// `not_attempted`, `failed`).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Released => "released",
            Outcome::Restored => "restored",
            Outcome::Preserved => "preserved",
            Outcome::Denied => "denied",
            Outcome::NotAttempted => "not_attempted",
            Outcome::Failed => "failed",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One line for the request (status, reason, bytes, detail), then one line
/// per target: outcome, path, reason, bytes, and where a preserved helper
/// stays.
impl fmt::Display for ReleaseReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "release {}", self.status)?;
        if let Some(r) = self.request_code() {
            write!(f, " ({r})")?;
        }
        write!(f, ": {} bytes reclaimed", self.bytes_reclaimed)?;
        if let Some(d) = &self.detail {
            write!(f, "; {d}")?;
        }
        for t in &self.files {
            write!(f, "\n  {} {}", t.outcome, t.file_path)?;
            if let Some(r) = &t.reason {
                write!(f, " ({r})")?;
            }
            if t.bytes_reclaimed > 0 {
                write!(f, ", {} bytes", t.bytes_reclaimed)?;
            }
            if let Some(q) = &t.quarantine_path {
                write!(f, ", kept at {}", q.display())?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Reason;

    #[test]
    fn a_denial_reads_as_one_line_per_target() {
        let r = ReleaseReport::denied(&["/w/a".into(), "/w/b".into()], Reason::InUse, &[], "process 7 holds it");
        assert_eq!(r.to_string(), "release denied (in_use): 0 bytes reclaimed; process 7 holds it\n  denied /w/a (in_use)\n  denied /w/b (in_use)");
    }

    /// The report's JSON names are the contract's (`errorCode`, the
    /// outcomes and codes in snake case); an older guardian's
    /// `error_code` still reads.
    #[test]
    fn the_reports_json_names_are_the_contracts() {
        let r = ReleaseReport::denied(&["/w/a".into()], Reason::InUse, &[], "held");
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["errorCode"], "in_use", "{v}");
        assert!(v.get("error_code").is_none(), "{v}");
        assert_eq!(
            (&v["status"], &v["files"][0]["outcome"], &v["files"][0]["reason"]),
            (&"denied".into(), &"denied".into(), &"in_use".into())
        );
        let mut old = v.clone();
        let code = old.as_object_mut().unwrap().remove("errorCode").unwrap();
        old["error_code"] = code;
        assert_eq!(serde_json::from_value::<ReleaseReport>(old).unwrap(), r);
    }
}
