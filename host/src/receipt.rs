//! Durable receipts of releases that touched the filesystem.
//!
//! A receipt lives at `D/receipts/<hh>/<fingerprint>.json`, `<hh>` being
//! the fingerprint's first two hex digits (the directories are created
//! 0700, the file 0600, written with a temporary file, fsync, rename and a
//! directory fsync). `D/receipts` is a backing root that every release
//! scans, and a release's directory cache reads a changed directory whole:
//! with the receipts spread over up to 256 shard directories, a new receipt
//! makes the next release read one shard (about 1/256 of the receipts
//! kept) instead of all of them. Receipts an earlier version wrote flat, at
//! `D/receipts/<fingerprint>.json`, are still found (and still pruned by
//! retention). The fingerprint is the SHA-256 of a length-framed
//! ([`frame`]) canonical encoding of the whole release request: the domain tag
//! `winx-release/release-request/v1`, the thread id, the workspace root, the
//! number of entries, then per entry in order its path, mode, expected
//! revision and generation token (a presence byte first, since a token may be
//! absent).
//!
//! A receipt stores the request's thread, workspace and entries besides the
//! result; a lookup returns a receipt only when all of them equal the
//! request's, so a request of another thread or workspace can never fetch it.
//! Only runs that touched the filesystem are recorded; pure denials are not.
//!
//! The file is a JSON object: `version` ([`RECEIPT_VERSION`]),
//! `receipt_id` (the fingerprint, hex), `thread_id`, `workspace_root`,
//! `entries` (the request's entries as parsed), `recorded_at_unix`, and
//! `result`: the [`ReleaseResult`] as first returned. Retention
//! (`winx-release guardian --keep-receipts-days`) removes receipts by age.
//!
//! A host finds the receipt of a request under the session's admission
//! barrier, and records one before it answers, under the same barrier: so
//! two identical requests of one session never both run.
//!
//! Off Linux no release ever touches the filesystem: there is nothing to
//! record, [`ReceiptStore::find`] finds nothing and
//! [`ReceiptStore::record`] fails with `Unsupported`.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use winx_release_engine::ReleaseReport;

use crate::request::{ReleaseArgs, ReleaseEntry};
use crate::result::ReleaseResult;
use crate::token::frame;

/// The domain tag, the first framed field of every request fingerprint.
pub const FINGERPRINT_DOMAIN: &str = "winx-release/release-request/v1";
/// Format version of a stored receipt.
pub const RECEIPT_VERSION: u32 = 1;
/// Largest receipt file read back (bigger ones are refused as corrupt).
pub const MAX_RECEIPT_BYTES: u64 = 16 * 1024 * 1024;

/// The fingerprint of a release request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// The fingerprint of `req` (see the module docs for the encoding).
    pub fn of(req: &ReleaseArgs) -> Fingerprint {
        let mut m = Vec::with_capacity(512);
        frame(&mut m, FINGERPRINT_DOMAIN.as_bytes());
        frame(&mut m, req.thread_id.as_bytes());
        frame(&mut m, req.workspace_root.as_bytes());
        frame(&mut m, &(req.entries.len() as u64).to_be_bytes());
        for e in &req.entries {
            frame(&mut m, e.file_path.as_bytes());
            frame(&mut m, e.mode.as_bytes());
            frame(&mut m, e.expected_revision.as_bytes());
            match &e.artifact_generation {
                Some(t) => {
                    frame(&mut m, &[1]);
                    frame(&mut m, t.as_bytes());
                }
                None => frame(&mut m, &[0]),
            }
        }
        Fingerprint(Sha256::digest(&m).into())
    }

    /// 64 lowercase hex digits: the receipt id and file stem.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

/// A stored receipt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    /// [`RECEIPT_VERSION`].
    pub version: u32,
    /// The fingerprint, hex.
    pub receipt_id: String,
    /// The request's thread.
    pub thread_id: String,
    /// The request's workspace root.
    pub workspace_root: String,
    /// The request's entries, in order.
    pub entries: Vec<ReleaseEntry>,
    /// When it was recorded (seconds since the epoch).
    pub recorded_at_unix: u64,
    /// The full `EditFiles` release result as first returned.
    pub result: Value,
}

/// The receipts directory `D/receipts`.
#[derive(Clone, Debug)]
pub struct ReceiptStore {
    dir: PathBuf,
}

impl ReceiptStore {
    /// The store of data directory `data_dir` (`data_dir/receipts`).
    pub fn new(data_dir: &Path) -> ReceiptStore {
        ReceiptStore { dir: data_dir.join("receipts") }
    }

    /// The receipts directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the receipt of `fp` is written: in its shard directory.
    pub fn path_of(&self, fp: &Fingerprint) -> PathBuf {
        let hex = fp.to_hex();
        self.dir.join(&hex[..2]).join(format!("{hex}.json"))
    }

    /// Where an earlier version wrote the receipt of `fp`: flat in
    /// `D/receipts`.
    pub fn flat_path_of(&self, fp: &Fingerprint) -> PathBuf {
        self.dir.join(format!("{}.json", fp.to_hex()))
    }

    /// The recorded result of `req`, marked `"replayed": true`, if a receipt
    /// of exactly this request exists. Touches nothing.
    ///
    /// # Errors
    /// A receipt file that cannot be read or parsed (the caller fails
    /// closed); one recorded for other parameters is ignored.
    pub fn find(&self, req: &ReleaseArgs) -> io::Result<Option<ReleaseResult>> {
        let Some(result) = self.lookup(req)? else { return Ok(None) };
        serde_json::from_value(result).map(Some).map_err(|e| {
            let msg = format!("receipt {}: result: {e}", self.path_of(&Fingerprint::of(req)).display());
            io::Error::new(io::ErrorKind::InvalidData, msg)
        })
    }

    /// [`ReceiptStore::find`], the result as the JSON object it was stored
    /// as (`"replayed": true`).
    ///
    /// # Errors
    /// As [`ReceiptStore::find`].
    pub fn lookup(&self, req: &ReleaseArgs) -> io::Result<Option<Value>> {
        durable::lookup(self, req)
    }

    /// The answer to `req` whose release returned `report`: a run that
    /// touched the filesystem is recorded as a receipt, durably, before it
    /// is answered (its `receipt_id` the request's fingerprint); when the
    /// receipt cannot be written, the answer is `failed` with
    /// `receipt_unavailable` and every target's outcome. A run that touched
    /// nothing is answered as it is, unrecorded.
    pub fn answer(&self, req: &ReleaseArgs, report: &ReleaseReport) -> ReleaseResult {
        if !report.touched {
            return ReleaseResult::of_report(report, None);
        }
        let result = ReleaseResult::of_report(report, Some(Fingerprint::of(req).to_hex()));
        match self.record(req, &result) {
            Ok(_) => result,
            Err(e) => result.receipt_unavailable(&e),
        }
    }

    /// Records `result` (the release result, `replayed: false`) as the
    /// receipt of `req`, durably (temporary file, fsync, rename, directory
    /// fsync), before the caller answers.
    ///
    /// # Errors
    /// The receipt could not be written: answer `failed` with
    /// `receipt_unavailable` ([`ReleaseResult::receipt_unavailable`]).
    pub fn record(&self, req: &ReleaseArgs, result: &ReleaseResult) -> io::Result<Fingerprint> {
        let value = serde_json::to_value(result).map_err(io::Error::other)?;
        durable::record(self, req, value)
    }
}

/// The on-disk part (Linux).
#[cfg(all(target_os = "linux", not(winx_foreign)))]
mod durable {
    use std::fs::File;
    use std::io::{self, Read};
    use std::path::Path;
    use std::time::{SystemTime, UNIX_EPOCH};

    use serde_json::Value;
    use winx_release_kernel::sys::{create_private_dir_all, fsync_dir, write_durable};

    use super::{Fingerprint, Receipt, ReceiptStore, MAX_RECEIPT_BYTES, RECEIPT_VERSION};
    use crate::request::ReleaseArgs;

    pub(super) fn lookup(store: &ReceiptStore, req: &ReleaseArgs) -> io::Result<Option<Value>> {
        let fp = Fingerprint::of(req);
        // A regular file only, never through a link, never a wait (a fifo).
        let open = |path: &Path| match winx_release_kernel::sys::open_regular(path) {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io::Error::new(e.kind(), format!("receipt {}: {e}", path.display()))),
        };
        let (path, flat) = (store.path_of(&fp), store.flat_path_of(&fp));
        let (file, path) = match open(&path)? {
            Some(f) => (f, path),
            None => match open(&flat)? {
                Some(f) => (f, flat),
                None => return Ok(None),
            },
        };
        let receipt = read_receipt(file).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let same = receipt.version == RECEIPT_VERSION
            && receipt.receipt_id == fp.to_hex()
            && receipt.thread_id == req.thread_id
            && receipt.workspace_root == req.workspace_root
            && receipt.entries == req.entries;
        if !same {
            return Ok(None);
        }
        let mut result = receipt.result;
        match result.as_object_mut() {
            Some(obj) => {
                obj.insert("replayed".to_owned(), Value::Bool(true));
            }
            None => return Err(io::Error::new(io::ErrorKind::InvalidData, "receipt result is not an object")),
        }
        Ok(Some(result))
    }

    pub(super) fn record(store: &ReceiptStore, req: &ReleaseArgs, result: Value) -> io::Result<Fingerprint> {
        let fp = Fingerprint::of(req);
        let dir = store.dir();
        if !dir.is_dir() {
            create_private_dir_all(dir)?;
            if let Some(parent) = dir.parent() {
                fsync_dir(parent)?;
            }
        }
        let receipt = Receipt {
            version: RECEIPT_VERSION,
            receipt_id: fp.to_hex(),
            thread_id: req.thread_id.clone(),
            workspace_root: req.workspace_root.clone(),
            entries: req.entries.clone(),
            recorded_at_unix: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
            result,
        };
        let bytes = serde_json::to_vec_pretty(&receipt).map_err(io::Error::other)?;
        let path = store.path_of(&fp);
        let shard = path.parent().unwrap_or(dir);
        match std::fs::symlink_metadata(shard) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                let msg = format!("receipt shard {} is not a directory", shard.display());
                return Err(io::Error::new(io::ErrorKind::InvalidData, msg));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                create_private_dir_all(shard)?;
                fsync_dir(dir)?;
            }
            Err(e) => return Err(e),
        }
        write_durable(&path, &bytes)?;
        Ok(fp)
    }

    fn read_receipt(file: File) -> io::Result<Receipt> {
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "receipt is not a regular file"));
        }
        let mut bytes = Vec::new();
        file.take(MAX_RECEIPT_BYTES + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > MAX_RECEIPT_BYTES {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "receipt too large"));
        }
        serde_json::from_slice(&bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }
}

/// Off Linux nothing is ever touched: nothing to find, nothing to record.
#[cfg(not(all(target_os = "linux", not(winx_foreign))))]
mod durable {
    use std::io;

    use serde_json::Value;

    use super::{Fingerprint, ReceiptStore};
    use crate::request::ReleaseArgs;

    pub(super) fn lookup(_: &ReceiptStore, _: &ReleaseArgs) -> io::Result<Option<Value>> {
        Ok(None)
    }

    pub(super) fn record(_: &ReceiptStore, _: &ReleaseArgs, _: Value) -> io::Result<Fingerprint> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "receipts are recorded on Linux only"))
    }
}

#[cfg(all(test, target_os = "linux", not(winx_foreign)))]
mod tests {
    use super::*;
    use serde_json::json;
    use std::os::unix::fs::PermissionsExt;

    fn req(thread: &str, ws: &str) -> ReleaseArgs {
        ReleaseArgs {
            thread_id: thread.into(),
            workspace_root: ws.into(),
            entries: vec![ReleaseEntry {
                file_path: format!("{ws}/.winx/tmp/session-0/h.py"),
                mode: "release_temporary".into(),
                expected_revision: format!("sha256:{}", "0".repeat(64)),
                artifact_generation: Some(format!("g1.{}", "a".repeat(64))),
            }],
        }
    }

    fn result() -> ReleaseResult {
        serde_json::from_value(json!({"status": "completed", "operation": "release_temporary", "replayed": false,
            "bytes_reclaimed": 4096, "receipt_id": "k",
            "files": [{"file_path": "/x", "outcome": "released", "reason": null, "bytes_reclaimed": 4096}]}))
        .unwrap()
    }

    /// `answer` records a touching run before answering, and nothing else;
    /// a receipt that cannot be written fails the answer.
    #[test]
    fn answer_records_touching_runs_only() {
        use winx_release_engine::{Outcome, Status, TargetResult};
        let d = tempfile::tempdir().unwrap();
        let store = ReceiptStore::new(d.path());
        let r = req("t1", "/ws");
        let file = TargetResult {
            file_path: "/x".into(),
            outcome: Outcome::Released,
            reason: None,
            bytes_reclaimed: 8,
            quarantine_path: None,
        };
        let mut report = ReleaseReport {
            status: Status::Denied,
            error_code: None,
            detail: None,
            touched: false,
            bytes_reclaimed: 0,
            files: vec![],
        };
        let a = store.answer(&r, &report);
        assert_eq!((a.status, a.receipt_id.as_deref()), (Status::Denied, None));
        assert!(!store.dir().exists(), "a denial is not recorded");
        report =
            ReleaseReport { status: Status::Completed, touched: true, bytes_reclaimed: 8, files: vec![file], ..report };
        let a = store.answer(&r, &report);
        assert_eq!(a.receipt_id, Some(Fingerprint::of(&r).to_hex()));
        assert_eq!(store.find(&r).unwrap(), Some(ReleaseResult { replayed: true, ..a }));
        // The shard is a file: the receipt cannot be written.
        let other = req("t2", "/ws");
        let shard = store.path_of(&Fingerprint::of(&other)).parent().unwrap().to_path_buf();
        assert!(!shard.exists(), "another shard than t1's");
        std::fs::write(&shard, b"").unwrap();
        let a = store.answer(&other, &report);
        assert_eq!((a.status, a.error_code), (Status::Failed, Some(crate::result::ReleaseCode::ReceiptUnavailable)));
        assert_eq!(a.files, report.files);
    }

    /// `find` gives the recorded result, typed, marked replayed.
    #[test]
    fn find_gives_the_typed_result_replayed() {
        let d = tempfile::tempdir().unwrap();
        let store = ReceiptStore::new(d.path());
        let r = req("t1", "/ws");
        assert_eq!(store.find(&r).unwrap(), None);
        store.record(&r, &result()).unwrap();
        let got = store.find(&r).unwrap().unwrap();
        assert_eq!(got, ReleaseResult { replayed: true, ..result() });
        assert_eq!(store.find(&req("t2", "/ws")).unwrap(), None);
        // A stored result that is not a release result is an error, not a
        // replay.
        std::fs::write(
            store.path_of(&Fingerprint::of(&r)),
            serde_json::to_vec(&Receipt {
                version: RECEIPT_VERSION,
                receipt_id: Fingerprint::of(&r).to_hex(),
                thread_id: "t1".into(),
                workspace_root: "/ws".into(),
                entries: r.entries.clone(),
                recorded_at_unix: 0,
                result: json!({"status": "maybe"}),
            })
            .unwrap(),
        )
        .unwrap();
        assert!(store.lookup(&r).unwrap().is_some());
        assert_eq!(store.find(&r).unwrap_err().kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn record_then_replay() {
        let d = tempfile::tempdir().unwrap();
        let store = ReceiptStore::new(d.path());
        let r = req("t1", "/ws");
        assert_eq!(store.lookup(&r).unwrap(), None);
        let fp = store.record(&r, &result()).unwrap();
        assert_eq!(fp, Fingerprint::of(&r));
        let mode = std::fs::metadata(store.dir()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let got = store.lookup(&r).unwrap().unwrap();
        assert_eq!(got["replayed"], json!(true));
        assert_eq!(got["files"], result().to_value()["files"]);
        // Nothing but the receipt's shard in the directory, and nothing but
        // the receipt in the shard (no temporary left over).
        let names: Vec<_> = std::fs::read_dir(store.dir()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, [std::ffi::OsString::from(&fp.to_hex()[..2])]);
        let shard = store.path_of(&fp).parent().unwrap().to_path_buf();
        assert_eq!(std::fs::metadata(&shard).unwrap().permissions().mode() & 0o777, 0o700);
        let names: Vec<_> = std::fs::read_dir(&shard).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, [std::ffi::OsString::from(format!("{}.json", fp.to_hex()))]);
    }

    /// A receipt an earlier version wrote flat in `D/receipts` is still
    /// replayed; a receipt is written into its shard.
    #[test]
    fn a_flat_receipt_of_an_earlier_version_is_still_replayed() {
        let d = tempfile::tempdir().unwrap();
        let store = ReceiptStore::new(d.path());
        let r = req("t1", "/ws");
        let fp = store.record(&r, &result()).unwrap();
        let (sharded, flat) = (store.path_of(&fp), store.flat_path_of(&fp));
        assert!(sharded.starts_with(store.dir().join(&fp.to_hex()[..2])), "{}", sharded.display());
        std::fs::rename(&sharded, &flat).unwrap();
        assert_eq!(store.lookup(&r).unwrap().unwrap()["replayed"], json!(true));
        std::fs::remove_file(&flat).unwrap();
        assert_eq!(store.lookup(&r).unwrap(), None);
    }

    #[test]
    fn other_thread_or_parameters_cannot_fetch() {
        let d = tempfile::tempdir().unwrap();
        let store = ReceiptStore::new(d.path());
        let r = req("t1", "/ws");
        store.record(&r, &result()).unwrap();
        assert_eq!(store.lookup(&req("t2", "/ws")).unwrap(), None);
        let mut other_ws = r.clone();
        other_ws.workspace_root = "/ws2".into();
        assert_eq!(store.lookup(&other_ws).unwrap(), None);
        let mut other_token = r.clone();
        other_token.entries[0].artifact_generation = None;
        assert_eq!(store.lookup(&other_token).unwrap(), None);
        // A receipt file planted under B's fingerprint holding A's request is
        // not B's: the stored thread is compared too.
        let b = req("t2", "/ws");
        std::fs::copy(store.path_of(&Fingerprint::of(&r)), store.flat_path_of(&Fingerprint::of(&b))).unwrap();
        assert_eq!(store.lookup(&b).unwrap(), None);
    }

    #[test]
    fn fingerprint_framing() {
        let a = req("ab", "c");
        let mut b = a.clone();
        b.thread_id = "a".into();
        b.workspace_root = "bc".into();
        b.entries = a.entries.clone();
        assert_ne!(Fingerprint::of(&a), Fingerprint::of(&b));
        let mut empty_token = a.clone();
        empty_token.entries[0].artifact_generation = Some(String::new());
        let mut no_token = a.clone();
        no_token.entries[0].artifact_generation = None;
        assert_ne!(Fingerprint::of(&empty_token), Fingerprint::of(&no_token));
        assert_eq!(Fingerprint::of(&a).to_hex().len(), 64);
    }

    #[test]
    fn corrupt_receipt_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        let store = ReceiptStore::new(d.path());
        let r = req("t1", "/ws");
        std::fs::create_dir_all(store.path_of(&Fingerprint::of(&r)).parent().unwrap()).unwrap();
        std::fs::write(store.path_of(&Fingerprint::of(&r)), b"{not json").unwrap();
        assert!(store.lookup(&r).is_err());
        // A symlink is not followed.
        std::fs::remove_file(store.path_of(&Fingerprint::of(&r))).unwrap();
        let elsewhere = d.path().join("elsewhere.json");
        std::fs::write(&elsewhere, b"{}").unwrap();
        std::os::unix::fs::symlink(&elsewhere, store.path_of(&Fingerprint::of(&r))).unwrap();
        assert!(store.lookup(&r).is_err());
    }
}
