//! Crash recovery when a guardian starts.

use std::path::Path;

/// Runs recovery over every journal of `data_dir` (the engine's
/// [`winx_release_engine::recovery::recover`]) and logs the result.
pub fn recover_at_start(data_dir: &Path) {
    match winx_release_engine::recovery::recover(data_dir, &[]) {
        Ok(r) if r.journals > 0 || !r.corrupt_journals.is_empty() => {
            tracing::warn!(report = %serde_json::to_string(&r).unwrap_or_default(), "recovered interrupted releases")
        }
        Ok(_) => {}
        Err(e) => tracing::error!(error = %e, "recovery failed"),
    }
}
