//! Guardian-side engine that releases managed temporary helpers exactly and
//! fail-closed.
//!
//! A guardian links this crate and calls [`release::release`] while it holds
//! a session's admission barrier. The engine checks every target and the
//! backing roots before anything moves, then moves each target into a
//! private quarantine with `RENAME_NOREPLACE`, re-verifies the captured
//! object, and unlinks only the pinned one.
//!
//! Linux only: it calls Linux system calls directly and does not build elsewhere.
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod audit;
pub mod durable;
pub mod error;
pub mod fault;
pub mod generation;
pub mod hash;
pub mod identity;
pub mod journal;
pub mod layout;
pub mod owner;
pub mod path_rules;
pub mod quarantine;
pub mod quota;
pub mod random;
pub mod recovery;
pub mod rehash;
pub mod release;
pub mod resolve;
pub mod retention;
pub mod scan;
pub mod socket_trust;
pub mod sync;
#[allow(unsafe_code)]
pub mod uring;

pub use error::{Denial, Reason, TargetCode, TargetReason};
pub use identity::{Identity, PhysicalId, Pin};
pub use layout::Layout;
pub use owner::{IdleOwner, RuntimeOwner};
pub use release::{release, Outcome, ReleaseOptions, ReleaseReport, ReleaseRequest, Status, Target, TargetResult};
