//! One variable of a process's initial environment.
//!
//! `/proc/<pid>/environ` shows the environment the process was started
//! with (as it still stands in its memory). A process inherits its parent's
//! environment unless it scrubs it, so a variable set for a command is a
//! marker found again on everything it starts, double-forked daemons
//! included.
//!
//! # References
//! - [`proc_pid_environ(5)`](https://man7.org/linux/man-pages/man5/proc_pid_environ.5.html)
//! - [`environ(7)`](https://man7.org/linux/man-pages/man7/environ.7.html)

use std::os::fd::AsFd;

use super::{read_file, ProcError};

/// What a lookup of one variable found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnvLookup {
    /// The variable is set to this value.
    Found(Vec<u8>),
    /// The variable is not set.
    Absent,
    /// The process does not exist (any more).
    Gone,
    /// The environment cannot be read (another user, or a process that made
    /// itself non-dumpable); whether the variable is set is unknown.
    Denied,
}

/// Looks `name` up in `/proc/<pid>/environ` beneath the `/proc` handle
/// `proc`. `buf` is scratch space, reused across calls.
///
/// # References
/// - [`proc_pid_environ(5)`](https://man7.org/linux/man-pages/man5/proc_pid_environ.5.html)
pub fn env_var(proc: impl AsFd, pid: i32, name: &[u8], buf: &mut Vec<u8>) -> Result<EnvLookup, ProcError> {
    match read_file(proc, &format!("{pid}/environ"), buf) {
        Ok(None) => Ok(EnvLookup::Gone),
        Ok(Some(n)) => Ok(find(&buf[..n], name)),
        Err(rustix::io::Errno::ACCESS) | Err(rustix::io::Errno::PERM) => Ok(EnvLookup::Denied),
        Err(e) => Err(ProcError::Unreadable { pid, file: "environ", error: e.into() }),
    }
}

/// Finds `name=` among NUL-separated `name=value` entries.
fn find(environ: &[u8], name: &[u8]) -> EnvLookup {
    for entry in environ.split(|&b| b == 0) {
        if entry.len() > name.len() && entry.starts_with(name) && entry[name.len()] == b'=' {
            return EnvLookup::Found(entry[name.len() + 1..].to_vec());
        }
    }
    EnvLookup::Absent
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_exact_names_only() {
        let env = b"A=1\0WINX_EXECUTION_ID_X=2\0WINX_EXECUTION_ID=abc\0";
        assert_eq!(find(env, b"WINX_EXECUTION_ID"), EnvLookup::Found(b"abc".to_vec()));
        assert_eq!(find(env, b"B"), EnvLookup::Absent);
        assert_eq!(find(b"", b"A"), EnvLookup::Absent);
    }

    #[test]
    fn reads_a_childs_marker() {
        let mut child = std::process::Command::new("sleep").arg("5").env("WINX_TEST_MARKER", "m-123").spawn().unwrap();
        let proc = super::super::open_proc().unwrap();
        let mut buf = Vec::new();
        // Between fork and exec the child still shows its parent's
        // environment: wait (bounded) until it has become `sleep`.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let got = loop {
            let got = env_var(&proc, child.id() as i32, b"WINX_TEST_MARKER", &mut buf).unwrap();
            if got != EnvLookup::Absent || std::time::Instant::now() > deadline {
                break got;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        assert_eq!(got, EnvLookup::Found(b"m-123".to_vec()));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(env_var(&proc, child.id() as i32, b"WINX_TEST_MARKER", &mut buf).unwrap(), EnvLookup::Gone);
    }
}
