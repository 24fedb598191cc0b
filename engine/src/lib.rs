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
//! # Example: a release
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use winx_release_engine::read::{read_pinned, Keep};
//! use winx_release_engine::{recovery, release, Admission, IdleOwner, Layout, Outcome, ReleaseOptions, ReleaseRequest, Status, Target};
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
//! // A session: its directory and its admission barrier.
//! layout.create_session_dir("thread-1")?;
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
//! // Under the barrier, the release asks the owner who still runs (here an
//! // owner with nothing running; a guardian answers from its runtime,
//! // `winx_release_runtime::OwnerAnswer`), then releases the pinned helper.
//! let admission = barrier.enter();
//! let report = release(&request, &admission, &IdleOwner, &ReleaseOptions::default());
//! assert_eq!(report.status, Status::Completed, "{report}");
//! assert_eq!(report.files[0].outcome, Outcome::Released);
//! assert!(!helper.exists());
//! // A report reads as one line for the request, then one per target.
//! assert!(report.to_string().contains(&format!("\n  released {}", helper.display())), "{report}");
//! # Ok(())
//! # }
//! ```
//!
//! The process runtime, `winx-release-runtime`, sits on this crate: it runs
//! a session's commands and answers [`RuntimeOwner`] from what they left
//! running; its crate docs show a minimal guardian with both, and
//! `runtime/examples/tokio_guardian.rs` the same from an async guardian.
//! The engine knows no execution: a release asks only the trait, so a host
//! that tracks its processes itself implements it and links this crate
//! alone. The kernel toolkit, `winx-release-kernel`, is below both: the
//! identities, pins and revisions this crate's API takes come from it.
//!
//! An MCP server that offers releases also links the frontend library,
//! `winx-release-host`: generation tokens ([`Pin`] bound to a thread,
//! workspace and path), receipts, the request's checks in the contract's
//! order and the result JSON; `host/examples/winx_host.rs` is a host
//! that is frontend and runtime in one process, with glue only. What an
//! embedder must get right (the barrier's contract, the owner's answers,
//! async hosts, `RuntimeOptions` in a process with children of its own,
//! `Runtime::leave`, several processes on one data directory, recovery's
//! workspace list, the receipt format, the error types, threads and rings,
//! the files the engine owns) is in `docs/DESIGN.md`, section "Embedding
//! the engine in another guardian".
//!
//! Every wire code of the stack (the contract's reasons, a frontend's and a
//! guardian's own) is an entry of one registry, [`WireCode`]: its spelling,
//! what it means ([`WireCode::describe`]) and its [`Level`]. [`Reason`] and
//! [`TargetReason`], the codes a release answers with, are its views.
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

mod codes;
mod error;
// The exact-path rule, below both `layout` and `preflight`.
mod exact;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub(crate) mod no_space;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub(crate) mod quarantine;

// Hidden, with the few hooks each marked beside it (`engine/public-api.txt`
// tags them `(hidden)`): what this workspace's fuzz targets, crash tests
// and benches drive directly, and an embedder does not.
// Hidden: the journal's on-disk format, for the fuzz target and the crash tests.
#[doc(hidden)]
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub mod journal;
// Hidden: the io_uring rehash pipeline, for the benches that measure it.
#[doc(hidden)]
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub mod rehash;

pub use admission::{Admission, AdmissionGuard};
pub use codes::{Level, Reason, TargetReason, WireCode};
pub use error::{Refusal, TargetCode};
pub use layout::Layout;
pub use owner::{IdleOwner, RuntimeOwner, Unsupported};
pub use release::{release, Outcome, ReleaseOptions, ReleaseReport, ReleaseRequest, Status, Target, TargetResult};
pub use winx_release_kernel::identity::{Identity, PhysicalId, Pin};
