//! A tool's arguments (or a part of them) as a typed value: a shape that
//! does not fit is an `invalid_input` refusal naming what was read. The
//! ground floor of the argument modules (`wire`, `bash_args`).

use serde_json::Value;
use winx_release_host::error::FrontendError;

/// `v` as a `T`; `what` names it in the refusal.
pub(crate) fn from_value<T: serde::de::DeserializeOwned>(what: &str, v: &Value) -> Result<T, FrontendError> {
    T::deserialize(v).map_err(|e| FrontendError::invalid(format!("{what}: {e}")))
}
