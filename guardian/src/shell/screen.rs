//! A shell's terminal screen, which sleeps while its shell is quiet.
//!
//! A `vt100` screen keeps every cell of its grid, 32 bytes each: 205 KB at
//! 40 × 160, for as long as its shell is remembered, and background shells
//! lived on at their prompt after their command (until `retire.rs`). With
//! tens of shells that was most of the guardian's heap
//! (benches/log/2026-12.md, 2026-12-02, stop 40).
//!
//! A screen whose shell has printed nothing for a while ([`QUIET`],
//! [`QUIET_THREAD`]) may sleep: the
//! parser gives way to the escape sequences that draw its state again
//! (`state_formatted`: the cells, cursor, attributes and input modes; a few
//! hundred bytes for a prompt), and the next output or look rebuilds it
//! from them. It sleeps only when that is exact:
//! - the parser is between sequences: everything since the last complete
//!   OSC string (the hook's end marker before every prompt) is printable
//!   ASCII, `\r`, `\n` or backspace, so its state machine is in its ground
//!   state, as a new parser's is;
//! - a screen rebuilt from the sequences equals it in every field (their
//!   `Debug` forms compared, about 4 ms at 40 × 160), except the count of rows
//!   scrolled off, which only a resize reads and this guardian never
//!   resizes. Anything else (a scroll region, a saved cursor, the
//!   alternate screen used once) keeps the screen awake, and is not
//!   compared again until the terminal prints more.
//!
//! The screen of a background shell that was ended (`retire.rs`) is frozen
//! instead: its shell draws nothing more, so its rendered rows are all a
//! `screen` look can ever need, and they cost a few kilobytes at most.

use std::fmt::Write as _;
use std::num::NonZeroU16;
use std::time::{Duration, Instant};

/// How long a background shell prints nothing before its screen may
/// sleep (a retired one's is frozen instead: [`Screen::freeze`]).
pub(crate) const QUIET: Duration = Duration::from_secs(5);
/// How long a thread's shell prints nothing before its screen may sleep:
/// a thread in use gets a command every few seconds, and putting its
/// screen to sleep after each would cost a comparison of about 4 ms each
/// time; a thread left alone for a minute sleeps.
pub(crate) const QUIET_THREAD: Duration = Duration::from_secs(60);

/// What the bytes since the last complete OSC string were (see the module
/// docs), byte by byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tail {
    /// Anything else: the parser's state is not known.
    Unknown,
    /// An escape was the last byte.
    Esc,
    /// In an OSC string.
    Osc,
    /// Only printable ASCII, `\r`, `\n` or backspace since a complete OSC
    /// string.
    Plain,
}

impl Tail {
    fn step(self, b: u8) -> Tail {
        match (self, b) {
            (_, 0x1b) => Tail::Esc,
            (Tail::Esc, b']') => Tail::Osc,
            (Tail::Osc, 0x07) => Tail::Plain,
            (Tail::Osc, 0x18 | 0x1a) => Tail::Unknown,
            (Tail::Osc, _) => Tail::Osc,
            (Tail::Plain, 0x20..=0x7e | b'\r' | b'\n' | 0x08) => Tail::Plain,
            _ => Tail::Unknown,
        }
    }
}

/// A terminal screen (see the module docs).
pub(crate) struct Screen {
    rows: NonZeroU16,
    cols: NonZeroU16,
    /// The parser while awake; `None` while it sleeps.
    awake: Option<Box<vt100::Parser>>,
    /// While it sleeps, the sequences that draw it (empty while awake).
    drawn: Box<[u8]>,
    /// Its rows for good, once its shell has ended and nothing more will
    /// be drawn ([`Screen::freeze`]).
    frozen: Option<Box<[String]>>,
    tail: Tail,
    last: Instant,
    /// A sleep was found inexact and nothing was printed since: the same
    /// comparison would fail again (the retention worker asks after every
    /// pass, and a comparison costs about 4 ms).
    refused: bool,
}

impl Screen {
    pub(crate) fn new(rows: NonZeroU16, cols: NonZeroU16) -> Screen {
        Screen {
            rows,
            cols,
            awake: Some(Box::new(vt100::Parser::new(rows, cols, 0))),
            drawn: Box::default(),
            frozen: None,
            tail: Tail::Unknown,
            last: Instant::now(),
            refused: false,
        }
    }

    /// Processes what the terminal printed (nothing, once frozen).
    pub(crate) fn process(&mut self, bytes: &[u8]) {
        if self.frozen.is_some() {
            return;
        }
        self.parser().process(bytes);
        self.tail = bytes.iter().fold(self.tail, |t, &b| t.step(b));
        self.last = Instant::now();
        self.refused = false;
    }

    /// Its rows as rendered now (woken if it slept), trailing spaces
    /// trimmed.
    pub(crate) fn rows(&mut self) -> Vec<String> {
        if let Some(rows) = &self.frozen {
            return rows.to_vec();
        }
        let screen = self.parser().screen();
        let (_, cols) = screen.size();
        screen.rows(0, cols.get()).map(|r| r.trim_end().to_owned()).collect()
    }

    /// Keeps only its rows, for good: its shell has ended and nothing more
    /// is drawn (a retired background shell, `retire.rs`). A frozen screen
    /// costs its rows' text, and no comparison ever puts it to sleep.
    pub(crate) fn freeze(&mut self) {
        if self.frozen.is_none() {
            self.frozen = Some(self.rows().into_boxed_slice());
            self.awake = None;
            self.drawn = Box::default();
        }
    }

    /// The screen as it is (woken if it slept).
    #[cfg(test)]
    fn screen(&mut self) -> &vt100::Screen {
        self.parser().screen()
    }

    /// Whether it sleeps.
    #[cfg(test)]
    fn asleep(&self) -> bool {
        self.awake.is_none()
    }

    fn parser(&mut self) -> &mut vt100::Parser {
        let (rows, cols, drawn) = (self.rows, self.cols, &mut self.drawn);
        self.awake.get_or_insert_with(|| {
            let mut p = Box::new(vt100::Parser::new(rows, cols, 0));
            p.process(&std::mem::take(drawn));
            p
        })
    }

    /// Puts the screen to sleep when its shell has been quiet for `quiet`
    /// and that is exact (module docs). True when it sleeps now.
    pub(crate) fn sleep(&mut self, quiet: Duration) -> bool {
        let Some(p) = &self.awake else { return true };
        if self.refused || self.tail != Tail::Plain || self.last.elapsed() < quiet {
            return false;
        }
        let drawn = p.screen().state_formatted().into_bytes();
        let mut again = vt100::Parser::new(self.rows, self.cols, 0);
        again.process(&drawn);
        if !same(p.screen(), again.screen()) {
            self.refused = true;
            return false;
        }
        self.drawn = drawn.into_boxed_slice();
        self.awake = None;
        true
    }
}

/// Whether `a` and `b` are the same in every field but the count of rows
/// scrolled off (`unbounded_len`): their `Debug` forms compared, the second
/// as it is written, up to its first difference.
fn same(a: &vt100::Screen, b: &vt100::Screen) -> bool {
    let mut first = Masked { out: String::new(), skip: false };
    // Writing to a `String` cannot fail.
    let _ = write!(first, "{a:?}");
    let mut second = Masked { out: Against { expected: &first.out, at: 0 }, skip: false };
    write!(second, "{b:?}").is_ok() && second.out.at == first.out.len()
}

/// Passes on what `Debug` writes, leaving out the value of `unbounded_len`
/// (the derived `Debug` writes a field's name, `": "` and its value as
/// pieces of their own).
struct Masked<W> {
    out: W,
    skip: bool,
}

impl<W: std::fmt::Write> std::fmt::Write for Masked<W> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.skip && s.bytes().all(|c| c.is_ascii_digit() || c == b':' || c == b' ') {
            return Ok(());
        }
        self.skip = s == "unbounded_len";
        self.out.write_str(s)
    }
}

/// Compares what is written with `expected`, failing at the first
/// difference (which ends the formatting).
struct Against<'a> {
    expected: &'a str,
    at: usize,
}

impl std::fmt::Write for Against<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.at + s.len();
        if self.expected.as_bytes().get(self.at..end) != Some(s.as_bytes()) {
            return Err(std::fmt::Error);
        }
        self.at = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new() -> Screen {
        Screen::new(NonZeroU16::new(40).unwrap(), NonZeroU16::new(160).unwrap())
    }

    fn text(s: &mut Screen) -> String {
        s.screen().contents()
    }

    const MARK: &[u8] = b"\x1b]777;winx-release;end;3\x07";

    /// A screen that printed `before`, then the hook's marker and a prompt.
    fn at_prompt_after(before: &[u8]) -> Screen {
        let mut s = new();
        s.process(before);
        s.process(MARK);
        s.process(b"$ ");
        s
    }

    /// A prompt after output: it sleeps, and wakes to the same screen, which
    /// then goes on as the one that never slept.
    #[test]
    fn a_quiet_prompt_sleeps_and_wakes_the_same() {
        let mut s = new();
        let mut never = new();
        let mut out = Vec::new();
        for i in 0..60 {
            out.extend_from_slice(format!("line {i}\r\n\x1b[1;32mgreen\x1b[0m \u{e9}\r\n").as_bytes());
        }
        out.extend_from_slice(MARK);
        out.extend_from_slice(b"$ ");
        s.process(&out);
        never.process(&out);
        assert!(!s.sleep(Duration::from_secs(3600)), "not quiet yet");
        assert!(s.sleep(Duration::ZERO), "a prompt after the marker sleeps");
        assert!(s.asleep());
        let more = b"echo hi\r\n\x1b]777;winx-release;start\x07hi\r\n\x1b[7mrev\x1b[m\x1b[2;5H*\x1b[K";
        s.process(more);
        never.process(more);
        assert!(!s.asleep());
        assert!(same(s.screen(), never.screen()));
        assert_eq!(text(&mut s), text(&mut never));
        assert_eq!(s.screen().cursor_position(), never.screen().cursor_position());
    }

    /// Mid-sequence, or without a marker since, it stays awake.
    #[test]
    fn stays_awake_unless_between_sequences() {
        for tail in [&b"$ \x1b["[..], b"$ \x1b]0;title", b"$ \xc3", b"\x1b[1m$ "] {
            let mut s = new();
            s.process(MARK);
            s.process(tail);
            assert!(!s.sleep(Duration::ZERO), "{tail:?}");
        }
        let mut s = new();
        s.process(b"$ ");
        assert!(!s.sleep(Duration::ZERO), "no marker yet");
    }

    /// State the drawing sequences do not carry keeps it awake.
    #[test]
    fn state_not_redrawn_stays_awake() {
        for setup in [&b"\x1b[5;20r"[..], b"\x1b[3;4H\x1b7\x1b[H", b"\x1b[?1049hx\x1b[?1049l"] {
            let mut s = at_prompt_after(setup);
            assert!(!s.sleep(Duration::ZERO), "{setup:?}");
        }
    }

    /// A frozen screen keeps the rows it showed, draws nothing more, and
    /// counts as asleep without a comparison (even one that could not sleep).
    #[test]
    fn a_frozen_screen_keeps_its_rows() {
        let mut s = at_prompt_after(b"\x1b[5;20rout\r\n");
        let rows = s.rows();
        assert!(rows.iter().any(|r| r == "out"), "{rows:?}");
        s.freeze();
        s.process(b"exit\r\n");
        assert_eq!(s.rows(), rows);
        assert!(s.sleep(Duration::from_secs(3600)));
    }

    /// A screen found inexact is not compared again until it prints more;
    /// then it is, and sleeps once the state is gone.
    #[test]
    fn an_inexact_screen_is_not_compared_again_until_it_changes() {
        let mut s = at_prompt_after(b"\x1b[5;20r");
        assert!(!s.sleep(Duration::ZERO));
        assert!(s.refused, "the failed comparison is not remembered");
        assert!(!s.sleep(Duration::ZERO));
        // The scroll region reset: exact again.
        s.process(b"\x1b[r");
        assert!(!s.refused);
        s.process(MARK);
        s.process(b"$ ");
        assert!(s.sleep(Duration::ZERO), "a screen that changed is compared again");
    }
}
