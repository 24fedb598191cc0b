//! The host library of winx-release: what an MCP server that offers
//! guarded release of temporary helpers links (as the frontend half of
//! it), whatever its own transport, tools and runtime.
//!
//! - [`token`]: generation tokens. A [`TokenKey`] is the process secret;
//!   [`TokenKey::mint`] binds a thread, workspace, exact path and the
//!   [`Pin`](winx_release_engine::Pin) of the file a read opened;
//!   [`TokenKey::verify`] checks one in constant time (`read_required`).
//! - [`request`]: the seed's release JSON parsed and checked into pinned
//!   targets, step by step in the contract's order, with its codes.
//! - [`receipt`]: the fingerprint of a request, [`ReceiptStore::find`] and
//!   [`ReceiptStore::record`] (durable), on the documented layout.
//! - [`result`]: the contract's release result, [`ReleaseResult`], as one
//!   serde type.
//! - [`error`]: the one error type, [`FrontendError`], with the contract's
//!   codes.
//!
//! With the engine (`winx-release-engine`: reads that pin, the
//! [`Admission`](winx_release_engine::Admission) barrier, `release()`) and,
//! where it runs commands itself, the process runtime
//! (`winx-release-runtime`: executions and their liveness) a server writes
//! glue only: see
//! `host/examples/winx_host.rs`, one process that is frontend and
//! runtime at once, `host/examples/tokio_host.rs`, the same on tokio with
//! its own PTY, prompt detection and shell, and `docs/DESIGN.md`, section
//! "Embedding".
//!
//! # A release, in the contract's order
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use winx_release_engine::{release, Admission, IdleOwner, Layout, ReleaseOptions, ReleaseRequest};
//! use winx_release_host::request::{self, Binding};
//! use winx_release_host::{Code, Fingerprint, FrontendError, ReceiptStore, ReleaseResult, TokenKey};
//!
//! # let (layout, key, barrier, args): (Layout, TokenKey, Admission, serde_json::Value) = todo!();
//! let receipts = ReceiptStore::new(layout.data_dir());
//! let session = Binding { thread_id: "t1", workspace_root: "/w" };
//! let req = match request::parse(&args) {
//!     Ok(req) => req,
//!     Err(e) => return Ok(println!("{}", ReleaseResult::denied(&request::paths_of(&args), &e).to_value())),
//! };
//! let paths = req.paths();
//! // Replay and release under the session's barrier: identical requests
//! // never both run.
//! let admission = barrier.enter();
//! let replay = receipts.find(&req).map_err(|e| FrontendError::new(Code::IoError, format!("receipt: {e}")));
//! let result = match replay {
//!     Err(e) => ReleaseResult::denied(&paths, &e).failed(),
//!     Ok(Some(recorded)) => recorded,
//!     Ok(None) => match req
//!         .check_shape()
//!         .and_then(|()| req.check_binding(Some(session)))
//!         .and_then(|b| req.targets(&key, b, &layout))
//!     {
//!         Err(e) => ReleaseResult::denied(&paths, &e),
//!         Ok(targets) => {
//!             let rr = ReleaseRequest { layout: &layout, thread_id: session.thread_id, targets: &targets };
//!             let report = release(&rr, &admission, &IdleOwner, &ReleaseOptions::default());
//!             let id = report.touched.then(|| Fingerprint::of(&req).to_hex());
//!             let result = ReleaseResult::of_report(&report, id);
//!             match report.touched {
//!                 // The receipt, durably, then the answer.
//!                 true => match receipts.record(&req, &result) {
//!                     Ok(_) => result,
//!                     Err(e) => result.receipt_unavailable(&e),
//!                 },
//!                 false => result,
//!             }
//!         }
//!     },
//! };
//! drop(admission);
//! println!("{}", result.to_value());
//! # Ok(())
//! # }
//! ```
//!
//! Every platform: off Linux the library builds (CI checks it with
//! `--cfg winx_foreign`), [`request::ReleaseArgs::targets`] refuses with
//! `unsupported_platform`, and receipts are never needed.
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod error;
pub mod receipt;
pub mod request;
pub mod result;
pub mod token;

pub use error::{Code, FrontendError};
pub use receipt::{Fingerprint, ReceiptStore};
pub use result::{ReleaseCode, ReleaseResult};
pub use token::{TokenKey, TokenSubject};
