//! The ground floor every subcommand stands on: exit statuses, output to
//! standard output (`outln!`, [`print_json`]) and the short timeouts of a
//! command that asks a guardian a question ([`quick`]).

use std::time::Duration;

use winx_release_protocol::client::Timeouts;

/// Exit status for success.
pub const EXIT_OK: u8 = 0;
/// Exit status for any failure other than usage and a fail-closed scan.
pub const EXIT_FAILURE: u8 = 1;
/// Exit status for a scan that failed closed.
pub const EXIT_FAIL_CLOSED: u8 = 3;

/// `println!` to standard output that returns the write's error instead of
/// panicking: a reader that went away (`winx-release status | head -1`)
/// ends the command through `main`, which exits quietly on a broken pipe.
macro_rules! outln {
    () => {
        $crate::common::write_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::common::write_line(format_args!($($arg)*))
    };
}

/// Writes one line to standard output (see `outln!`).
pub(crate) fn write_line(args: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)?;
    out.write_all(b"\n")
}

/// Prints `value` as one JSON line on stdout.
pub(crate) fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

/// Short timeouts: a status that hangs helps nobody.
pub(crate) fn quick() -> Timeouts {
    Timeouts { io: Duration::from_secs(5), ..Timeouts::default() }
}
