//! The process runtime of winx-release: the commands a session runs (its
//! persistent shell included), who of them still runs, their durable
//! records, and their adoption by a restarted guardian. It sits on the
//! release engine (`winx-release-engine`), whose [`RuntimeOwner`] it
//! answers ([`OwnerAnswer`]) and whose admission barrier guards every
//! write that can start something, and on the kernel toolkit
//! (`winx-release-kernel`), which reads `/proc` and holds pidfds for it.
//!
//! [`RuntimeOwner`]: winx_release_engine::RuntimeOwner
//!
//! A guardian runs each command of a session as an *execution* of a
//! [`Runtime`]: [`Runtime::submit`] admits it (an id, a directory
//! `D/executions/<id>/` with the command text), [`Runtime::run`] starts it
//! (its own session and process group, `WINX_EXECUTION_ID=<id>` in its
//! environment, output into `D/executions/<id>/output`, and in cgroup mode
//! a cgroup of its own joined before the command's first instruction), and
//! the runtime learns of its end by itself. Under the session's admission
//! barrier, [`Runtime::liveness`] answers whether anything the session's
//! executions started still runs; [`OwnerAnswer`] turns that answer into
//! the [`winx_release_engine::RuntimeOwner`] a release asks.
//!
//! Two modes ([`LivenessMode`]), reported by the guardian:
//! - **cgroup**: where a delegated cgroup v2 subtree can be had (root, a
//!   systemd unit with `Delegate=yes`, a `systemd-run --scope -p
//!   Delegate=yes`), an execution runs while its cgroup is populated,
//!   whatever its processes do to their environment, group, session or
//!   parent, across any number of guardian restarts (`cgroup`);
//! - **proc**: elsewhere, the union of `/proc` signals, every doubt
//!   counted as running (`probe.rs`).
//!
//! Each execution's durable record (`record`) has a size independent of
//! the command, so a restarted guardian adopts every unresolved execution
//! (`Runtime::adopt`); a record it cannot read counts as running for
//! every session. Nothing here ever signals, kills or freezes a process.
//!
//! Every execution starts under a monitor of its own ([`monitor`]), the
//! leader's parent and a child subreaper: an execution runs while its
//! monitor has a descendant. A program that embeds the runtime calls
//! [`monitor::enter`] first thing in `main` (or ships
//! `winx-release-monitor` beside itself).
//!
//! # Example
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # winx_release_runtime::monitor::enter(); // this program is every command's monitor too
//! use std::time::Duration;
//! use winx_release_runtime::{ExecState, LivenessChoice, Runtime, RuntimeOptions, SessionKey, Spawn};
//!
//! let tmp = tempfile::tempdir()?;
//! let opts = RuntimeOptions { liveness: LivenessChoice::Proc, move_self: false, subreaper: false, ..Default::default() };
//! let rt = Runtime::start(tmp.path(), &opts);
//! let session = SessionKey::of_path(tmp.path())?;
//! let e = rt.submit(Spawn {
//!     thread: "t1".into(),
//!     workspace: tmp.path().into(),
//!     cwd: None,
//!     session,
//!     command: "echo hi".into(),
//!     background: false,
//!     env: vec![],
//! })?;
//! rt.run(&e)?;
//! let state = e.wait_until(Duration::from_secs(10), ExecState::is_final);
//! assert_eq!(state, ExecState::Resolved(Some(0)));
//! assert_eq!(e.output_tail().0, "hi\n");
//! assert_eq!(rt.liveness(&session).running, 0);
//! # Ok(())
//! # }
//! ```
//!
//! # Example: a minimal guardian
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # winx_release_runtime::monitor::enter(); // this program is every command's monitor too
//! use std::time::Duration;
//!
//! use winx_release_runtime::{ExecState, LivenessChoice, OwnerAnswer, Runtime, RuntimeOptions, SessionKey, Spawn};
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
//! `runtime/examples/tokio_guardian.rs` shows the same from an async guardian:
//! the barrier is awaited (`Admission::enter_async`), everything blocking
//! runs with `tokio::task::spawn_blocking` (the owned guard moved there),
//! and a command's end is awaited on the reactor through
//! `Execution::end_signal` (Linux). A host that runs its own shell (the
//! user's rc, `bash -r`, its own prompt detection) starts it with
//! [`Runtime::start_shell_with`] and a [`shell::ShellProgram`];
//! `host/examples/tokio_host.rs` is such a host.
//!
//! # Platforms
//!
//! The runtime runs commands on Linux only (process groups, pidfds,
//! `/proc`, cgroups, PTYs). It builds on every platform, under the same
//! paths and with the same signatures, so that a host's code is the same
//! everywhere: off Linux (`foreign`) [`Runtime::start`] returns a runtime
//! that starts nothing, every start ([`Runtime::submit`],
//! [`Runtime::start_shell_with`], `SessionKey::of_dir`) answers an
//! [`std::io::Error`] of kind `Unsupported` whose inner error is
//! [`winx_release_engine::Reason::UnsupportedPlatform`] (as the engine's
//! releases answer `unsupported_platform` there), no execution or shell
//! exists, [`monitor::enter`] returns at once and [`OwnerAnswer`]
//! supports no release. On Linux, `--cfg winx_foreign` builds that path
//! (CI checks it: `.ci/foreign.sh`).

// Spawning, `/proc` and cgroups are Linux's. Elsewhere (and with `--cfg
// winx_foreign`) `foreign` is the same surface, every operation answering
// `unsupported_platform`; the modules without a `cfg` are every platform's.
#![deny(missing_docs)]
#![deny(unsafe_code)]

#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub(crate) mod cgroup;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
mod descriptors;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
mod end;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
mod execution;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
#[doc(hidden)] // test-only stop points (debug builds), not a supported API
pub mod fault;
#[cfg(not(all(target_os = "linux", not(winx_foreign))))]
mod foreign;
mod liveness;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
mod members;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub mod monitor;
mod options;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub(crate) mod probe;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub(crate) mod record;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
mod runtime;
mod session;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub mod shell;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
mod spawn;
mod state;

#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub use descriptors::reserve_descriptor_table;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub use end::EndSignal;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub use execution::Execution;
#[cfg(not(all(target_os = "linux", not(winx_foreign))))]
pub use foreign::{monitor, shell, Execution, Runtime};
pub use liveness::{Liveness, LivenessMode, OwnerAnswer, MARKER};
pub use options::{LivenessChoice, RuntimeOptions, Spawn};
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub use probe::{older_passed_here, snapshots_taken_here};
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub use record::{Leader, Record, RecordState, OUTPUT_FILE};
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub use runtime::reattach::Reattached;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub use runtime::{Hook, Runtime};
pub use session::SessionKey;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub use spawn::CGROUP_JOIN_FAILED;
pub use state::{ExecState, INLINE_OUTPUT_BYTES};
