//! The guarded release transaction.
//!
//! All targets are checked before removal begins: exact paths, the owner's
//! execution state, each target opened through directory handles and
//! re-identified and re-hashed against its pin, and the backing roots
//! scanned for links, unsupported entries and aliases. Then, as a small
//! synchronous section, each target is moved with `RENAME_NOREPLACE` into a
//! private quarantine, the captured object is re-identified and re-hashed,
//! and only the verified pinned object is unlinked. Anything else is put
//! back without overwriting, or preserved in quarantine and named.
//!
//! [`release`] runs the steps of the architecture's data flow, one file
//! each:
//! - `check.rs` (steps `owner` and `check`): request shape and placement,
//!   the owner's execution state, every target opened through directory
//!   handles ([`crate::preflight`]) and re-identified, then re-hashed in one
//!   batch;
//! - `backing.rs` (step `scan`): the backing-root scan. It needs only the
//!   targets' identities, so it runs on its own thread while `check`
//!   hashes; both finish before anything moves;
//! - `in_use.rs` (step `in_use`): no process holds a target, and the kernel
//!   knows of no holder that no descriptor table shows;
//! - `capture.rs` (step `capture`): quarantine and journal, then per target
//!   rename, recheck, unlink or restore;
//! - `freed.rs`: what each removal freed, as the kernel tells it (inotify's
//!   `IN_DELETE_SELF` once the release closed its descriptors);
//! - `finish.rs` (step `finish`): durability and the report;
//! - `descriptors.rs`: the descriptor table a long-lived owner grows once
//!   for the caches of steps `scan` and `in_use`.
//!
//! # References
//! - [`renameat2(2)`](https://man7.org/linux/man-pages/man2/renameat2.2.html)
//! - [`unlinkat(2)`](https://man7.org/linux/man-pages/man2/unlinkat.2.html)
//! - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)

#[cfg(all(target_os = "linux", not(winx_foreign)))]
use std::collections::HashSet;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use std::io;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use std::os::fd::AsFd;
use std::path::PathBuf;

#[cfg(all(target_os = "linux", not(winx_foreign)))]
use crate::admission::AdmissionGuard;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use crate::error::Refusal;
use crate::error::{Reason, TargetCode, TargetReason};
use crate::fault::FaultHook;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use crate::fault::FaultPoint;
use crate::layout::Layout;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use crate::no_space::reason_of;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use crate::owner::RuntimeOwner;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
use crate::scan::ScanLimits;
use winx_release_kernel::identity::Pin;

#[cfg(all(target_os = "linux", not(winx_foreign)))]
mod backing;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
mod capture;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
mod check;
mod display;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
mod finish;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
mod freed;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub mod in_use;
mod unmoved;
// Every platform but Linux: `release()` answers `unsupported_platform`.
#[cfg(not(all(target_os = "linux", not(winx_foreign))))]
mod foreign;

pub use crate::preflight::MAX_TARGETS;
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub(crate) use backing::{open_backing_roots, scan_backing_roots, scan_backing_shared};
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub use backing::{prewarm_backing_roots, Scanner};
#[cfg(not(all(target_os = "linux", not(winx_foreign))))]
pub use foreign::release;

/// One target of a release: its exact path and what its read pinned.
///
/// On the wire (JSON) the path is a string; a path that is not UTF-8 can be
/// released by an embedder that calls [`release()`] directly, but does not
/// serialise (`serde` refuses it rather than changing a byte).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Target {
    /// The exact path.
    pub path: PathBuf,
    /// The pinned identity and digest.
    pub pin: Pin,
}

impl Target {
    /// A target at `path` (any bytes: it need not be UTF-8) with its pin.
    pub fn new(path: impl AsRef<std::path::Path>, pin: Pin) -> Target {
        Target { path: path.as_ref().to_path_buf(), pin }
    }
}

/// A release request as the engine receives it.
#[derive(Clone, Debug)]
pub struct ReleaseRequest<'a> {
    /// The workspace and data directory.
    pub layout: &'a Layout,
    /// The thread whose session the targets must belong to.
    pub thread_id: &'a str,
    /// The targets, in request order.
    pub targets: &'a [Target],
}

/// Knobs of one release. Off Linux only `faults` exists: build it with
/// `..ReleaseOptions::default()` to compile everywhere.
pub struct ReleaseOptions<'a> {
    /// The scan bound.
    #[cfg(all(target_os = "linux", not(winx_foreign)))]
    pub scan_limits: ScanLimits,
    /// How step `scan` runs (default: a fresh scan on
    /// [`crate::scan::auto_backend`]).
    #[cfg(all(target_os = "linux", not(winx_foreign)))]
    pub scanner: Scanner<'a>,
    /// Fault points, for tests.
    pub faults: Option<&'a dyn FaultHook>,
    /// Stop right after `in_use`: every check runs, nothing is journaled or
    /// captured, and a run that passed them all reports `completed`,
    /// `touched: false`, each target `not_attempted` (an operator's
    /// `--dry-run`).
    pub dry_run: bool,
}

impl Default for ReleaseOptions<'_> {
    fn default() -> Self {
        ReleaseOptions {
            #[cfg(all(target_os = "linux", not(winx_foreign)))]
            scan_limits: ScanLimits::default(),
            #[cfg(all(target_os = "linux", not(winx_foreign)))]
            scanner: Scanner::Fresh(crate::scan::auto_backend()),
            faults: None,
            dry_run: false,
        }
    }
}

/// The outcome of one target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The pinned object was verified in quarantine and removed.
    Released,
    /// What was captured was not the pinned object; it is back under its name.
    Restored,
    /// It could not be put back; it stays at `quarantine_path`.
    Preserved,
    /// The whole request was refused before anything was touched.
    Denied,
    /// A late failure stopped the run before this target; it was not touched.
    NotAttempted,
    /// This target failed; it is at its original path.
    Failed,
}

/// The result of one target.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TargetResult {
    /// The exact path, as requested.
    pub file_path: String,
    /// What happened.
    pub outcome: Outcome,
    /// The reason code, if any.
    pub reason: Option<TargetCode>,
    /// Bytes its removal freed (allocated blocks × 512).
    pub bytes_reclaimed: u64,
    /// Where it stays, for `preserved`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub quarantine_path: Option<PathBuf>,
}

/// The status of a whole release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Every target was released.
    Completed,
    /// The filesystem was touched but not every target was released.
    Partial,
    /// Refused; nothing was touched.
    Denied,
    /// Malformed request; nothing was touched.
    InvalidInput,
    /// An unexpected error before any target moved; nothing was touched.
    Failed,
}

/// The report of one release.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReleaseReport {
    /// Overall status.
    pub status: Status,
    /// The request-level reason, for `denied` and `invalid_input`
    /// (`errorCode` in JSON, as in the contract's result; `error_code` is
    /// read too, from an older guardian).
    #[serde(rename = "errorCode", alias = "error_code")]
    pub error_code: Option<Reason>,
    /// A human-readable detail of a denial or failure.
    pub detail: Option<String>,
    /// Whether any target moved (the run must be recorded as a receipt).
    pub touched: bool,
    /// Total bytes reclaimed.
    pub bytes_reclaimed: u64,
    /// Per-target results, in request order.
    pub files: Vec<TargetResult>,
}

impl ReleaseReport {
    /// The request's `errorCode` (contract sections 3 and 4): the reason of
    /// a denial or invalid input; for a run that failed before anything
    /// moved (`failed`, not touched), the reason of its failed target
    /// (`no_space` or `io_error`); `None` otherwise.
    pub fn request_code(&self) -> Option<TargetCode> {
        match self.status {
            Status::Denied | Status::InvalidInput => Some(self.error_code.unwrap_or(Reason::InvalidInput).into()),
            Status::Failed if !self.touched => Some(
                self.files
                    .iter()
                    .find(|f| f.outcome == Outcome::Failed)
                    .and_then(|f| f.reason)
                    .unwrap_or(TargetReason::IoError.into()),
            ),
            _ => None,
        }
    }

    /// The `denied` (or `invalid_input`) report of `refusal` for `paths`,
    /// nothing touched.
    #[cfg(all(target_os = "linux", not(winx_foreign)))]
    pub(crate) fn refused(paths: &[String], refusal: Refusal) -> Self {
        ReleaseReport::denied(paths, refusal.reason, &refusal.own, refusal.detail)
    }

    /// A report refusing every target with `reason`; per-target reasons
    /// override it where a target has its own.
    pub fn denied(targets: &[String], reason: Reason, own: &[Option<Reason>], detail: impl Into<String>) -> Self {
        let files = targets
            .iter()
            .enumerate()
            .map(|(i, p)| TargetResult {
                file_path: p.clone(),
                outcome: Outcome::Denied,
                reason: Some(own.get(i).copied().flatten().unwrap_or(reason).into()),
                bytes_reclaimed: 0,
                quarantine_path: None,
            })
            .collect();
        ReleaseReport {
            status: if reason.is_invalid_input() { Status::InvalidInput } else { Status::Denied },
            error_code: Some(reason),
            detail: Some(detail.into()),
            touched: false,
            bytes_reclaimed: 0,
            files,
        }
    }
}

/// Releases (removes) the pinned helpers of one request, under the caller's
/// admission barrier: all targets and the backing roots are checked before
/// anything moves, then each target is captured into a private quarantine,
/// rechecked, and only the verified pinned object is unlinked.
///
/// The steps, one file each: `check` (shape and placement, the owner's
/// answers, `crate::preflight::open_all`, each identity against its pin,
/// the bytes re-hashed), `scan` (the backing roots, beside the re-hash),
/// `in_use`, `capture` and `finish`.
///
/// The caller holds the session's admission barrier for the whole call
/// (`admission`: the compiler checks that one is held, see
/// [`crate::admission`]) and answers for its executions through `owner`; the engine never signals or
/// kills a process. Blocking: a release reads every target and walks the
/// backing roots (run it on a blocking thread in an async guardian). Never
/// panics on bad input.
///
/// # Errors
/// Returns a [`ReleaseReport`], never an `Err`. Nothing is touched when its
/// status is [`Status::Denied`] or [`Status::InvalidInput`] (with
/// `error_code`) or [`Status::Failed`] with `touched == false`:
/// - shape and placement: [`Reason::FileCount`], [`Reason::DuplicatePath`],
///   [`Reason::PathNotExact`], [`Reason::GlobNotAllowed`] (these four are
///   `invalid_input`), [`Reason::ReservedNamespace`],
///   [`Reason::OtherSession`], [`Reason::NotSessionHelper`];
/// - the owner: [`Reason::OwnerUnsupported`], [`Reason::PendingActions`],
///   [`Reason::ExecutionActive`];
/// - each target: [`Reason::Symlink`], [`Reason::NotFound`],
///   [`Reason::NotRegularFile`], [`Reason::Hardlink`],
///   [`Reason::RenameUnsupported`], [`Reason::ReadRequired`] (identity or
///   bytes not the pinned ones);
/// - the backing roots: [`Reason::BackingAlias`], [`Reason::BackingSymlink`],
///   [`Reason::BackingUnsupportedEntry`], [`Reason::BackingInaccessible`],
///   [`Reason::BackingScanLimit`];
/// - [`Reason::InUse`]; [`Reason::UnsupportedPlatform`] off Linux;
/// - `failed`, untouched, [`TargetReason::NoSpace`] or
///   [`TargetReason::IoError`]: the journal, its lock or the quarantine
///   could not be written ([`ReleaseReport::request_code`]).
///
/// A run that touched the filesystem is [`Status::Completed`] or
/// [`Status::Partial`]; each target then is `released`, `restored`
/// ([`TargetReason::ReplacedDuringRelease`]), `preserved`
/// ([`TargetReason::RestoreBlocked`], with its quarantine path), `failed`
/// ([`TargetReason::NoSpace`], [`TargetReason::IoError`]) or
/// `not_attempted` ([`TargetReason::StoppedAfterFailure`]). A denial's
/// `detail` names the first refused target and why, for instance
/// `/w/.winx/tmp/session-…/x.sh: read_required (its content changed since
/// it was read)`.
///
/// # References
/// - [`renameat2(2)`](https://man7.org/linux/man-pages/man2/renameat2.2.html) (`RENAME_NOREPLACE`)
/// - [`unlinkat(2)`](https://man7.org/linux/man-pages/man2/unlinkat.2.html)
/// - [`openat2(2)`](https://man7.org/linux/man-pages/man2/openat2.2.html)
/// - [`statx(2)`](https://man7.org/linux/man-pages/man2/statx.2.html)
#[cfg(all(target_os = "linux", not(winx_foreign)))]
pub fn release(
    req: &ReleaseRequest<'_>,
    admission: &AdmissionGuard<'_>,
    owner: &dyn RuntimeOwner,
    opts: &ReleaseOptions<'_>,
) -> ReleaseReport {
    // Held for the whole call by the caller; nothing to do with it here.
    let _ = admission;
    // The paths as reports name them (a non-UTF-8 byte shown as U+FFFD).
    let paths: Vec<String> = req.targets.iter().map(|t| t.path.to_string_lossy().into_owned()).collect();
    if !cfg!(target_os = "linux") {
        return ReleaseReport::denied(&paths, Reason::UnsupportedPlatform, &[], "release is supported on Linux only");
    }
    let mut steps = StepTimes::start();
    let in_flight = InFlight::enter();
    // Steps `owner` and `check` (identities), then `check` (bytes) and
    // `scan`, side by side unless the batch is small.
    let mut opened = match check::open_targets(req, owner, &paths) {
        Ok(o) => o,
        Err(report) => return report,
    };
    let aliases: HashSet<_> = opened.targets.iter().map(|c| c.pin.physical()).collect();
    // The targets are checked: any scan that starts from now on will do.
    let checked_at = std::time::Instant::now();
    let run_scan = || {
        fault(opts, FaultPoint::BeforeScan).map(|()| match opts.scanner {
            Scanner::Shared(shared) => scan_backing_shared(req.layout, shared, opts.scan_limits, &aliases, checked_at),
            Scanner::Fresh(backend) => scan_backing_roots(req.layout, backend, opts.scan_limits, &aliases),
        })
    };
    // A small batch is re-hashed in less time than starting a thread
    // takes: then the two run one after the other on this thread.
    let bytes = opened.targets.iter().fold(0u64, |t, c| t.saturating_add(c.pin.size));
    let (own, scan) = if bytes < crate::rehash::SMALL_BATCH_BYTES {
        let own = check::rehash_targets(&mut opened);
        (own, Ok(run_scan()))
    } else {
        std::thread::scope(|s| match std::thread::Builder::new().spawn_scoped(s, run_scan) {
            Ok(scan) => {
                let own = check::rehash_targets(&mut opened);
                (own, scan.join())
            }
            // No thread to be had: one after the other.
            Err(_) => (check::rehash_targets(&mut opened), Ok(run_scan())),
        })
    };
    steps.mark("check+scan");
    let why = |_| Some("its content changed since it was read".to_owned());
    if let Some(refusal) = Refusal::of_targets(&paths, own, why) {
        return ReleaseReport::refused(&paths, refusal);
    }
    let scan = match scan {
        Ok(Ok(scan)) => scan,
        Ok(Err(e)) => return failed_untouched(&paths, reason_of(&e), format!("before scan: {e}")),
        Err(_) => return failed_untouched(&paths, TargetReason::IoError, "the backing-root scan panicked".to_owned()),
    };
    if scan.failed_closed() {
        let reason = scan.reason.unwrap_or(Reason::BackingInaccessible);
        let at = scan.path.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
        return ReleaseReport::denied(&paths, reason, &[], format!("backing-root scan failed closed at {at}"));
    }
    if let Err(e) = fault(opts, FaultPoint::AfterChecks) {
        return failed_untouched(&paths, reason_of(&e), format!("after checks: {e}"));
    }
    // Last check before anything moves: no other process holds a target.
    let held: Vec<in_use::Held<'_>> = opened
        .targets
        .iter()
        .map(|c| in_use::Held { path: &paths[c.index], id: c.pin.physical(), file: c.file.as_fd() })
        .collect();
    // When this is the only release of the process in flight, the
    // quarantine and the journal's intent (the start of step `capture`)
    // are made on a second thread while `in_use` runs: neither moves a
    // byte, the first rename waits for both, and a denial undoes them. On
    // one release at rest the two take about the same time (0.5 and 0.6
    // ms), so the release waits for the longer, not the sum. With others
    // in flight the cores are busy with them, and a thread per release
    // only costs its start (benches/log/2026-12.md, stop 45).
    let exempt = owner.in_use_exempt();
    let one_after_the_other = || {
        let in_use = in_use::in_use(&held, &exempt);
        let begun = in_use.is_none().then(|| Ok(capture::begin(req, opts, &opened)));
        (in_use, begun)
    };
    let (in_use, begun) = if opts.dry_run {
        (in_use::in_use(&held, &exempt), None)
    } else if in_flight.others() > 0 {
        one_after_the_other()
    } else {
        std::thread::scope(|s| {
            match std::thread::Builder::new().spawn_scoped(s, || capture::begin(req, opts, &opened)) {
                Ok(begin) => {
                    let in_use = in_use::in_use(&held, &exempt);
                    (in_use, Some(begin.join()))
                }
                // No thread to be had: as with others in flight.
                Err(_) => one_after_the_other(),
            }
        })
    };
    steps.mark("in_use+journal");
    drop(held);
    if let Some(detail) = in_use {
        if let Some(Ok(Ok(run))) = begun {
            run.abandon(opts, opened.session.as_fd());
        }
        return ReleaseReport::denied(&paths, Reason::InUse, &[], detail);
    }
    // Steps `capture`, then `finish`.
    let mut run = match begun {
        None => return dry_run_report(&paths),
        Some(Ok(Ok(run))) => run,
        Some(Ok(Err(report))) => return report,
        Some(Err(_)) => {
            return failed_untouched(
                &paths,
                TargetReason::IoError,
                "the quarantine and journal step panicked".to_owned(),
            )
        }
    };
    let freed = freed::Freed::new();
    let (mut files, touched) = capture::capture_all(&mut run, opts, &opened.targets, &freed);
    // Every descriptor the release holds of a target closed: what is freed
    // now is what the removals freed.
    let check::Opened { session, targets, .. } = opened;
    drop(targets);
    freed.settle(&mut files);
    steps.mark("capture");
    let report = finish::finish(run, opts, &session, files, touched);
    steps.mark("finish");
    steps.log(req.targets.len());
    report
}

/// Releases of this process between their start and their end.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
static IN_FLIGHT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One release counted in [`IN_FLIGHT`] while it lives.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
struct InFlight;

#[cfg(all(target_os = "linux", not(winx_foreign)))]
impl InFlight {
    fn enter() -> InFlight {
        IN_FLIGHT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        InFlight
    }

    /// How many other releases of this process are in flight now.
    fn others(&self) -> usize {
        IN_FLIGHT.load(std::sync::atomic::Ordering::Relaxed).saturating_sub(1)
    }
}

#[cfg(all(target_os = "linux", not(winx_foreign)))]
impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The report of a dry run that passed every check: nothing touched, each
/// target `not_attempted`.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
fn dry_run_report(paths: &[String]) -> ReleaseReport {
    let files = paths
        .iter()
        .map(|p| TargetResult {
            file_path: p.clone(),
            outcome: Outcome::NotAttempted,
            reason: None,
            bytes_reclaimed: 0,
            quarantine_path: None,
        })
        .collect();
    ReleaseReport {
        status: Status::Completed,
        error_code: None,
        detail: Some("dry run: every check passed; nothing was captured".to_owned()),
        touched: false,
        bytes_reclaimed: 0,
        files,
    }
}

/// The wall time of each step of one release, logged at `debug` level
/// (`RUST_LOG=winx_release_engine::release=debug`; benches/PROFILE.md reads
/// it). Only a run that reaches `finish` is logged.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
struct StepTimes {
    last: std::time::Instant,
    start: std::time::Instant,
    marks: Vec<(&'static str, u128)>,
}

#[cfg(all(target_os = "linux", not(winx_foreign)))]
impl StepTimes {
    fn start() -> StepTimes {
        let now = std::time::Instant::now();
        StepTimes { last: now, start: now, marks: Vec::with_capacity(6) }
    }

    fn mark(&mut self, step: &'static str) {
        let now = std::time::Instant::now();
        self.marks.push((step, now.duration_since(self.last).as_micros()));
        self.last = now;
    }

    fn log(&self, targets: usize) {
        if tracing::enabled!(tracing::Level::DEBUG) {
            let steps: Vec<String> = self.marks.iter().map(|(s, us)| format!("{s}={us}")).collect();
            let total = self.last.duration_since(self.start).as_micros();
            tracing::debug!(targets, total_us = total, steps = %steps.join(" "), "release steps (us)");
        }
    }
}

#[cfg(all(target_os = "linux", not(winx_foreign)))]
fn fault(opts: &ReleaseOptions<'_>, point: FaultPoint<'_>) -> io::Result<()> {
    match opts.faults {
        Some(h) => h.at(&point),
        None => Ok(()),
    }
}

/// A run that failed before any target moved: the first target `failed`
/// with `reason` (`no_space` or `io_error`, which is also the request's
/// `errorCode`, see [`ReleaseReport::request_code`]), the rest
/// `not_attempted`.
#[cfg(all(target_os = "linux", not(winx_foreign)))]
fn failed_untouched(paths: &[String], reason: TargetReason, detail: String) -> ReleaseReport {
    let files = paths
        .iter()
        .enumerate()
        .map(|(i, p)| TargetResult {
            file_path: p.clone(),
            outcome: if i == 0 { Outcome::Failed } else { Outcome::NotAttempted },
            reason: Some(if i == 0 { reason } else { TargetReason::StoppedAfterFailure }.into()),
            bytes_reclaimed: 0,
            quarantine_path: None,
        })
        .collect();
    ReleaseReport {
        status: Status::Failed,
        error_code: None,
        detail: Some(detail),
        touched: false,
        bytes_reclaimed: 0,
        files,
    }
}
