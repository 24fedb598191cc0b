//! Adoption: the unresolved executions of `D/executions` that an earlier
//! runtime (a guardian that was killed or restarted) left, taken over by
//! this one.

use std::fs;
use std::sync::Arc;

use super::Runtime;
use crate::executions::execution::{ExecState, Execution};
use crate::executions::record::{self, is_command_id, ReadRecord, RecordState};
use crate::sys::lock;

impl Runtime {
    /// Adopts every execution of `D/executions` that this runtime does not
    /// know and whose record is not resolved (a record that cannot be read
    /// or parsed included: it counts for every session). Returns how many.
    pub fn adopt(&self) -> usize {
        if !self.adopt {
            return 0;
        }
        let Ok(dir) = fs::read_dir(self.data_dir.join("executions")) else { return 0 };
        let mut adopted = Vec::new();
        for entry in dir.flatten() {
            let name = entry.file_name();
            let Some(id) = name.to_str().filter(|s| is_command_id(s)) else { continue };
            if lock(&self.table).contains_key(id) || lock(&self.resolved).contains(id) {
                continue;
            }
            let e = match record::read_record(&entry.path()) {
                ReadRecord::Missing => continue,
                ReadRecord::Found(r) if r.state == RecordState::Resolved => {
                    lock(&self.resolved).insert(id.to_owned());
                    continue;
                }
                ReadRecord::Found(r) => Execution::new(&r, entry.path(), true, ExecState::Lingering(r.exit_code)),
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
        for e in &adopted {
            if self.nothing_left(e) {
                if let ExecState::Lingering(code) = e.state() {
                    self.resolve(e, code);
                }
            }
        }
        adopted.len()
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
        self.adopt();
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
