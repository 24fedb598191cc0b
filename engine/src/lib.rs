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
//! use std::time::Duration;
//!
//! use winx_release_engine::executions::{
//!     ExecState, LivenessChoice, OwnerAnswer, Runtime, RuntimeOptions, SessionKey, Spawn,
//! };
//! use winx_release_engine::read::{read_pinned, Keep};
//! use winx_release_engine::{recovery, release, Admission, Layout, Outcome, Reason, ReleaseOptions, ReleaseRequest, Status, Target};
//!
//! let tmp = tempfile::tempdir()?;
//! let workspace = tmp.path().canonicalize()?.join("ws");
//! std::fs::create_dir(&workspace)?;
//! let layout = Layout::new(workspace, tmp.path().canonicalize()?.join("data"))?;
//!
//! // Once, when the guardian starts: put back what a crash left in
//! // quarantine, and start the execution runtime, which adopts what an
//! // earlier guardian left running. (A guardian runs the default options:
//! // a cgroup per execution where it can, moving itself into its subtree.)
//! let recovered = recovery::recover(layout.data_dir(), &[layout.workspace().to_path_buf()])?;
//! assert!(recovered.restored.is_empty());
//! let opts = RuntimeOptions { liveness: LivenessChoice::Proc, move_self: false, ..Default::default() };
//! let runtime = Runtime::start(layout.data_dir(), &opts);
//!
//! // A session: its directory, its identity, its admission barrier.
//! let session = SessionKey::of_dir(layout.create_session_dir("thread-1")?)?;
//! let barrier = Admission::new();
//!
//! // The agent wrote a helper and read it: the read pinned the object it
//! // read and the bytes it returned (no-follow, one link, identity stable).
//! let helper = layout.session_dir("thread-1").join("helper.py");
//! std::fs::write(&helper, "print('hi')\n")?;
//! let read = read_pinned(&layout.session_dir("thread-1"), &helper, Keep::Text(4096))?;
//! assert_eq!(read.head.into_text(false).as_deref(), Some("print('hi')\n"));
//! let targets = [Target::new(&helper, read.pin)];
//! let request = ReleaseRequest { layout: &layout, thread_id: "thread-1", targets: &targets };
//!
//! // A command of the session, started under the barrier, leaves a process behind.
//! let command = {
//!     let _admission = barrier.enter();
//!     let e = runtime.submit(Spawn {
//!         thread: "thread-1".into(),
//!         workspace: layout.workspace().into(),
//!         cwd: None,
//!         session,
//!         command: "sleep 1 &".into(),
//!         background: false,
//!         env: vec![],
//!     })?;
//!     runtime.run(&e)?;
//!     e
//! };
//!
//! // The release asks the runtime who still runs, under the barrier.
//! let release_now = || {
//!     let admission = barrier.enter();
//!     let owner = OwnerAnswer {
//!         liveness: runtime.thread_liveness(&session, "thread-1"),
//!         pending: 0,
//!         exempt: vec![std::process::id() as i32],
//!         session: Some(session),
//!     };
//!     release(&request, &admission, &owner, &ReleaseOptions::default())
//! };
//! let report = release_now();
//! assert_eq!((report.status, report.error_code), (Status::Denied, Some(Reason::ExecutionActive)));
//! // A report reads as one line for the request, then one per target.
//! assert!(report.to_string().starts_with("release denied (execution_active): 0 bytes reclaimed; "), "{report}");
//! assert!(helper.exists());
//!
//! // Once nothing the command started runs, the pinned helper is released.
//! assert_eq!(command.wait_until(Duration::from_secs(20), ExecState::is_final), ExecState::Resolved(Some(0)));
//! let report = release_now();
//! assert_eq!(report.status, Status::Completed, "{report}");
//! assert_eq!(report.files[0].outcome, Outcome::Released);
//! assert!(!helper.exists());
//! println!("{report}");
//! assert!(report.to_string().contains(&format!("\n  released {}", helper.display())), "{report}");
//! # Ok(())
//! # }
//! ```
//!
//! `engine/examples/tokio_guardian.rs` shows the same from an async guardian:
//! everything blocking runs with `tokio::task::spawn_blocking` (the barrier
//! taken there), and a command's end is awaited on the reactor through
//! `Execution::end_signal` (Linux).
//!
//! An MCP server that offers releases also links the frontend library,
//! `winx-release-frontend`: generation tokens ([`Pin`] bound to a thread,
//! workspace and path), receipts, the request's checks in the contract's
//! order and the result JSON; `frontend/examples/winx_host.rs` is a host
//! that is frontend and runtime in one process, with glue only. What an
//! embedder must get right (the barrier's contract, the owner's answers,
//! async hosts, `RuntimeOptions` in a process with children of its own,
//! `Runtime::leave`, several processes on one data directory, recovery's
//! workspace list, the receipt format, the error types, threads and rings,
//! the files the engine owns) is in `docs/DESIGN.md`, section "Embedding
//! the engine in another guardian".
//!
//! # Platforms
//!
//! The engine does its work on Linux only (it calls Linux system calls
//! through directory handles, io_uring, cgroups and `/proc`). It builds on
//! every platform (macOS and Windows too, for a host that ships there):
//! elsewhere it is its types, the [`Admission`] barrier and the path rules,
//! [`release()`] answers every target `unsupported_platform` and
//! [`read::read_pinned`] refuses with [`Reason::UnsupportedPlatform`]; the
//! Linux-only dependencies (`rustix`, `io-uring`, `libc`, `crossbeam-deque`)
//! are not pulled in.
//! On Linux, `--cfg winx_foreign` builds that other path (CI checks it).
#![deny(missing_docs)]
#![deny(unsafe_code)]

// The supported API: what a guardian implements, calls and reads. The
// modules marked Linux-only do not exist elsewhere (see "Platforms").
pub mod admission;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub mod audit;
pub mod fault;
pub mod layout;
pub mod owner;
pub mod preflight;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub mod quota;
pub mod read;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub mod recovery;
pub mod release;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub mod resolve;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub mod retention;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub mod scan;

mod error;
// The exact-path rule, below both `layout` and `preflight`.
mod exact;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub(crate) mod no_space;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub(crate) mod quarantine;

// Internals that this workspace's own tests, benches and fuzz targets
// measure or drive directly (the io_uring rings, the rehash pipeline and
// the journal's on-disk format). They are public only for those: hidden
// from the docs, and not a supported API of the engine. Elsewhere
// `procfs` (above) and single items are hidden the same way, each with its
// reason beside it: what this project's guardian, frontends, tools, benches
// or tests call and an embedder does not. `engine/public-api.txt` tags them
// `(hidden)`; the supported rest is what the embedding section of
// docs/DESIGN.md, the crate example and the examples use.
#[doc(hidden)]
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub mod journal;
#[doc(hidden)]
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub mod rehash;

pub use admission::{Admission, AdmissionGuard};
pub use error::{Reason, Refusal, TargetCode, TargetReason};
pub use layout::Layout;
pub use owner::{IdleOwner, RuntimeOwner};
pub use release::{release, Outcome, ReleaseOptions, ReleaseReport, ReleaseRequest, Status, Target, TargetResult};
pub use winx_release_kernel::identity::{Identity, PhysicalId, Pin};
