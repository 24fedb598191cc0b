//! Commands typed into a shell: records of the shell's execution, not
//! executions of their own.
//!
//! Each one has a directory `D/executions/<command_id>/` with its text
//! (`command`), what it printed (`output`, without the echoed line, the
//! prompt or escape sequences) and a record (`status.json`) whose `shell`
//! names the shell's execution: adoption skips such a record (the shell's
//! own record accounts for whatever the command started), retention prunes
//! it like any resolved payload. The command is handed to the shell whole,
//! however long: its text is written to the `command` file and the line
//! typed is `. 'D/executions/<id>/command'` (never cut by the terminal's
//! 4 KiB canonical line; `cd`, `export` and functions persist, as typed
//! text would).

use std::fs::{self, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{Shell, Write};
use crate::execution::{read_tail, INLINE_OUTPUT_BYTES};
use crate::record::{self, NewRecord, Record, RecordState, COMMAND_FILE, OUTPUT_FILE};
use crate::Runtime;
use winx_release_engine::admission::AdmissionGuard;
use winx_release_kernel::sys::{create_private_dir_all, lock};

/// One command typed into a shell.
#[derive(Debug)]
pub struct CommandRecord {
    /// Its id (`D/executions/<id>/`).
    pub id: String,
    /// Its directory.
    pub dir: PathBuf,
    /// The shell's prompt count when it was typed: it is back at the
    /// prompt once the shell reported more.
    pub prompts_before: u64,
    /// Typed into a restricted shell.
    restricted: bool,
    record: Mutex<Record>,
    out: Mutex<Option<fs::File>>,
}

/// Quotes `s` for bash as one word.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

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
    /// The line that runs it, as typed at the prompt (Enter included):
    /// `. 'D/executions/<id>/command'`; in a restricted shell, whose `.`
    /// refuses a path with a slash, `eval "$(< 'D/executions/<id>/command')"`
    /// (input redirections are allowed there; a `return` at the command's
    /// top level is then an error, as typed text's would be).
    pub fn typed_line(&self) -> String {
        let file = quoted(&self.dir.join(COMMAND_FILE).to_string_lossy());
        match self.restricted {
            false => format!(". {file}\r"),
            true => format!("eval \"$(< {file})\"\r"),
        }
    }

    /// Whether the end marker of prompt `prompt` ([`super::Piece::End`])
    /// ends this command, when the hook has reported `reported` prompts so
    /// far ([`Shell::prompts`]): the prompt came after the command was
    /// typed, and the hook really reported it. A marker of an earlier
    /// prompt, read late by a reader that lags behind the terminal, ends
    /// nothing; nor does one the command printed itself before its prompt
    /// was reported.
    pub fn ended_by(&self, prompt: u64, reported: u64) -> bool {
        prompt > self.prompts_before && prompt <= reported
    }

    /// Appends what the command printed to its `output`.
    pub fn append_output(&self, bytes: &[u8]) -> io::Result<()> {
        match lock(&self.out).as_mut() {
            Some(f) => f.write_all(bytes),
            None => Ok(()),
        }
    }

    /// The last [`INLINE_OUTPUT_BYTES`] of its output, and whether earlier
    /// output was cut.
    pub fn output_tail(&self) -> (String, bool) {
        read_tail(&self.dir.join(OUTPUT_FILE), INLINE_OUTPUT_BYTES)
    }

    /// The size of its output so far.
    pub fn output_len(&self) -> u64 {
        fs::metadata(self.dir.join(OUTPUT_FILE)).map(|m| m.len()).unwrap_or(0)
    }

    /// Its exit code, once finished.
    pub fn exit_code(&self) -> Option<i32> {
        lock(&self.record).exit_code
    }

    /// Whether it is back at the prompt (recorded resolved).
    pub fn finished(&self) -> bool {
        lock(&self.record).state == RecordState::Resolved
    }

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

/// The command typed into the shell of execution `shell` that is not back
/// at its prompt, by its record in `data_dir/executions` (the latest, if
/// several), opened again for its output: for a runtime that takes the
/// shell over.
pub(crate) fn unfinished_of(data_dir: &Path, shell: &str) -> Option<CommandRecord> {
    let mut latest: Option<(Record, PathBuf)> = None;
    for entry in fs::read_dir(data_dir.join("executions")).ok()?.flatten() {
        let name = entry.file_name();
        if !name.to_str().is_some_and(record::is_command_id) {
            continue;
        }
        let record::ReadRecord::Found(r) = record::read_record(&entry.path()) else { continue };
        if r.shell.as_deref() != Some(shell) || r.state == RecordState::Resolved {
            continue;
        }
        if latest.as_ref().is_none_or(|(l, _)| l.started_unix <= r.started_unix) {
            latest = Some((*r, entry.path()));
        }
    }
    let (r, dir) = latest?;
    let out = OpenOptions::new().append(true).open(dir.join(OUTPUT_FILE)).ok()?;
    Some(CommandRecord {
        id: r.command_id.clone(),
        dir,
        prompts_before: r.prompts_before.unwrap_or(0),
        // Typed already: how it was typed no longer matters.
        restricted: false,
        record: Mutex::new(r),
        out: Mutex::new(Some(out)),
    })
}

/// A command record of `D/executions/<id>` read back (a finished command
/// of an earlier look or guardian): the record and its output's tail.
pub fn read_command(data_dir: &Path, id: &str) -> Option<(Record, (String, bool))> {
    if !record::is_command_id(id) {
        return None;
    }
    let dir = data_dir.join("executions").join(id);
    let record::ReadRecord::Found(r) = record::read_record(&dir) else { return None };
    r.shell.as_ref()?;
    let tail = read_tail(&dir.join(OUTPUT_FILE), INLINE_OUTPUT_BYTES);
    Some((*r, tail))
}

fn now_unix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_path_is_one_word() {
        assert_eq!(super::quoted("/d/it's"), r"'/d/it'\''s'");
    }
}
