//! The result of a target that never moved: a refused request's, or a
//! target a failure stopped the run before.

use super::{Outcome, TargetCode, TargetResult};

impl TargetResult {
    /// The result of target `file_path`, which never moved: `outcome` with
    /// `reason`, nothing reclaimed, no quarantine. What a frontend answers
    /// for the targets of a request it refused itself.
    pub fn unmoved(file_path: &str, outcome: Outcome, reason: TargetCode) -> TargetResult {
        TargetResult {
            file_path: file_path.to_owned(),
            outcome,
            reason: Some(reason),
            bytes_reclaimed: 0,
            quarantine_path: None,
        }
    }
}
