//! Shells: an interactive `bash` on a terminal, as one execution of the
//! runtime, whose typed commands are records of that execution.
//!
//! [`Runtime::start_shell`](crate::Runtime::start_shell) starts
//! the shell as the leader of a new execution: session leader with the
//! terminal's follower as its controlling terminal (util-linux `setsid
//! --ctty`, so that the engine needs no `unsafe` `pre_exec`), in the
//! execution's cgroup from before its first instruction (the same `sh`
//! wrapper as every execution), with `WINX_EXECUTION_ID` in its
//! environment, in a working directory of its own. The prompt hook
//! (`hook.rs`, [`HOOK_FILE`]) tells the engine when the shell is back at its prompt;
//! [`Shell::busy`] is the rule that says whether anything of it runs.
//!
//! Two ways to hand it a terminal ([`Terminal`]):
//! - [`Terminal::Open`]: the engine opens the pair (`pty::open_pair`),
//!   keeps the controller, reads everything the terminal prints (into the
//!   execution's `output` file and the caller's [`OutputSink`]), and the
//!   caller writes with [`Shell::write`];
//! - [`Terminal::Follower`]: a host that owns its PTY code (its terminal
//!   emulation) hands the engine the follower and keeps the controller.
//!   The host then writes only inside [`Shell::input`] (or
//!   [`Shell::type_command`]), so that every byte written is ordered with
//!   the hook's reports under the engine's lock: "the prompt was reported
//!   after the last byte written" stays exact.
//!
//! Every write must be made under the session's admission barrier; a
//! caller refuses input at an idle prompt ([`Shell::at_prompt`]) so that
//! only a program running in the foreground receives it.

pub mod command;
pub(crate) mod handle;
mod hook;
mod idle;
pub mod output;
mod program;
pub(crate) mod prompt_file;
pub(crate) mod pty;
mod script;
pub(crate) mod spawn;
mod terminal;

pub use command::CommandRecord;
pub use handle::{Shell, WRITE_WAIT};
pub(crate) use hook::read_reports;
pub use hook::{HOOK_FILE, OUTPUT_END, OUTPUT_START};
pub use output::{OutputFilter, Piece};
pub use program::ShellProgram;
pub use terminal::{OutputSink, ShellSpawn, Terminal, Write, DEFAULT_COLS, DEFAULT_ROWS};
