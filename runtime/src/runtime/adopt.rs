//! Adoption: the unresolved executions of `D/executions` that an earlier
//! runtime (a guardian that was killed or restarted) left, taken over by
//! this one.

use std::fs;
use std::os::fd::AsFd;
use std::sync::Arc;

use rustix::fs::{Mode, OFlags, CWD};

use super::Runtime;
use crate::execution::{ExecState, Execution};
use crate::members::Members;
use crate::record::{self, is_command_id, ReadRecord, RecordState};
use winx_release_engine::scan::{on_trusted_filesystem, DirLook};
use winx_release_kernel::sys::lock;

impl Runtime {
    /// Adopts every execution of `D/executions` that this runtime does not
    /// know and whose record is not resolved (a record that cannot be read
    /// or parsed included: it counts for every session). Returns how many,
    /// or why `D/executions` could not be read whole (a directory that does
    /// not exist has nothing to adopt): an execution an earlier runtime left
    /// may then be missed, which a liveness answer counts as running.
    ///
    /// Every liveness answer asks, so that a record another runtime of the
    /// data directory wrote counts at once. `D/executions` is read again only
    /// when it may have changed since the last look that left nothing to
    /// look at again: a look whose `statx` was settled by the directory
    /// cache's racy rule, on a filesystem the lean scan trusts, and that
    /// found no execution directory still without its record (its record
    /// lands inside it, which does not change `D/executions`). Any entry
    /// made, removed or renamed there since changes its change time.
    pub(crate) fn adopt(&self) -> Result<usize, String> {
        if !self.adopt {
            return Ok(0);
        }
        let root = self.data_dir.join("executions");
        let cannot = |e: &dyn std::fmt::Display| format!("cannot list {}: {e}", root.display());
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(CWD, &root, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(0),
            Err(e) => return Err(cannot(&e)),
        };
        let look = DirLook::take(fd.as_fd());
        if let (Some(now), Some(last)) = (&look, *lock(&self.adopt_look)) {
            if last.unchanged_at(now) {
                return Ok(0);
            }
        }
        let dir = fs::read_dir(&root).map_err(|e| cannot(&e))?;
        let mut adopted = Vec::new();
        let mut unsettled = false;
        let mut trouble = None;
        for entry in dir {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    trouble = Some(cannot(&e));
                    break;
                }
            };
            let name = entry.file_name();
            let Some(id) = name.to_str().filter(|s| is_command_id(s)) else { continue };
            if lock(&self.table).contains_key(id) || lock(&self.resolved).contains(id) {
                continue;
            }
            let e = match record::read_record(&entry.path()) {
                ReadRecord::Missing => {
                    unsettled = true;
                    continue;
                }
                // A command typed into a shell: its shell's record
                // accounts for what it started.
                ReadRecord::Found(r) if r.state == RecordState::Resolved || r.shell.is_some() => {
                    lock(&self.resolved).insert(id.to_owned());
                    continue;
                }
                ReadRecord::Found(r) => {
                    let mut e = Execution::new(&r, entry.path(), true, ExecState::Lingering(r.exit_code));
                    // What an earlier runtime saw of it stays a member.
                    e.members = Members::load(&entry.path()).unwrap_or_else(|why| {
                        tracing::warn!(command_id = %id, %why, "an execution's members cannot be read: it counts as running");
                        Members::doubtful()
                    });
                    e
                }
                ReadRecord::Unreadable(why) => {
                    tracing::warn!(command_id = %id, %why, "an execution record cannot be read: releases of every session wait");
                    Execution::unreadable(id, entry.path(), why)
                }
            };
            let e = Arc::new(e);
            {
                let mut t = lock(&self.table);
                if t.contains_key(id) {
                    continue;
                }
                t.insert(id.to_owned(), e.clone());
            }
            tracing::info!(command_id = %id, thread = %e.thread, "adopted an unresolved execution");
            adopted.push(e);
        }
        let trusted = on_trusted_filesystem(fd.as_fd());
        *lock(&self.adopt_look) = look.filter(|_| trusted && !unsettled && trouble.is_none());
        for e in &adopted {
            if self.nothing_left(e) {
                if let ExecState::Lingering(code) = e.state() {
                    self.resolve(e, code);
                }
            }
        }
        trouble.map_or(Ok(adopted.len()), Err)
    }

    /// The execution `id`: known to this runtime, adopted now from
    /// `D/executions`, or a resolved record there.
    pub fn lookup(&self, id: &str) -> Option<Arc<Execution>> {
        if let Some(e) = lock(&self.table).get(id).cloned() {
            return Some(e);
        }
        if !is_command_id(id) {
            return None;
        }
        // What cannot be listed is not found: the caller's "unknown id".
        let _ = self.adopt();
        if let Some(e) = lock(&self.table).get(id).cloned() {
            return Some(e);
        }
        let dir = self.data_dir.join("executions").join(id);
        let ReadRecord::Found(r) = record::read_record(&dir) else { return None };
        if r.state != RecordState::Resolved {
            return None;
        }
        let state = if r.failed_to_start { ExecState::FailedToStart } else { ExecState::Resolved(r.exit_code) };
        Some(Arc::new(Execution::new(&r, dir, true, state)))
    }
}
