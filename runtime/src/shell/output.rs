//! What a shell's terminal printed, as text and markers: escape sequences
//! stripped, `\r\n` made `\n`, and the hook's in-band markers
//! ([`super::OUTPUT_START`], [`super::OUTPUT_END`]) reported as events.
//!
//! The markers only split output into commands: anything a command prints
//! can imitate them, so they never decide whether the shell is busy (the
//! hook's reports and the kernel do, [`super::Shell::busy`]).
//!
//! # References
//! - [ECMA-48](https://ecma-international.org/publications-and-standards/standards/ecma-48/)
//!   (CSI, OSC, string terminators), [xterm control sequences](https://invisible-island.net/xterm/ctlseqs/ctlseqs.html)

use super::hook::{OUTPUT_END, OUTPUT_START};

/// What a chunk of terminal output holds, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Printed text.
    Text(Vec<u8>),
    /// The shell read a command line and starts running it.
    Start,
    /// The shell is back at its prompt: the end marker of the prompt with
    /// this number ([`super::Shell::prompts`] once the engine acknowledged
    /// it). An end marker without a number is not a marker.
    End(u64),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum St {
    #[default]
    Text,
    Esc,
    Csi,
    Osc,
    OscEsc,
    Cr,
}

/// Longest OSC payload kept for matching (longer ones are dropped).
const MAX_OSC: usize = 64;

/// A streaming filter over a terminal's output (chunks may split anything).
#[derive(Debug, Default)]
pub struct OutputFilter {
    st: St,
    osc: Vec<u8>,
}

impl OutputFilter {
    /// Filters `bytes`, returning text and markers in order.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<Piece> {
        let mut out = Vec::new();
        let mut text = Vec::new();
        let mut flush = |text: &mut Vec<u8>, out: &mut Vec<Piece>| {
            if !text.is_empty() {
                out.push(Piece::Text(std::mem::take(text)));
            }
        };
        for &b in bytes {
            match self.st {
                St::Text | St::Cr => {
                    let was_cr = self.st == St::Cr;
                    self.st = St::Text;
                    match b {
                        0x1b => {
                            if was_cr {
                                text.push(b'\r');
                            }
                            self.st = St::Esc;
                        }
                        b'\r' => {
                            if was_cr {
                                text.push(b'\r');
                            }
                            self.st = St::Cr;
                        }
                        b'\n' => text.push(b'\n'),
                        // Other C0 controls but tab and backspace are
                        // terminal noise (bell, shift in/out).
                        0x00..=0x07 | 0x0b | 0x0c | 0x0e..=0x1f | 0x7f => {
                            if was_cr {
                                text.push(b'\r');
                            }
                        }
                        _ => {
                            if was_cr {
                                text.push(b'\r');
                            }
                            text.push(b);
                        }
                    }
                }
                St::Esc => {
                    self.st = match b {
                        b'[' => St::Csi,
                        b']' => {
                            self.osc.clear();
                            St::Osc
                        }
                        // Two-byte sequences (ESC =, ESC >, ESC 7, charset
                        // designations take one more byte, dropped as text
                        // noise at worst).
                        _ => St::Text,
                    };
                }
                St::Csi => {
                    if (0x40..=0x7e).contains(&b) {
                        self.st = St::Text;
                    }
                }
                St::Osc => match b {
                    0x07 => self.end_osc(&mut text, &mut out, &mut flush),
                    0x1b => self.st = St::OscEsc,
                    _ => {
                        if self.osc.len() <= MAX_OSC {
                            self.osc.push(b);
                        }
                    }
                },
                St::OscEsc => {
                    if b == b'\\' {
                        self.end_osc(&mut text, &mut out, &mut flush);
                    } else {
                        self.st = St::Osc;
                    }
                }
            }
        }
        flush(&mut text, &mut out);
        out
    }

    fn end_osc(
        &mut self,
        text: &mut Vec<u8>,
        out: &mut Vec<Piece>,
        flush: &mut impl FnMut(&mut Vec<u8>, &mut Vec<Piece>),
    ) {
        self.st = St::Text;
        let marker = if self.osc == OUTPUT_START.as_bytes() {
            Some(Piece::Start)
        } else {
            prompt_number(&self.osc).map(Piece::End)
        };
        if let Some(m) = marker {
            flush(text, out);
            out.push(m);
        }
        self.osc.clear();
    }
}

/// `777;winx-release;end;<n>` → `n`.
fn prompt_number(osc: &[u8]) -> Option<u64> {
    let n = osc.strip_prefix(OUTPUT_END.as_bytes())?.strip_prefix(b";")?;
    if n.is_empty() || !n.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(n).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&[u8]]) -> Vec<Piece> {
        let mut f = OutputFilter::default();
        let mut v: Vec<Piece> = Vec::new();
        for c in chunks {
            for p in f.feed(c) {
                match (v.last_mut(), p) {
                    (Some(Piece::Text(a)), Piece::Text(b)) => a.extend(b),
                    (_, p) => v.push(p),
                }
            }
        }
        v
    }

    #[test]
    fn markers_split_and_escapes_go_whatever_the_chunks() {
        let raw = b". '/d/c'\r\n\x1b]777;winx-release;start\x07\x1b[1;31mred\x1b[0m\r\nline2\r\n\x1b]777;winx-release;end;12\x07$ ";
        let want = vec![
            Piece::Text(b". '/d/c'\n".to_vec()),
            Piece::Start,
            Piece::Text(b"red\nline2\n".to_vec()),
            Piece::End(12),
            Piece::Text(b"$ ".to_vec()),
        ];
        assert_eq!(all(&[raw]), want);
        let split: Vec<&[u8]> = raw.chunks(3).collect();
        assert_eq!(all(&split), want);
        let one: Vec<&[u8]> = raw.chunks(1).collect();
        assert_eq!(all(&one), want);
    }

    #[test]
    fn an_end_marker_without_a_number_is_no_marker() {
        for bare in [
            &b"\x1b]777;winx-release;end\x07"[..],
            b"\x1b]777;winx-release;end;\x07",
            b"\x1b]777;winx-release;end;1x\x07",
        ] {
            assert_eq!(all(&[bare]), vec![], "{bare:?}");
        }
        assert_eq!(all(&[b"\x1b]777;winx-release;end;0\x07"]), vec![Piece::End(0)]);
    }

    #[test]
    fn other_osc_sequences_and_lone_cr_are_kept_apart() {
        assert_eq!(all(&[b"a\x1b]0;title\x1b\\b\rc"]), vec![Piece::Text(b"ab\rc".to_vec())]);
    }
}
