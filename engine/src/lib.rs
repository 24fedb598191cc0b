//! Releases (deletes) the temporary helpers a coding agent left in its
//! session directory: exactly the file that was read, only that physical
//! file, and only when no execution of the session could still need it.
//!
//! A *guardian* (the durable process that owns a session's shell and
//! executions) links this crate. It implements [`RuntimeOwner`] over its
//! execution table, runs [`recovery::recover`] once when it starts, and calls
//! [`release()`] while it holds the session's admission barrier. The engine
//! checks every target and the backing roots before anything moves, then
//! moves each target into a private quarantine with `RENAME_NOREPLACE`,
//! re-verifies the captured object, and unlinks only the pinned one. It never
//! follows a symbolic link, never overwrites a name, and never signals or
//! kills a process.
//!
//! # Example: a minimal guardian
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::collections::HashMap;
//! use std::fs::File;
//! use std::sync::Mutex;
//!
//! use winx_release_engine::{
//!     recovery, release, Layout, Outcome, Pin, Reason, ReleaseOptions, ReleaseRequest, RuntimeOwner, Status,
//!     Target,
//! };
//!
//! /// The guardian's execution table: how many commands of each thread run.
//! struct Executions(HashMap<String, usize>);
//!
//! impl RuntimeOwner for Executions {
//!     fn supports_temporary_release(&self) -> bool {
//!         true
//!     }
//!     fn running_executions(&self, thread_id: &str) -> usize {
//!         self.0.get(thread_id).copied().unwrap_or(0)
//!     }
//!     fn pending_actions(&self, _thread_id: &str) -> usize {
//!         0
//!     }
//! }
//!
//! let tmp = tempfile::tempdir()?;
//! let workspace = tmp.path().canonicalize()?.join("ws");
//! std::fs::create_dir(&workspace)?;
//! let layout = Layout::new(workspace, tmp.path().canonicalize()?.join("data"))?;
//!
//! // Once, when the guardian starts: put back what a crash left in quarantine.
//! let recovered = recovery::recover(layout.data_dir(), &[layout.workspace().to_path_buf()])?;
//! assert!(recovered.restored.is_empty());
//!
//! // The agent wrote a helper and read it; the read pinned its identity and bytes.
//! layout.create_session_dir("thread-1")?;
//! let helper = layout.session_dir("thread-1").join("helper.py");
//! std::fs::write(&helper, "print('hi')\n")?;
//! let pin = Pin::of_fd(File::open(&helper)?)?;
//! let targets = [Target { path: helper.to_str().unwrap().to_owned(), pin }];
//! let request = ReleaseRequest { layout: &layout, thread_id: "thread-1", targets: &targets };
//!
//! // The session's admission barrier: no command of the thread may start
//! // while a release runs, so the owner's answers stay true throughout.
//! let barrier = Mutex::new(());
//!
//! // A command of the thread still runs: the release is refused, nothing moves.
//! let busy = Executions(HashMap::from([("thread-1".to_owned(), 1)]));
//! let report = {
//!     let _admission = barrier.lock().unwrap();
//!     release(&request, &busy, &ReleaseOptions::default())
//! };
//! assert_eq!((report.status, report.error_code), (Status::Denied, Some(Reason::ExecutionActive)));
//! assert!(helper.exists());
//!
//! // Nothing runs: the pinned helper is released and its bytes reported.
//! let idle = Executions(HashMap::new());
//! let report = {
//!     let _admission = barrier.lock().unwrap();
//!     release(&request, &idle, &ReleaseOptions::default())
//! };
//! assert_eq!(report.status, Status::Completed);
//! assert_eq!(report.files[0].outcome, Outcome::Released);
//! assert!(!helper.exists());
//! # Ok(())
//! # }
//! ```
//!
//! `engine/examples/tokio_guardian.rs` shows the same from an async guardian:
//! the release is blocking work, run with `tokio::task::spawn_blocking` while
//! the barrier's guard is held. What an embedder must get right (the
//! barrier's contract, the owner's answers, threads and rings, the files the
//! engine owns) is in `docs/DESIGN.md`, section "Embedding".
//!
//! Linux only: the engine calls Linux system calls directly and does not
//! build elsewhere.
#![deny(missing_docs)]
#![deny(unsafe_code)]

// The supported API: what a guardian implements, calls and reads.
pub mod audit;
pub mod executions;
pub mod fault;
pub mod identity;
pub mod layout;
pub mod liveness;
pub mod owner;
pub mod recovery;
pub mod release;
pub mod retention;
pub mod scan;

mod error;
mod generation;

// Building blocks this workspace's frontend adapter, `winx-release` tools,
// tests and benches call so that each rule has one copy (path shape,
// no-follow resolution, hashing, durable writes). They are
// public only for those crates: hidden from the docs, and not a supported
// API of the engine.
#[doc(hidden)]
pub mod durable;
#[doc(hidden)]
pub mod hash;
#[doc(hidden)]
pub mod journal;
#[doc(hidden)]
pub mod path_rules;
#[doc(hidden)]
pub mod quarantine;
#[doc(hidden)]
pub mod quota;
#[doc(hidden)]
pub mod random;
#[doc(hidden)]
pub mod rehash;
#[doc(hidden)]
pub mod resolve;
#[doc(hidden)]
pub mod sync;
#[doc(hidden)]
#[allow(unsafe_code)]
pub mod uring;

pub use error::{Denial, Reason, TargetCode, TargetReason};
pub use identity::{Identity, PhysicalId, Pin};
pub use layout::Layout;
pub use owner::{IdleOwner, RuntimeOwner};
pub use release::{release, Outcome, ReleaseOptions, ReleaseReport, ReleaseRequest, Status, Target, TargetResult};
