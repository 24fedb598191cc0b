//! The prompt hook the engine installs in every shell, and the thread that
//! reads its reports.
//!
//! The shell is `bash --noprofile --rcfile D/executions/<id>/hook.sh -i`:
//! no profile and no `~/.bashrc` unless the host chose one
//! ([`super::ShellProgram::rc`]: it is sourced after the hook's function is
//! defined read-only, and what it starts is counted like anything the shell
//! runs), only this file (written by [`super::ShellProgram`]). It sets
//! `PROMPT_COMMAND` to a function that, before every prompt, writes
//! `P <exit code>` to descriptor 3 (one end of a socket pair whose other
//! end the engine reads) and then **waits for the engine's acknowledgement**
//! (a line with the prompt's number) before
//! the prompt is drawn and the line editor reads input. While the hook
//! waits, nothing reads the terminal: the engine decides, under its lock,
//! what becomes of input that the ended program left unread (it is
//! discarded, `tcflush(TCIFLUSH)`, so that the line editor never runs it as
//! a command) before it answers. `PS0` and the hook also print in-band
//! markers (OSC 777 sequences a terminal ignores) that tell a reader of
//! the terminal where a command's output starts and ends; the end marker
//! carries the prompt's number, so that a reader that lags behind the
//! terminal does not take an earlier prompt's marker for the end of a
//! command typed since.
//!
//! Before each report the hook writes the shell's traps (`trap -p`) and a
//! `TMOUT` that is set: a trap with an action (an `EXIT` trap, a `HUP`
//! trap) or a `TMOUT` is an action of the shell's own that can run at any
//! time (bash logs itself out after `TMOUT` seconds at its prompt and runs
//! its `EXIT` trap), so the shell is busy while it holds one
//! ([`super::Shell::holds`]); a trap that ignores a signal (`trap '' HUP`)
//! runs nothing and does not count. The hook's function is read-only.
//!
//! A report is not trusted for safety: anything running in the shell can
//! write to descriptor 3. The idle rule (`idle.rs`) checks with the kernel
//! too. A shell whose hook stops reporting (`exec` of another program,
//! `unset PROMPT_COMMAND`) never reports a prompt again and stays busy.
//!
//! # References
//! - [bash(1), `PROMPT_COMMAND`, `PS0`, `--rcfile`](https://www.gnu.org/software/bash/manual/bash.html#Bash-Variables)
//! - [`tcflush(3)`](https://man7.org/linux/man-pages/man3/tcflush.3.html)

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use super::handle::Core;
use winx_release_kernel::sys::lock;

/// The hook file's name in the shell's execution directory.
pub const HOOK_FILE: &str = "hook.sh";
/// The OSC payload `PS0` prints after the shell read a command line and
/// before it runs it: a command's output starts after it.
pub const OUTPUT_START: &str = "777;winx-release;start";
/// The OSC payload the hook prints once the engine acknowledged the
/// prompt, followed by `;<n>`, the prompt's number (the count of reports
/// the engine has acknowledged, [`super::Shell::prompts`]): a command's
/// output ends before it. The number tells a reader that lags behind the
/// terminal which prompt a marker belongs to.
pub const OUTPUT_END: &str = "777;winx-release;end";

/// How often a reader with nothing to read looks whether the shell ended.
const POLL: Duration = Duration::from_millis(500);

/// Reads the hook's reports until the shell's leader exited: each report
/// is recorded (and unread input of an ended program discarded) under the
/// shell's lock, then acknowledged. The lines before a report (the shell's
/// traps and `TMOUT`) are what it holds.
pub(crate) fn read_reports(core: Arc<Core>, stream: UnixStream) {
    let _ = stream.set_read_timeout(Some(POLL));
    let Ok(mut ack) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    // What the lines since the last report say the shell holds, and
    // whether the line being read is too long to keep.
    let mut held: Vec<String> = Vec::new();
    let mut long = false;
    loop {
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) if line.last() == Some(&b'\n') => {
                let text = String::from_utf8_lossy(&line).into_owned();
                match (long, parse_report(&text)) {
                    (false, Some(code)) => {
                        let binary = if lock(&core.state).binary.is_none() { binary_of(&core) } else { None };
                        let mut st = lock(&core.state);
                        if st.input_since_line {
                            // Input for a program that has ended: never read by
                            // the line editor as a command.
                            let _ = rustix::termios::tcflush(&core.follower, rustix::termios::QueueSelector::IFlush);
                            st.input_since_line = false;
                        }
                        if st.binary.is_none() {
                            st.binary = binary;
                        }
                        st.at_prompt = true;
                        st.prompts += 1;
                        st.last_exit = Some(code);
                        st.held = std::mem::take(&mut held);
                        // For a runtime that takes the shell over after this
                        // one (`runtime/reattach.rs`): before the answer.
                        super::prompt_file::save_prompt(&core.execution.dir, &st);
                        // Acknowledged under the lock: no write can come
                        // between the flush and the prompt. The answer is the
                        // prompt's number, which the hook prints in its end
                        // marker.
                        let _ = ack.write_all(format!("{}\n", st.prompts).as_bytes());
                        drop(st);
                        core.cv.notify_all();
                    }
                    (true, _) => hold(&mut held, "a trap too long to show".to_owned()),
                    (false, None) => {
                        if let Some(why) = holds(&text) {
                            hold(&mut held, why);
                        }
                    }
                }
                long = false;
                line.clear();
            }
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {
                if core.execution.leader_exited() {
                    break;
                }
            }
            Err(_) => break,
        }
        if line.len() > MAX_LINE {
            long = true;
            line.clear();
        }
    }
    lock(&core.state).hook_gone = true;
    core.cv.notify_all();
}

/// The longest report line kept whole; a longer one is a trap too long to
/// show (still held).
const MAX_LINE: usize = 512;

/// At most this many held things are named.
const MAX_HELD: usize = 8;

fn hold(held: &mut Vec<String>, why: String) {
    if held.len() < MAX_HELD {
        held.push(why);
    }
}

/// What a line the hook wrote before its report says the shell holds:
/// `None` for a trap that ignores a signal (`trap -- '' SIGHUP`: it runs
/// nothing); a trap with an action, a `TMOUT`, or any other line (a
/// continuation of a trap's action over several lines, or what something
/// else wrote to descriptor 3) is held.
fn holds(line: &str) -> Option<String> {
    let line = line.trim_end_matches('\n');
    if line.strip_prefix("trap -- '' ").is_some_and(|sig| !sig.is_empty() && !sig.contains(' ')) {
        return None;
    }
    if let Some(t) = line.strip_prefix("TMOUT ") {
        return Some(format!("TMOUT={t} (it logs itself out, running its EXIT trap, after {t} s at the prompt)"));
    }
    let shown: String = line.chars().take(120).collect();
    Some(if line.starts_with("trap -- ") { shown } else { format!("a report line {shown:?}") })
}

/// The device and inode of the program `core`'s shell process runs now.
fn binary_of(core: &Core) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let pid = core.execution.leader()?.pid;
    let m = std::fs::metadata(format!("/proc/{pid}/exe")).ok()?;
    Some((m.dev(), m.ino()))
}

/// `P <code>` → the code.
fn parse_report(line: &str) -> Option<i32> {
    line.trim_end().strip_prefix("P ")?.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn reports_parse_and_garbage_does_not() {
        assert_eq!(super::parse_report("P 0\n"), Some(0));
        assert_eq!(super::parse_report("P 130\n"), Some(130));
        assert_eq!(super::parse_report("P x\n"), None);
        assert_eq!(super::parse_report("ok\n"), None);
    }

    #[test]
    fn a_trap_with_an_action_or_a_tmout_is_held_an_ignored_signal_not() {
        assert_eq!(super::holds("trap -- '' SIGHUP\n"), None);
        assert_eq!(super::holds("trap -- 'cat $H > out' EXIT\n").as_deref(), Some("trap -- 'cat $H > out' EXIT"));
        assert!(super::holds("TMOUT 3\n").is_some_and(|w| w.starts_with("TMOUT=3")));
        assert!(super::holds("echo more' EXIT\n").is_some(), "a continuation line");
        assert!(super::holds("trap -- '' SIGHUP SIGINT\n").is_some(), "not one ignored signal: held");
    }
}
