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
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use serde_json::{json, Map, Value};
use winx_release_engine::preflight::{check_kernel_shape, place_helper};
use winx_release_engine::read::{read_fd_until, read_pinned_all_until, Head, Keep, PinnedRead};
use winx_release_engine::{Identity, Reason};
use winx_release_host::error::FrontendError;
use winx_release_kernel::sys::lock;

use super::{Frontend, InitializedThread};
use crate::wire::ReadFilesArgs;
use winx_release_host::error::Code;
use winx_release_host::token::TokenSubject;

/// Most content bytes returned per file.
pub const CONTENT_LIMIT: usize = 256 * 1024;

/// One `files` entry of a `ReadFiles` result (contract section 3).
#[derive(Debug, Serialize)]
pub struct ReadFile {
    /// The path as requested.
    pub file_path: String,
    /// `sha256:<hex>` of the bytes read.
    pub revision: String,
    /// Bytes read.
    pub size: u64,
    /// The text, up to 256 KiB; `None` for a binary file.
    pub content: Option<String>,
    /// Whether the bytes are not UTF-8 text or hold a NUL.
    pub binary: bool,
    /// Whether the file is longer than 256 KiB.
    pub truncated: bool,
    /// Only for a helper of this thread's session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temporary_artifact: Option<TemporaryArtifact>,
}

/// A helper's `temporary_artifact`: its generation token, and `in_use` and
/// `releasable` left unknown (the owner decides at release time).
#[derive(Debug, Serialize)]
pub struct TemporaryArtifact {
    /// The generation token.
    pub artifact_generation: String,
    /// Always unknown at read time.
    pub in_use: Option<bool>,
    /// Always unknown at read time.
    pub releasable: Option<bool>,
}

/// One `failed_files` entry.
#[derive(Debug, Serialize)]
pub struct FailedFile {
    /// The path as requested.
    pub file_path: String,
    /// Why it could not be read.
    #[serde(rename = "errorCode")]
    pub error_code: &'static str,
}

impl ReadFile {
    /// The entry of `path`, read as `read` (first bytes kept with
    /// [`Keep::Text`]).
    fn new(file_path: &str, read: PinnedRead) -> ReadFile {
        let (size, revision) = (read.pin.size, read.revision());
        let (content, binary, truncated) = content_of(read.head, size);
        ReadFile {
            file_path: file_path.to_owned(),
            revision,
            size,
            content,
            binary,
            truncated,
            temporary_artifact: None,
        }
    }

    /// The entry as JSON. The content moves into the JSON string without a
    /// copy (a derived `serde_json::to_value` would copy it); a test checks
    /// that both give the same JSON.
    pub fn into_value(self) -> Value {
        let mut m = Map::new();
        m.insert("file_path".into(), Value::String(self.file_path));
        m.insert("revision".into(), Value::String(self.revision));
        m.insert("size".into(), Value::from(self.size));
        m.insert("content".into(), self.content.map_or(Value::Null, Value::String));
        m.insert("binary".into(), Value::Bool(self.binary));
        m.insert("truncated".into(), Value::Bool(self.truncated));
        if let Some(t) = self.temporary_artifact {
            m.insert("temporary_artifact".into(), serde_json::to_value(t).unwrap_or(Value::Null));
        }
        Value::Object(m)
    }
}

impl FailedFile {
    fn value(path: &str, code: impl Into<Code>) -> Value {
        let f = FailedFile { file_path: path.to_owned(), error_code: code.into().as_str() };
        serde_json::to_value(f).unwrap_or(Value::Null)
    }
}

/// `content`, `binary` and `truncated` from the first bytes of a file of
/// `size` bytes, kept with [`Keep::Text`].
fn content_of(head: Head, size: u64) -> (Option<String>, bool, bool) {
    let truncated = size > CONTENT_LIMIT as u64;
    // The head checked every byte once as it was read (UTF-8, no NUL).
    let text = head.into_text(truncated);
    let binary = text.is_none();
    (text, binary, truncated)
}

/// Refuses, before any system call, a path the kernel cannot take (a
/// NUL, over 4,095 bytes, a component over 255) or that names no file (a
/// trailing `/`): `path_not_exact`.
fn check_read_path(path: &str) -> Result<(), Code> {
    if !Path::new(path).is_absolute() || (path.len() > 1 && path.ends_with('/')) {
        return Err(Reason::PathNotExact.into());
    }
    check_kernel_shape(path).map_err(Code::from)
}

/// What a helper the engine could not open is: `not_found` only when the
/// path names nothing now. The engine says `not_found` for any failure to
/// open (out of descriptors, `EMFILE`/`ENFILE`, included); `lstat(2)`
/// needs no descriptor, and a path that is there was an `io_error`.
fn not_found_or_io(path: &str) -> Code {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Reason::NotFound.into(),
        _ => Code::IoError,
    }
}

fn read_plain(path: &str, stop: &AtomicBool) -> Result<Value, Code> {
    check_read_path(path)?;
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
    let read = read_fd_until(fd.as_fd(), Keep::Text(CONTENT_LIMIT), stop).map_err(|_| Code::IoError)?;
    Ok(ReadFile::new(path, read).into_value())
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
    ReadFilesResult { status: read_status(files.len(), failed.len()), files, failed_files: failed }.into_value()
}

/// A `ReadFiles` result: `status`, `files` and `failed_files`.
#[derive(Debug, Serialize)]
struct ReadFilesResult {
    status: &'static str,
    files: Vec<Value>,
    failed_files: Vec<Value>,
}

impl ReadFilesResult {
    /// As JSON, the entries moved in (`serde_json::to_value` would make a
    /// deep copy of every file's content).
    fn into_value(self) -> Value {
        let mut m = Map::new();
        m.insert("status".into(), Value::from(self.status));
        m.insert("files".into(), Value::Array(self.files));
        m.insert("failed_files".into(), Value::Array(self.failed_files));
        Value::Object(m)
    }
}

/// A `ReadFiles` request refused as a whole: no entries.
#[derive(Debug, Serialize)]
struct WholeRefusal<'a> {
    status: &'static str,
    #[serde(rename = "errorCode")]
    error_code: &'static str,
    message: &'a str,
    files: [(); 0],
    failed_files: [(); 0],
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
        self.read_files_each_until(args, &AtomicBool::new(false), each)
    }

    /// Like [`Frontend::read_files_each`], giving up once `stop` is set
    /// (the client cancelled the request, or its reply went out without
    /// the entries still being read): no read is issued after it, and
    /// each path not read by then gets `io_error`. Every path still gets
    /// its entry, at once.
    pub fn read_files_each_until(
        &self,
        args: &Value,
        stop: &AtomicBool,
        each: &(dyn Fn(usize, ReadEntry) + Sync),
    ) -> Result<usize, Value> {
        let given_up = |p: &str| FailedFile::value(p, Code::IoError);
        let a = ReadFilesArgs::parse(args).map_err(|e| whole_refusal(&e))?;
        let session = self.session(&a.thread_id).map_err(|e| whole_refusal(&e))?;
        // Other paths one by one, then the helpers as one batch.
        let mut helpers: Vec<usize> = Vec::new();
        for (i, p) in a.file_paths.iter().enumerate() {
            if let Err(code) = check_read_path(p) {
                each(i, Err(FailedFile::value(p, code)));
                continue;
            }
            match place_helper(&session.layout, &session.thread_id, p) {
                Ok(_) => helpers.push(i),
                Err(_) if stop.load(Ordering::Relaxed) => each(i, Err(given_up(p))),
                Err(_) => each(
                    i,
                    read_plain(p, stop).map_err(|code| {
                        if stop.load(Ordering::Relaxed) {
                            given_up(p)
                        } else {
                            FailedFile::value(p, code)
                        }
                    }),
                ),
            }
        }
        if !helpers.is_empty() {
            // One batch: opened through no-follow handles, hashed together,
            // each entry handed over as soon as it is known.
            let paths: Vec<&str> = helpers.iter().map(|&i| a.file_paths[i].as_str()).collect();
            let dir = session.layout.session_dir(&session.thread_id);
            read_pinned_all_until(&dir, &paths, Keep::Text(CONTENT_LIMIT), stop, &|k, r| {
                let (i, path) = (helpers[k], paths[k]);
                let entry = match r {
                    Ok(read) => Ok(self.helper_value(&session, path, read)),
                    Err(_) if stop.load(Ordering::Relaxed) => Err(given_up(path)),
                    Err(Reason::NotFound) => Err(FailedFile::value(path, not_found_or_io(path))),
                    Err(reason) => Err(FailedFile::value(path, reason)),
                };
                each(i, entry);
            });
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
                read_files_result(
                    s.into_iter().map(|e| e.unwrap_or_else(|| Err(json!({"errorCode": Code::IoError.as_str()})))),
                )
            }
        }
    }

    /// The `files` entry of a helper read consistently: its revision, size,
    /// content and a generation token over its pin.
    fn helper_value(&self, session: &InitializedThread, path: &str, read: PinnedRead) -> Value {
        let token = self.key.mint(&TokenSubject {
            thread_id: &session.thread_id,
            workspace_root: &session.workspace,
            path,
            pin: read.pin,
        });
        let mut f = ReadFile::new(path, read);
        f.temporary_artifact = Some(TemporaryArtifact { artifact_generation: token, in_use: None, releasable: None });
        f.into_value()
    }
}

/// The result refusing a whole `ReadFiles` request.
fn whole_refusal(e: &FrontendError) -> Value {
    let r = WholeRefusal {
        status: e.status(),
        error_code: e.code.as_str(),
        message: &e.message,
        files: [],
        failed_files: [],
    };
    serde_json::to_value(r).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The entry built without a copy is the entry serde derives.
    #[test]
    fn a_file_entry_moves_into_the_json_serde_would_give() {
        let f = || ReadFile {
            file_path: "/w/a".into(),
            revision: "sha256:00".into(),
            size: 3,
            content: Some("hi\n".into()),
            binary: false,
            truncated: false,
            temporary_artifact: Some(TemporaryArtifact {
                artifact_generation: "t".into(),
                in_use: None,
                releasable: None,
            }),
        };
        assert_eq!(f().into_value(), serde_json::to_value(f()).unwrap());
        let bin = ReadFile { content: None, binary: true, temporary_artifact: None, ..f() };
        let v = serde_json::to_value(&bin).unwrap();
        assert_eq!(bin.into_value(), v);
        assert_eq!(v["content"], Value::Null);
        assert!(v.get("temporary_artifact").is_none());
        let whole = ReadFilesResult { status: "completed", files: vec![v.clone()], failed_files: vec![] };
        assert_eq!(serde_json::to_value(&whole).unwrap(), whole.into_value());
    }
}
