//! Escapes text into JSON strings on its way to the output, one pass per
//! block.
//!
//! A streamed `ReadFiles` reply carries each content twice: in the text
//! block (the rendering's fence, itself the characters of a JSON string)
//! and in `structuredContent` (a JSON string). [`Out`] is the one buffer
//! both go through on their way to the transport's writer: each content is
//! escaped straight from the read's own buffer into it, 64 KiB of input at
//! a time, and the buffer goes out whenever it holds [`FLUSH_AT`] bytes, so
//! it never grows past about 700 KiB whatever the reply's size. With
//! `--text-result json` the text block is the result's JSON inside a JSON
//! string: its strings are escaped for both at once
//! ([`Nesting::JsonInString`]), still one pass over each content.
//!
//! The escaping is `serde_json`'s (`"`, `\` and control characters; the
//! short forms `\n`, `\r`, `\t`, `\b`, `\f`, else `\u00XX`), which the
//! tests check against `serde_json` for any text cut anywhere. Text is
//! read eight bytes at a time, and the first byte of the eight that needs
//! an escape is found from the word's mask, so the bytes between two
//! escapes (helper text has one every few dozen bytes: each line's
//! newline) are copied as a run, never looked at one by one.

use std::io::{self, Write};

use serde_json::Value;

/// The buffer goes out to the transport's writer when it holds this many
/// bytes: the transport's own buffer size, so that what goes out passes
/// that buffer by and is written to stdout as it is.
pub const FLUSH_AT: usize = super::transport::WRITE_BUFFER;

/// Input bytes escaped into the buffer in one go.
const ESCAPE_CHUNK: usize = 64 * 1024;

/// The longest escape of one input byte (`\\u001f` inside a JSON string
/// inside a JSON string).
const LONGEST_ESCAPE: usize = 7;

/// The most the buffer ever holds: a flush is due at [`FLUSH_AT`], and one
/// chunk's escape (or a small raw write) may come on top.
pub const BUFFER_BOUND: usize = FLUSH_AT + ESCAPE_CHUNK * LONGEST_ESCAPE;

/// Where escaped text goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nesting {
    /// Into a JSON string: `"` becomes `\"`.
    Json,
    /// Into a JSON string that is itself inside a JSON string (the result
    /// as JSON in the text block): `"` becomes `\\\"`.
    JsonInString,
}

/// What an [`Out`] did, for the tests' bounds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Input bytes that went through the escaper.
    pub escaped: usize,
    /// The largest the buffer grew.
    pub peak: usize,
    /// Bytes written as they were, already escaped (a content's
    /// characters kept from its first block for the second:
    /// [`Out::escaped_already`]).
    pub copied: usize,
}

/// The output of a streamed reply: one reused buffer over the transport's
/// writer. [`Write`] on it writes bytes as they are (JSON syntax).
pub struct Out<'a> {
    w: &'a mut dyn Write,
    buf: Vec<u8>,
    stats: Stats,
}

impl<'a> Out<'a> {
    /// A buffer over `w`.
    pub fn new(w: &'a mut dyn Write) -> Out<'a> {
        Out { w, buf: Vec::with_capacity(BUFFER_BOUND), stats: Stats::default() }
    }

    /// Appends `text` as the characters of a JSON string (without quotes)
    /// nested as `nesting` says.
    pub fn escaped(&mut self, text: &[u8], nesting: Nesting) -> io::Result<()> {
        for chunk in text.chunks(ESCAPE_CHUNK) {
            escape_into(chunk, nesting, &mut self.buf);
            self.stats.escaped += chunk.len();
            self.flush_if_full()?;
        }
        Ok(())
    }

    /// `text` as the characters of a JSON string ([`Nesting::Json`]), in
    /// a buffer of their own (to be written, maybe twice, with
    /// [`Out::escaped_already`]).
    pub fn escape_apart(&mut self, text: &[u8]) -> Vec<u8> {
        let mut chars = Vec::with_capacity(text.len() + text.len() / 16 + 16);
        escape_into(text, Nesting::Json, &mut chars);
        self.stats.escaped += text.len();
        chars
    }

    /// Appends `chars`, already the characters of a JSON string (escaped
    /// with [`Nesting::Json`] by [`escape_into`]): copied, not looked at.
    /// A long run goes out past the buffer, in pieces of at most
    /// [`FLUSH_AT`] bytes, after what the buffer holds.
    pub fn escaped_already(&mut self, chars: &[u8]) -> io::Result<()> {
        self.stats.copied += chars.len();
        if chars.len() < FLUSH_AT / 4 {
            return self.raw(chars);
        }
        self.send()?;
        for piece in chars.chunks(FLUSH_AT) {
            self.stats.peak = self.stats.peak.max(piece.len());
            self.w.write_all(piece)?;
        }
        Ok(())
    }

    /// Writes the object `v` as JSON ([`Nesting::Json`]) like
    /// [`Out::json`], but its `content` member, when `content` is given,
    /// as those characters (already escaped: [`Out::escaped_already`])
    /// whatever `v` holds there.
    pub fn json_with_content(&mut self, v: &Value, content: Option<&[u8]>) -> io::Result<()> {
        let (Value::Object(members), Some(chars)) = (v, content) else { return self.json(v, Nesting::Json) };
        self.raw(b"{")?;
        for (i, (k, item)) in members.iter().enumerate() {
            if i > 0 {
                self.raw(b",")?;
            }
            self.string(k, Nesting::Json)?;
            self.raw(b":")?;
            if k == "content" {
                self.raw(b"\"")?;
                self.escaped_already(chars)?;
                self.raw(b"\"")?;
            } else {
                self.json(item, Nesting::Json)?;
            }
        }
        self.raw(b"}")
    }

    /// Writes `v` as JSON, its strings escaped from where they are; with
    /// [`Nesting::JsonInString`], as the characters of a JSON string
    /// holding that JSON.
    pub fn json(&mut self, v: &Value, nesting: Nesting) -> io::Result<()> {
        match v {
            Value::String(s) => self.string(s, nesting),
            Value::Array(items) => {
                self.raw(b"[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.raw(b",")?;
                    }
                    self.json(item, nesting)?;
                }
                self.raw(b"]")
            }
            Value::Object(members) => {
                self.raw(b"{")?;
                for (i, (k, item)) in members.iter().enumerate() {
                    if i > 0 {
                        self.raw(b",")?;
                    }
                    self.string(k, nesting)?;
                    self.raw(b":")?;
                    self.json(item, nesting)?;
                }
                self.raw(b"}")
            }
            // Numbers, booleans and null have nothing to escape.
            scalar => serde_json::to_writer(&mut *self, scalar).map_err(io::Error::from),
        }
    }

    fn string(&mut self, s: &str, nesting: Nesting) -> io::Result<()> {
        let quote: &[u8] = match nesting {
            Nesting::Json => b"\"",
            Nesting::JsonInString => b"\\\"",
        };
        self.raw(quote)?;
        self.escaped(s.as_bytes(), nesting)?;
        self.raw(quote)
    }

    fn raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.buf.extend_from_slice(bytes);
        self.flush_if_full()
    }

    fn flush_if_full(&mut self) -> io::Result<()> {
        if self.buf.len() >= FLUSH_AT {
            self.send()?;
        }
        Ok(())
    }

    fn send(&mut self) -> io::Result<()> {
        self.stats.peak = self.stats.peak.max(self.buf.len());
        self.w.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    /// Writes out what the buffer holds and gives back what it did.
    pub fn finish(mut self) -> io::Result<Stats> {
        self.send()?;
        Ok(self.stats)
    }

    /// A writer into a JSON string through this buffer: what is written
    /// to it is escaped once ([`Nesting::Json`]).
    pub fn in_string(&mut self) -> InString<'_, 'a> {
        InString(self)
    }
}

impl Write for Out<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.raw(buf)?;
        Ok(buf.len())
    }

    /// Nothing: the buffer goes out when it is full and at
    /// [`Out::finish`], and the transport flushes after the whole reply.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A writer into a JSON string (see [`Out::in_string`]).
pub struct InString<'o, 'a>(&'o mut Out<'a>);

impl InString<'_, '_> {
    /// Appends `chars`, already escaped for this string
    /// ([`Out::escaped_already`]).
    pub fn escaped_already(&mut self, chars: &[u8]) -> io::Result<()> {
        self.0.escaped_already(chars)
    }
}

impl Write for InString<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.escaped(buf, Nesting::Json)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

const ONES: u64 = u64::from_ne_bytes([1; 8]);
const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);

/// The bytes of `x` (eight bytes in little-endian order) below 0x20, `"`
/// or `\\`, as the high bit of each: exact for the lowest such byte (what
/// [`escape_into`] needs), while a higher one may also be marked after it.
/// Bytes from 0x80 up (UTF-8 beyond ASCII) are never marked.
fn escape_mask(x: u64) -> u64 {
    // A byte below n (n <= 0x80) leaves its high bit set in x - n·ONES
    // while its own high bit is clear; below the lowest such byte there is
    // no borrow, so that one is marked exactly.
    let below_space = x.wrapping_sub(ONES * 0x20) & !x;
    (below_space | zero_bytes(x ^ (ONES * u64::from(b'"'))) | zero_bytes(x ^ (ONES * u64::from(b'\\')))) & HIGHS
}

/// The zero bytes of `y` as their high bits (exact for the lowest one).
fn zero_bytes(y: u64) -> u64 {
    y.wrapping_sub(ONES) & !y & HIGHS
}

/// Whether one of the eight bytes of `x` is `b`.
pub fn word_has(x: u64, b: u8) -> bool {
    zero_bytes(x ^ (ONES * u64::from(b))) != 0
}

/// The eight bytes of `bytes` from `i` as a little-endian word, if there
/// are eight.
pub fn word_at(bytes: &[u8], i: usize) -> Option<u64> {
    let w = bytes.get(i..i + 8)?;
    Some(u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]))
}

fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// Appends `buf` to `out` as the characters of a JSON string (without its
/// quotes), nested as `nesting` says. `buf` may be cut anywhere, also
/// inside a character: every escaped byte is ASCII.
pub fn escape_into(buf: &[u8], nesting: Nesting, out: &mut Vec<u8>) {
    out.reserve(buf.len() + buf.len() / 16 + 16);
    let (mut start, mut i) = (0, 0);
    // Eight bytes at a time: on to the first byte that needs an escape.
    while let Some(x) = word_at(buf, i) {
        let mask = escape_mask(x);
        if mask == 0 {
            i += 8;
            continue;
        }
        let j = i + (mask.trailing_zeros() / 8) as usize;
        out.extend_from_slice(&buf[start..j]);
        push_escape(buf[j], nesting, out);
        (start, i) = (j + 1, j + 1);
    }
    // The last few bytes one at a time.
    for (j, &b) in buf.iter().enumerate().skip(i) {
        if needs_escape(b) {
            out.extend_from_slice(&buf[start..j]);
            push_escape(b, nesting, out);
            start = j + 1;
        }
    }
    out.extend_from_slice(&buf[start..]);
}

/// The escape of `b` (one that needs it).
fn push_escape(b: u8, nesting: Nesting, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut once = [b'\\', 0, 0, 0, 0, 0];
    let n = match b {
        b'"' | b'\\' => {
            once[1] = b;
            2
        }
        b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => {
            once[1] = match b {
                b'\n' => b'n',
                b'\r' => b'r',
                b'\t' => b't',
                0x08 => b'b',
                _ => b'f',
            };
            2
        }
        _ => {
            once[1..].copy_from_slice(&[b'u', b'0', b'0', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
            6
        }
    };
    match nesting {
        Nesting::Json => out.extend_from_slice(&once[..n]),
        // The escape is itself text in a JSON string: its `\` and `"`
        // are escaped again.
        Nesting::JsonInString => {
            for &c in &once[..n] {
                if c == b'\\' || c == b'"' {
                    out.push(b'\\');
                }
                out.push(c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn escaped(text: &[u8], nesting: Nesting) -> String {
        let mut out = Vec::new();
        escape_into(text, nesting, &mut out);
        String::from_utf8(out).unwrap()
    }

    /// serde_json's string without its quotes.
    fn serde(text: &str) -> String {
        let s = serde_json::to_string(text).unwrap();
        s[1..s.len() - 1].to_owned()
    }

    #[test]
    fn escaping_is_serde_json_s() {
        for text in ["", "plain", "a\"b\\c", "\u{1}\u{8}\u{c}\n\r\t\u{1f}é€😀", "{\"k\":\"v\\n\"}", "\u{7f}\u{80}ÿ"]
        {
            assert_eq!(escaped(text.as_bytes(), Nesting::Json), serde(text), "{text:?}");
            assert_eq!(escaped(text.as_bytes(), Nesting::JsonInString), serde(&serde(text)), "{text:?}");
        }
        // Written in two pieces, the second holding a 16-byte run whose
        // last byte must be escaped (a case the property test below once
        // found against a run that skipped one byte too many).
        let text = "Σ᧐\0a \u{ec8}\0\0𑶓🉐𑍇#𞥞𐰀\0";
        let mut out = Vec::new();
        escape_into(&text.as_bytes()[..18], Nesting::Json, &mut out);
        escape_into(&text.as_bytes()[18..], Nesting::Json, &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), serde(text));
    }

    /// Every byte value at every position of a word is found, and the
    /// first of two is found where it is.
    #[test]
    fn each_byte_at_each_place_of_a_word() {
        for b in 0..=255u8 {
            for at in 0..8 {
                let mut word = [b'a'; 8];
                word[at] = b;
                let mask = escape_mask(u64::from_le_bytes(word));
                assert_eq!(mask != 0, needs_escape(b), "{b:#x} at {at}");
                if needs_escape(b) {
                    assert_eq!(mask.trailing_zeros() / 8, at as u32, "{b:#x} at {at}");
                    for (later, c) in [(7, b'"'), (at + 1, b'\n'), (at + 1, 0xff), (7, 0x80)] {
                        if later > at && later < 8 {
                            word[later] = c;
                            let mask = escape_mask(u64::from_le_bytes(word));
                            assert_eq!(mask.trailing_zeros() / 8, at as u32, "{b:#x} at {at}, {c:#x} at {later}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn json_values_as_serde_json_writes_them() {
        let v = json!({"files": [{"file_path": "/a \"b\"", "content": "x\ny\\", "size": 3, "binary": false,
            "temporary_artifact": {"artifact_generation": "g", "in_use": null}}], "n": -1.5, "e": []});
        for nesting in [Nesting::Json, Nesting::JsonInString] {
            let mut sink = Vec::new();
            let mut out = Out::new(&mut sink);
            out.json(&v, nesting).unwrap();
            out.finish().unwrap();
            let want = match nesting {
                Nesting::Json => v.to_string(),
                Nesting::JsonInString => serde(&v.to_string()),
            };
            assert_eq!(String::from_utf8(sink).unwrap(), want);
        }
    }

    /// A content longer than the buffer goes out in pieces, and the buffer
    /// stays within its bound.
    #[test]
    fn the_buffer_stays_bounded() {
        let text = "line \"one\"\n".repeat(200_000);
        let mut sink = Vec::new();
        let mut out = Out::new(&mut sink);
        out.escaped(text.as_bytes(), Nesting::JsonInString).unwrap();
        let stats = out.finish().unwrap();
        assert_eq!(stats.escaped, text.len());
        assert!(stats.peak <= BUFFER_BOUND && stats.peak >= FLUSH_AT, "{stats:?}");
        assert_eq!(String::from_utf8(sink).unwrap(), serde(&serde(&text)));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            failure_persistence: None,
            ..proptest::prelude::ProptestConfig::default()
        })]

        // Any text, cut anywhere (inside a character too, as the 64 KiB
        // chunks cut it): serde_json's escaping, once or twice over.
        #[test]
        fn escaping_any_text_in_any_pieces_is_serde_json_s(
            text in "(\\PC|[\u{0}-\u{1f}\"\\\\]){0,200}",
            cut in 0usize..800,
        ) {
            let bytes = text.as_bytes();
            let cut = cut.min(bytes.len());
            for nesting in [Nesting::Json, Nesting::JsonInString] {
                let mut out = Vec::new();
                escape_into(&bytes[..cut], nesting, &mut out);
                escape_into(&bytes[cut..], nesting, &mut out);
                let want = match nesting {
                    Nesting::Json => serde(&text),
                    Nesting::JsonInString => serde(&serde(&text)),
                };
                proptest::prop_assert_eq!(String::from_utf8(out).unwrap(), want);
            }
        }
    }
}
