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
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::execution::{read_tail, INLINE_OUTPUT_BYTES};
use crate::record::{self, Record, RecordState, COMMAND_FILE, OUTPUT_FILE};
use winx_release_kernel::sys::lock;

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
    pub(crate) restricted: bool,
    /// Its record, as last written.
    pub(crate) record: Mutex<Record>,
    /// Its `output`, open for appending until it is finished.
    pub(crate) out: Mutex<Option<fs::File>>,
}

/// Quotes `s` for bash as one word.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
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
    /// far ([`Shell::prompts`](super::Shell::prompts)): the prompt came after the command was
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

    /// Cuts its `output` back to its first `len` bytes (what was recorded
    /// after `len` was not its output).
    pub fn truncate_output(&self, len: u64) -> io::Result<()> {
        match lock(&self.out).as_mut() {
            Some(f) => f.set_len(len),
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

#[cfg(test)]
mod tests {
    #[test]
    fn a_path_is_one_word() {
        assert_eq!(super::quoted("/d/it's"), r"'/d/it'\''s'");
    }
}
