//! A command typed into a shell, as a record in the runtime's data
//! directory (`shell/command.rs`): its start ([`Shell::record_command`],
//! [`Shell::type_command`]) and its end ([`CommandRecord::finish`], its
//! output dropped into scratch beyond the inline limit).

use std::fs::{self, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Mutex;

use super::{now_unix, Runtime};
use crate::execution::INLINE_OUTPUT_BYTES;
use crate::record::{self, NewRecord, Record, RecordState, COMMAND_FILE, OUTPUT_FILE};
use crate::shell::command::CommandRecord;
use crate::shell::handle::Shell;
use crate::shell::Write;
use winx_release_engine::admission::AdmissionGuard;
use winx_release_kernel::sys::{create_private_dir_all, lock};

impl Shell {
    /// Records `text` as a command of this shell and types the line that
    /// runs it. The caller holds the session's admission barrier and has
    /// checked [`Shell::at_prompt`].
    pub fn type_command(&self, rt: &Runtime, admitted: &AdmissionGuard<'_>, text: &str) -> io::Result<CommandRecord> {
        let c = self.record_command(rt, text)?;
        self.write(admitted, Write::Line, c.typed_line().as_bytes())?;
        Ok(c)
    }

    /// Records `text` as a command of this shell (its directory, text and
    /// running record) without typing anything: for a host that types the
    /// line itself, inside [`Shell::input`].
    pub fn record_command(&self, rt: &Runtime, text: &str) -> io::Result<CommandRecord> {
        let e = &self.core.execution;
        let id = winx_release_kernel::sys::random_hex(8);
        let dir = rt.data_dir().join("executions").join(&id);
        create_private_dir_all(&dir)?;
        fs::write(dir.join(COMMAND_FILE), text)?;
        let record = Record {
            shell: Some(e.id.clone()),
            prompts_before: Some(self.prompts()),
            ..Record::new(NewRecord {
                command_id: id.clone(),
                thread_id: e.thread.clone(),
                workspace: e.workspace.clone(),
                session: e.session,
                background: e.background,
                started_unix: now_unix(),
                state: RecordState::Running,
            })
        };
        record::write_record(&dir, &record)?;
        let out = OpenOptions::new().create(true).append(true).mode(0o600).open(dir.join(OUTPUT_FILE))?;
        Ok(CommandRecord {
            id,
            dir,
            prompts_before: record.prompts_before.unwrap_or(0),
            restricted: self.core.restricted,
            record: Mutex::new(record),
            out: Mutex::new(Some(out)),
        })
    }
}

impl CommandRecord {
    /// Records it back at the prompt with `exit_code`: durably resolved,
    /// its output dropped whole into `W/.winx/scratch/<id>.out` when longer
    /// than the inline limit (whatever it left running is the shell's).
    pub fn finish(&self, rt: &Runtime, exit_code: Option<i32>) -> io::Result<Option<PathBuf>> {
        if let Some(mut f) = lock(&self.out).take() {
            f.flush()?;
        }
        let mut r = lock(&self.record);
        if r.state == RecordState::Resolved {
            return Ok(None);
        }
        let mut dropped = None;
        if self.output_len() > INLINE_OUTPUT_BYTES {
            match rt.drop_output(&r.workspace, &self.id, &self.dir) {
                Ok(p) => dropped = Some(p),
                Err(e) => tracing::warn!(command_id = %self.id, error = %e, "could not drop output into scratch"),
            }
        }
        r.state = RecordState::Resolved;
        r.exit_code = exit_code;
        r.ended_unix = Some(now_unix());
        record::write_record(&self.dir, &r)?;
        Ok(dropped)
    }
}
