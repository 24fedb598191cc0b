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
//! Any other absolute path is read normally (links followed), without a
//! token. Content: UTF-8 text up to 256 KiB; `"binary": true` (content
//! `null`) when the bytes are not UTF-8 text or hold a NUL; `"truncated": true`
//! with the first 256 KiB (cut back to a character boundary) when longer.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde_json::{json, Value};
use winx_release_engine::hash::revision;
use winx_release_engine::hash::{read_and_hash, ReadBytes, HASH_CHUNK};
use winx_release_engine::path_rules::{place_helper, HelperPath};
use winx_release_engine::release::open_session_dir;
use winx_release_engine::resolve::open_regular_beneath;
use winx_release_engine::{Identity, Pin, Reason};

use super::{Frontend, Session};
use crate::error::{Code, FrontendError};
use crate::token::TokenSubject;
use crate::wire::ReadFilesArgs;

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
fn consistent_read(fd: &OwnedFd, first: Identity, keep: usize) -> io::Result<Option<(ReadBytes, Identity)>> {
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
pub(crate) fn read_helper(session: &OwnedFd, h: &HelperPath, keep: usize) -> Result<HelperRead, Reason> {
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

fn content_fields(v: &mut Value, prefix: &[u8], size: u64) {
    let truncated = size > prefix.len() as u64;
    let text = match std::str::from_utf8(prefix) {
        Ok(s) => Some(s),
        // A character cut by the limit at the very end.
        Err(e) if truncated && e.error_len().is_none() => std::str::from_utf8(&prefix[..e.valid_up_to()]).ok(),
        Err(_) => None,
    };
    match text.filter(|t| !t.contains('\0')) {
        Some(t) => {
            v["content"] = json!(t);
            v["binary"] = json!(false);
        }
        None => {
            v["content"] = Value::Null;
            v["binary"] = json!(true);
        }
    }
    v["truncated"] = json!(truncated);
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
    let (bytes, _) = consistent_read(&fd, id, CONTENT_LIMIT).map_err(|_| Code::IoError)?.ok_or(Code::IoError)?;
    let mut v = json!({"file_path": path, "revision": revision(&bytes.digest), "size": bytes.len});
    content_fields(&mut v, &bytes.prefix, bytes.len);
    Ok(v)
}

impl Frontend {
    pub(super) fn try_read_files(&self, args: &Value) -> Result<Value, FrontendError> {
        let a = ReadFilesArgs::parse(args)?;
        let session = self.session(&a.thread_id)?;
        let mut files = Vec::new();
        let mut failed = Vec::new();
        let mut session_fd: Option<Result<OwnedFd, Reason>> = None;
        for p in &a.file_paths {
            let placed = place_helper(&session.layout, &session.thread_id, p);
            let result = match placed {
                Ok(h) => {
                    let fd = session_fd.get_or_insert_with(|| open_session_dir(&session.layout, &session.thread_id));
                    match fd {
                        Ok(fd) => self.read_one_helper(&session, fd, &h).map_err(Code::from),
                        Err(r) => Err(Code::from(*r)),
                    }
                }
                Err(_) => read_plain(p),
            };
            match result {
                Ok(v) => files.push(v),
                Err(code) => failed.push(failure(p, code)),
            }
        }
        let status = match (files.is_empty(), failed.is_empty()) {
            (_, true) => "completed",
            (false, false) => "partial",
            (true, false) => "failed",
        };
        Ok(json!({"status": status, "files": files, "failed_files": failed}))
    }

    fn read_one_helper(&self, session: &Session, fd: &OwnedFd, h: &HelperPath) -> Result<Value, Reason> {
        let r = read_helper(fd, h, CONTENT_LIMIT)?;
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
        content_fields(&mut v, &r.bytes.prefix, r.bytes.len);
        v["temporary_artifact"] = json!({"artifact_generation": token, "in_use": null, "releasable": null});
        Ok(v)
    }
}
