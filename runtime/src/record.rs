//! The durable record of one execution: `D/executions/<id>/status.json`,
//! and the command text beside it in `D/executions/<id>/command`.
//!
//! The record holds only fixed-size fields and two bounded strings (the
//! thread id and the workspace path), so its size does not depend on the
//! command: a next guardian can always read and parse it. The command text
//! is stored beside it for people and never parsed by adoption. A record
//! that cannot be read or parsed counts as *unresolved* for every session
//! (fail closed).
//!
//! # References
//! - [`fsync(2)`](https://man7.org/linux/man-pages/man2/fsync.2.html)
//! - [`rename(2)`](https://man7.org/linux/man-pages/man2/rename.2.html)

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::session::SessionKey;

/// The record's file name.
pub const RECORD_FILE: &str = "status.json";
/// The command text's file name.
pub const COMMAND_FILE: &str = "command";
/// The merged stdout and stderr of the execution.
pub const OUTPUT_FILE: &str = "output";
/// Largest record read. Records of this version are a few hundred bytes
/// plus the workspace path; records of earlier versions carried the
/// command (at most a 1 MiB request line) inside, so they still fit.
pub const MAX_RECORD_BYTES: u64 = 4 * 1024 * 1024;

/// Where an execution is, as recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordState {
    /// Admitted; its leader is about to be spawned.
    Starting,
    /// Its leader runs.
    Running,
    /// Its leader exited; something it started may still run.
    Lingering,
    /// Nothing it started runs any more.
    Resolved,
}

/// The leader process of an execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leader {
    /// Its pid.
    pub pid: i32,
    /// Its start time (clock ticks after boot, `/proc/<pid>/stat` field 22);
    /// [`Leader::UNKNOWN_START`] when it could not be read at the spawn.
    pub start_time: u64,
    /// Whether it leads its own process group (pgid = pid).
    pub own_group: bool,
    /// Whether it leads its own session (sid = pid).
    pub own_session: bool,
}

impl Leader {
    /// The start time recorded when the leader's could not be read at the
    /// spawn (no process spawned after boot has it).
    pub const UNKNOWN_START: u64 = 0;

    /// Whether a process at the leader's pid that started at `start_time`
    /// may be the leader: it has the recorded start time, or none could be
    /// recorded. A pid is believed reused only on a start time that was
    /// read and differs: an unknown one keeps whatever runs at the pid (and
    /// its group and session) counted until it exits, a doubt counted as
    /// running.
    pub fn may_be(&self, start_time: u64) -> bool {
        self.start_time == Leader::UNKNOWN_START || self.start_time == start_time
    }
}

/// One execution's durable record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The command id (also the value of the execution's marker).
    pub command_id: String,
    /// The thread it belongs to.
    pub thread_id: String,
    /// The workspace it ran in (its cwd).
    pub workspace: PathBuf,
    /// The identity of its session directory.
    pub session: Option<SessionKey>,
    /// Whether it runs in the background.
    pub background: bool,
    /// When it was submitted (Unix seconds).
    pub started_unix: u64,
    /// Where it is.
    pub state: RecordState,
    /// Its leader, once spawned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<Leader>,
    /// Its cgroup (absolute path), in cgroup mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<PathBuf>,
    /// Its monitor (`monitor/`), the leader's parent: while it has a
    /// descendant the execution runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monitor: Option<Leader>,
    /// When its leader exited (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_exited_unix: Option<u64>,
    /// Its leader's exit code (128 + signal when killed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Whether it could not be started (the command never ran).
    #[serde(default)]
    pub failed_to_start: bool,
    /// When it was resolved (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_unix: Option<u64>,
    /// For a command typed into a shell: the shell's execution id. Such a
    /// record is not an execution of its own (the shell's execution
    /// accounts for everything the command started); adoption skips it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
    /// For a command typed into a shell: the shell's prompt count when it
    /// was typed (it ends at a later prompt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts_before: Option<u64>,
    /// Whether the execution is a shell on a terminal (its monitor hands
    /// the terminal to a next runtime).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub terminal: bool,
}

/// Who a new record is: the fields a record starts with.
pub(crate) struct NewRecord {
    pub(crate) command_id: String,
    pub(crate) thread_id: String,
    pub(crate) workspace: PathBuf,
    pub(crate) session: Option<SessionKey>,
    pub(crate) background: bool,
    pub(crate) started_unix: u64,
    pub(crate) state: RecordState,
}

impl Record {
    /// A record that starts as `new` says, with nothing spawned yet: no
    /// leader, cgroup, exit or end, and no shell.
    pub(crate) fn new(new: NewRecord) -> Record {
        let NewRecord { command_id, thread_id, workspace, session, background, started_unix, state } = new;
        Record {
            command_id,
            thread_id,
            workspace,
            session,
            background,
            started_unix,
            state,
            leader: None,
            cgroup: None,
            monitor: None,
            leader_exited_unix: None,
            exit_code: None,
            failed_to_start: false,
            ended_unix: None,
            shell: None,
            prompts_before: None,
            terminal: false,
        }
    }
}

/// What reading a record found.
#[derive(Debug)]
pub enum ReadRecord {
    /// No record (no directory, or no `status.json` in it yet).
    Missing,
    /// A record.
    Found(Box<Record>),
    /// A record that cannot be read or parsed: unresolved, owner unknown.
    Unreadable(String),
}

/// Reads `dir/status.json`.
///
/// Records of earlier versions (flat `leader_pid`, the command inline) are
/// read too.
pub fn read_record(dir: &Path) -> ReadRecord {
    let f = match winx_release_kernel::sys::open_regular(&dir.join(RECORD_FILE)) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return ReadRecord::Missing,
        Err(e) => return ReadRecord::Unreadable(format!("{}: {e}", dir.join(RECORD_FILE).display())),
    };
    let mut buf = Vec::new();
    if let Err(e) = f.take(MAX_RECORD_BYTES + 1).read_to_end(&mut buf) {
        return ReadRecord::Unreadable(format!("{}: {e}", dir.join(RECORD_FILE).display()));
    }
    if buf.len() as u64 > MAX_RECORD_BYTES {
        return ReadRecord::Unreadable(format!("{} is over {MAX_RECORD_BYTES} bytes", dir.join(RECORD_FILE).display()));
    }
    match parse_record(&buf) {
        Some(r) => ReadRecord::Found(Box::new(r)),
        None => ReadRecord::Unreadable(format!("{} cannot be parsed", dir.join(RECORD_FILE).display())),
    }
}

/// Parses a record of this version or of an earlier one.
pub fn parse_record(bytes: &[u8]) -> Option<Record> {
    let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    if v.get("session").is_some() || v.get("leader").is_some() || v.get("cgroup").is_some() {
        return serde_json::from_value(v).ok();
    }
    // Version 1: flat leader fields, state names of its own.
    let state = match v.get("state")?.as_str()? {
        "resolved" => RecordState::Resolved,
        "starting" => RecordState::Starting,
        "running" => RecordState::Running,
        _ => RecordState::Lingering,
    };
    let leader =
        match (v.get("leader_pid").and_then(|p| p.as_i64()), v.get("leader_start_time").and_then(|t| t.as_u64())) {
            (Some(pid), Some(start_time)) => Some(Leader {
                pid: i32::try_from(pid).ok()?,
                start_time,
                own_group: v.get("own_group").and_then(|b| b.as_bool()).unwrap_or(false),
                own_session: v.get("own_session").and_then(|b| b.as_bool()).unwrap_or(false),
            }),
            _ => None,
        };
    let code = |k: &str| v.get(k).and_then(|c| c.as_i64()).and_then(|c| i32::try_from(c).ok());
    Some(Record {
        command_id: v.get("command_id")?.as_str()?.to_owned(),
        thread_id: v.get("thread_id")?.as_str()?.to_owned(),
        workspace: v.get("workspace")?.as_str()?.into(),
        session: None,
        background: v.get("background").and_then(|b| b.as_bool()).unwrap_or(false),
        started_unix: v.get("started_unix").and_then(|t| t.as_u64()).unwrap_or(0),
        state,
        leader,
        cgroup: None,
        monitor: None,
        leader_exited_unix: v.get("leader_exited_unix").and_then(|t| t.as_u64()),
        exit_code: code("exit_code").or_else(|| code("leader_exit_code")),
        failed_to_start: v.get("failed_to_start").and_then(|b| b.as_bool()).unwrap_or(false),
        ended_unix: v.get("ended_unix").and_then(|t| t.as_u64()),
        shell: None,
        prompts_before: None,
        terminal: false,
    })
}

/// Writes `record` durably into `dir/status.json` (a temporary file,
/// fsync, rename, fsync of the directory).
pub fn write_record(dir: &Path, record: &Record) -> io::Result<()> {
    let bytes = serde_json::to_vec(record).map_err(io::Error::other)?;
    winx_release_kernel::sys::write_durable(&dir.join(RECORD_FILE), &bytes)
}

/// Whether `id` has the shape of a command id (16 lowercase hex digits).
pub fn is_command_id(id: &str) -> bool {
    id.len() == 16 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Record {
        Record {
            command_id: "0123456789abcdef".into(),
            thread_id: "t".into(),
            workspace: "/w".into(),
            session: Some(SessionKey { dev: 1, ino: 2, born: 0 }),
            background: true,
            started_unix: 5,
            state: RecordState::Lingering,
            leader: Some(Leader { pid: 9, start_time: 10, own_group: true, own_session: true }),
            cgroup: Some("/sys/fs/cgroup/x".into()),
            monitor: Some(Leader { pid: 8, start_time: 9, own_group: true, own_session: true }),
            leader_exited_unix: Some(6),
            exit_code: Some(0),
            failed_to_start: false,
            ended_unix: None,
            shell: None,
            prompts_before: None,
            terminal: true,
        }
    }

    #[test]
    fn a_record_does_not_grow_with_its_command_and_round_trips() {
        let tmp = tempfile::tempdir().unwrap();
        let r = record();
        write_record(tmp.path(), &r).unwrap();
        let ReadRecord::Found(back) = read_record(tmp.path()) else { panic!("not read") };
        assert_eq!(*back, r);
        assert!(std::fs::metadata(tmp.path().join(RECORD_FILE)).unwrap().len() < 1024);
    }

    #[test]
    fn version_1_records_are_read_and_garbage_is_unreadable() {
        let v1 = br#"{"command_id":"0123456789abcdef","thread_id":"t","workspace":"/w","command":"sleep 1",
            "background":false,"started_unix":1,"state":"lingering","leader_pid":4,"leader_start_time":7,
            "own_group":true,"own_session":false,"leader_exited_unix":null}"#;
        let r = parse_record(v1).unwrap();
        assert_eq!(r.leader, Some(Leader { pid: 4, start_time: 7, own_group: true, own_session: false }));
        assert_eq!(r.state, RecordState::Lingering);
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(RECORD_FILE), b"{\"state\": ").unwrap();
        assert!(matches!(read_record(tmp.path()), ReadRecord::Unreadable(_)));
        assert!(matches!(read_record(&tmp.path().join("nope")), ReadRecord::Missing));
    }
}
