//! `ReadFiles`.
//!
//! A helper of this thread's session (an exact path that places in its
//! session directory) is opened through no-follow directory handles like a
//! release opens it (symlinks, hardlinks and non-regular files refused); its
//! identity is captured from the opened descriptor, its bytes are hashed from
//! the same descriptor, and the content returned is a prefix of exactly those
//! bytes. If the identity changed while reading (a write in between), the
//! read is retried, at most three times, then refused with `read_required`.
//! Only such a helper gets a `temporary_artifact` with a generation token.
//!
//! The helpers of one request are read as one batch: every helper is
//! opened, then all are hashed together by the engine's rehash pipeline
//! (io_uring reads, every core), which keeps each file's first bytes from
//! the same reads that are hashed (`HashJob::keep`). A helper whose identity
//! changed during the batch is read again on its own (the retry above).
//! Each path's entry is handed over as soon as it is known
//! ([`Frontend::read_files_each`], from the hashing threads), so the MCP
//! server can stream the reply; [`Frontend::read_files`] gathers them.
//!
//! Any other absolute path is read normally (links followed), without a
//! token. Content: UTF-8 text up to 256 KiB; `"binary": true` (content
//! `null`) when the bytes are not UTF-8 text or hold a NUL; `"truncated": true`
//! with the first 256 KiB (cut back to a character boundary) when longer.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::FrontendError;
use serde_json::{json, Value};
use winx_release_engine::hash::revision;
use winx_release_engine::hash::{read_and_hash, Head, Keep, ReadBytes, HASH_CHUNK};
use winx_release_engine::path_rules::{place_helper, HelperPath};
use winx_release_engine::rehash::{self, HashJob, RehashOptions};
use winx_release_engine::release::open_session_dir;
use winx_release_engine::resolve::{open_regular_beneath, OpenedFile};
use winx_release_engine::{Identity, Pin, Reason};

use super::{refusal, Frontend, Session};
use crate::error::Code;
use crate::token::TokenSubject;
use crate::wire::ReadFilesArgs;
use winx_release_engine::sync::lock;

/// Most content bytes returned per file.
pub const CONTENT_LIMIT: usize = 256 * 1024;
const READ_TRIES: usize = 3;

/// A consistent read: the identity before and after matched and every byte
/// of the file was read.
pub(crate) struct HelperRead {
    pub(crate) bytes: ReadBytes,
    pub(crate) pin: Pin,
}

/// Reads an opened file consistently, or `None` when it kept changing.
fn consistent_read(fd: &OwnedFd, first: Identity, keep: Keep) -> io::Result<Option<(ReadBytes, Identity)>> {
    let mut before = first;
    let mut buf = vec![0u8; HASH_CHUNK];
    for _ in 0..READ_TRIES {
        let bytes = read_and_hash(fd.as_fd(), &mut buf, keep)?;
        let after = Identity::of_fd(fd)?;
        let same = Pin::new(&before, [0; 32]).matches_identity(&after);
        if same && bytes.len == after.size {
            return Ok(Some((bytes, after)));
        }
        before = after;
    }
    Ok(None)
}

/// Opens helper `h` below the session directory `session` and reads it.
pub(crate) fn read_helper(session: &OwnedFd, h: &HelperPath, keep: Keep) -> Result<HelperRead, Reason> {
    let opened = open_regular_beneath(session.as_fd(), &h.rel)?;
    match consistent_read(&opened.file, opened.identity, keep) {
        Ok(Some((bytes, id))) => {
            if id.nlink > 1 {
                return Err(Reason::Hardlink);
            }
            let pin = Pin::new(&id, bytes.digest);
            Ok(HelperRead { bytes, pin })
        }
        Ok(None) => Err(Reason::ReadRequired),
        Err(_) => Err(Reason::NotFound),
    }
}

/// Sets `content`, `binary` and `truncated` from the first bytes of a file
/// of `size` bytes, kept with [`Keep::Text`]. The bytes become the JSON
/// string without a copy.
fn content_fields(v: &mut Value, head: Head, size: u64) {
    let truncated = size > CONTENT_LIMIT as u64;
    // The head checked every byte once as it was read (UTF-8, no NUL).
    match head.into_text(truncated) {
        Some(t) => {
            v["content"] = Value::String(t);
            v["binary"] = Value::Bool(false);
        }
        None => {
            v["content"] = Value::Null;
            v["binary"] = Value::Bool(true);
        }
    }
    v["truncated"] = Value::Bool(truncated);
}

fn failure(path: &str, code: impl Into<Code>) -> Value {
    json!({"file_path": path, "errorCode": code.into().as_str()})
}

fn read_plain(path: &str) -> Result<Value, Code> {
    if !Path::new(path).is_absolute() || path.contains('\0') {
        return Err(Reason::PathNotExact.into());
    }
    let flags = (rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY | rustix::fs::OFlags::CLOEXEC).bits();
    let file = OpenOptions::new().read(true).custom_flags(flags as i32).open(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => Code::Reason(Reason::NotFound),
        _ if e.raw_os_error() == Some(rustix::io::Errno::ISDIR.raw_os_error()) => Reason::NotRegularFile.into(),
        _ => Code::IoError,
    })?;
    let fd = OwnedFd::from(file);
    let id = Identity::of_fd(&fd).map_err(|_| Code::IoError)?;
    if !id.is_regular() {
        return Err(Reason::NotRegularFile.into());
    }
    let (bytes, _) =
        consistent_read(&fd, id, Keep::Text(CONTENT_LIMIT)).map_err(|_| Code::IoError)?.ok_or(Code::IoError)?;
    let mut v = json!({"file_path": path, "revision": revision(&bytes.digest), "size": bytes.len});
    content_fields(&mut v, bytes.head, bytes.len);
    Ok(v)
}

/// One path's entry of a `ReadFiles` result: its `files` object, or its
/// `failed_files` object.
pub type ReadEntry = Result<Value, Value>;

/// The `ReadFiles` result of the paths' entries, in request order: `status`
/// (`completed`, `partial` or `failed`), `files` and `failed_files`.
pub fn read_files_result(entries: impl IntoIterator<Item = ReadEntry>) -> Value {
    let (mut files, mut failed) = (Vec::new(), Vec::new());
    for e in entries {
        match e {
            Ok(v) => files.push(v),
            Err(v) => failed.push(v),
        }
    }
    // `Value::Array`, not `json!`: the macro would serialise a deep copy of
    // every file's content.
    let mut out = json!({"status": read_status(files.len(), failed.len())});
    out["files"] = Value::Array(files);
    out["failed_files"] = Value::Array(failed);
    out
}

/// The `status` of a `ReadFiles` result with `read` files and `failed`
/// failures.
pub fn read_status(read: usize, failed: usize) -> &'static str {
    match (read, failed) {
        (_, 0) => "completed",
        (0, _) => "failed",
        _ => "partial",
    }
}

impl Frontend {
    /// `ReadFiles`, entry by entry: checks the request, then hands each
    /// path's entry to `each(index, entry)` as soon as it is known — from
    /// any thread, in any order, each index once — and returns the number
    /// of paths. A refusal of the whole request is `Err` with its result,
    /// before any entry. [`Frontend::read_files`] gathers the entries;
    /// the MCP server streams them.
    pub fn read_files_each(&self, args: &Value, each: &(dyn Fn(usize, ReadEntry) + Sync)) -> Result<usize, Value> {
        let a = ReadFilesArgs::parse(args).map_err(|e| whole_refusal(&e))?;
        let session = self.session(&a.thread_id).map_err(|e| whole_refusal(&e))?;
        // Other paths one by one, then the helpers as one batch.
        let mut helpers = Vec::new();
        for (i, p) in a.file_paths.iter().enumerate() {
            match place_helper(&session.layout, &session.thread_id, p) {
                Ok(h) => helpers.push((i, h)),
                Err(_) => each(i, read_plain(p).map_err(|code| failure(p, code))),
            }
        }
        if !helpers.is_empty() {
            match open_session_dir(&session.layout, &session.thread_id) {
                Ok(fd) => self.read_helpers(&session, &fd, &helpers, &|k, r| {
                    let i = helpers[k].0;
                    each(i, r.map_err(|reason| failure(&a.file_paths[i], reason)));
                }),
                Err(r) => {
                    for (i, _) in &helpers {
                        each(*i, Err(failure(&a.file_paths[*i], r)));
                    }
                }
            }
        }
        Ok(a.file_paths.len())
    }

    /// `ReadFiles`: every entry, gathered in request order.
    pub fn read_files(&self, args: Value) -> Value {
        let slots: std::sync::Mutex<Vec<Option<ReadEntry>>> = std::sync::Mutex::new(Vec::new());
        let put = |i: usize, e: ReadEntry| {
            let mut s = lock(&slots);
            if s.len() <= i {
                s.resize_with(i + 1, || None);
            }
            s[i] = Some(e);
        };
        match self.read_files_each(&args, &put) {
            Err(v) => v,
            Ok(n) => {
                let mut s = slots.into_inner().unwrap_or_else(|p| p.into_inner());
                s.resize_with(n, || None);
                read_files_result(s.into_iter().map(|e| e.unwrap_or_else(|| Err(json!({"errorCode": "io_error"})))))
            }
        }
    }

    /// Reads the helpers `helpers` of the session opened as `session_fd`:
    /// opens each, hashes all in one rehash batch keeping their first
    /// [`CONTENT_LIMIT`] bytes, and re-reads on its own any whose identity
    /// changed meanwhile. Hands each result to `done` with the helper's
    /// index in `helpers` as soon as it is known (from the hashing threads).
    fn read_helpers(
        &self,
        session: &Session,
        session_fd: &OwnedFd,
        helpers: &[(usize, HelperPath)],
        done: &(dyn Fn(usize, Result<Value, Reason>) + Sync),
    ) {
        let opened: Vec<Result<OpenedFile, Reason>> =
            helpers.iter().map(|(_, h)| open_regular_beneath(session_fd.as_fd(), &h.rel)).collect();
        // The batch's jobs, and which helper each one is.
        let mut of_job = Vec::with_capacity(opened.len());
        let mut jobs: Vec<HashJob<'_>> = Vec::with_capacity(opened.len());
        for (k, o) in opened.iter().enumerate() {
            match o {
                Ok(o) => {
                    of_job.push(k);
                    jobs.push(HashJob { fd: o.file.as_fd(), limit: None, keep: Keep::Text(CONTENT_LIMIT) });
                }
                Err(r) => done(k, Err(*r)),
            }
        }
        rehash::hash_fds_each(&jobs, &RehashOptions::default(), &|j, batch| {
            let k = of_job[j];
            let (o, h) = (opened[k].as_ref().expect("a job's file was opened"), &helpers[k].1);
            let read = match (batch, Identity::of_fd(&o.file)) {
                (Ok(r), Ok(after))
                    if Pin::new(&o.identity, [0; 32]).matches_identity(&after) && r.len == after.size =>
                {
                    if after.nlink > 1 {
                        return done(k, Err(Reason::Hardlink));
                    }
                    Ok(HelperRead {
                        pin: Pin::new(&after, r.sha256),
                        bytes: ReadBytes { digest: r.sha256, len: r.len, head: r.head },
                    })
                }
                // Changed while the batch read it, or an error: the
                // one-file read with its retries decides.
                _ => read_helper(session_fd, h, Keep::Text(CONTENT_LIMIT)),
            };
            done(k, read.map(|read| self.helper_value(session, h, read)));
        });
    }

    /// The `files` entry of a helper read consistently: its revision, size,
    /// content and a generation token over its pin.
    fn helper_value(&self, session: &Session, h: &HelperPath, r: HelperRead) -> Value {
        let token = self.key.mint(&TokenSubject {
            thread_id: &session.thread_id,
            workspace_root: &session.workspace,
            path: &h.path,
            pin: r.pin,
        });
        let mut v = json!({
            "file_path": h.path,
            "revision": revision(&r.bytes.digest),
            "size": r.bytes.len,
        });
        content_fields(&mut v, r.bytes.head, r.bytes.len);
        v["temporary_artifact"] = json!({"artifact_generation": token, "in_use": null, "releasable": null});
        v
    }
}

/// The result refusing a whole `ReadFiles` request.
fn whole_refusal(e: &FrontendError) -> Value {
    let mut v = refusal(e);
    v["files"] = json!([]);
    v["failed_files"] = json!([]);
    v
}
