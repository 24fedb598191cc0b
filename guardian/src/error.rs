//! Errors of starting a guardian: `std::io::Error`s whose message names
//! what was being done.

use std::fmt::Display;
use std::io;

/// `error` with `what` in front of its message, its kind kept.
pub fn context(error: io::Error, what: impl Display) -> io::Error {
    io::Error::new(error.kind(), format!("{what}: {error}"))
}
