//! The first bytes of a file that a read keeps beside its hash.
//!
//! `ReadFiles` returns a helper's first bytes only when they are text, so a
//! read that keeps them for it gives up at the first byte that cannot be
//! text (a NUL, or a byte that is not UTF-8) and keeps nothing from then
//! on: a binary helper costs no copy and no allocation. Whether the bytes
//! kept are text in the end (a character cut by the end of the file) is
//! still for the caller to decide.

/// What a read keeps of a file's first bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Keep {
    /// Nothing.
    #[default]
    Nothing,
    /// The first `n` bytes, whatever they are.
    Bytes(usize),
    /// The first `n` bytes while they can be text: UTF-8 (a character may
    /// be cut at the end) without NUL. At the first byte that cannot,
    /// everything kept is dropped and the head is marked as not text.
    Text(usize),
}

impl Keep {
    /// The most bytes kept.
    pub(crate) fn limit(self) -> usize {
        match self {
            Keep::Nothing => 0,
            Keep::Bytes(n) | Keep::Text(n) => n,
        }
    }
}

/// The first bytes of a file, gathered read by read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    limit: usize,
    /// Bytes to reserve at the first push (the expected size, if known).
    hint: usize,
    kept: Kept,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kept {
    /// [`Keep::Nothing`] and [`Keep::Bytes`].
    Bytes(Vec<u8>),
    /// [`Keep::Text`]: the text so far, validated once as it came, and the
    /// first bytes of a character cut by the end of the last read.
    Text { text: String, carry: Vec<u8> },
    /// [`Keep::Text`] after a byte that cannot be text.
    NotText,
}

impl Head {
    /// An empty head that keeps what `keep` says.
    pub(crate) fn new(keep: Keep) -> Head {
        Head::sized(keep, u64::MAX)
    }

    /// Like [`Head::new`], for a file expected to hold `size` bytes (room
    /// for that many, up to the limit, is reserved at the first read).
    pub(crate) fn sized(keep: Keep, size: u64) -> Head {
        let limit = keep.limit();
        let kept = match keep {
            Keep::Text(_) => Kept::Text { text: String::new(), carry: Vec::new() },
            _ => Kept::Bytes(Vec::new()),
        };
        Head { limit, hint: usize::try_from(size).unwrap_or(usize::MAX).min(limit), kept }
    }

    /// How many bytes are kept (0 for a [`Keep::Text`] head that met a
    /// byte that cannot be text).
    pub fn len(&self) -> usize {
        match &self.kept {
            Kept::Bytes(b) => b.len(),
            Kept::Text { text, carry } => text.len() + carry.len(),
            Kept::NotText => 0,
        }
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds the next bytes read (from where the last ones ended).
    pub(crate) fn push(&mut self, data: &[u8]) {
        let room = self.limit.saturating_sub(self.len());
        if room == 0 {
            return;
        }
        let data = &data[..room.min(data.len())];
        let hint = self.hint;
        match &mut self.kept {
            Kept::NotText => {}
            Kept::Bytes(b) => {
                if b.capacity() == 0 {
                    b.reserve_exact(hint);
                }
                b.extend_from_slice(data);
            }
            Kept::Text { text, carry } => {
                if !push_text(text, carry, data, hint) {
                    // Nothing of a binary file is kept (and, if its first
                    // read showed it, nothing was allocated).
                    self.kept = Kept::NotText;
                }
            }
        }
    }

    /// Whether a [`Keep::Text`] head met a byte that cannot be text (it then
    /// holds nothing).
    #[cfg(test)]
    pub(crate) fn not_text(&self) -> bool {
        self.kept == Kept::NotText
    }

    /// The bytes kept, by value.
    pub fn into_bytes(self) -> Vec<u8> {
        match self.kept {
            Kept::Bytes(b) => b,
            Kept::Text { text, carry } => {
                let mut b = text.into_bytes();
                b.extend_from_slice(&carry);
                b
            }
            Kept::NotText => Vec::new(),
        }
    }

    /// The bytes kept as text: UTF-8 without NUL, or `None`. `cut` says
    /// that the file goes on past these bytes: then a character cut at the
    /// end is dropped, else it makes the bytes not text.
    pub fn into_text(self, cut: bool) -> Option<String> {
        let (text, carry) = match self.kept {
            Kept::Text { text, carry } => (text, carry),
            Kept::NotText => return None,
            Kept::Bytes(b) => {
                let mut h = Head::new(Keep::Text(b.len()));
                h.push(&b);
                return h.into_text(cut);
            }
        };
        (carry.is_empty() || cut).then_some(text)
    }
}

/// Appends `data` to `text` after checking it once: no NUL, valid UTF-8,
/// with the bytes of a character cut at the end kept in `carry` for the
/// next call. `false` when the bytes cannot be text.
fn push_text(text: &mut String, carry: &mut Vec<u8>, mut data: &[u8], hint: usize) -> bool {
    if data.contains(&0) {
        return false;
    }
    // First the rest of a character the last read cut (at most 3 bytes).
    while !carry.is_empty() {
        let Some((&b, rest)) = data.split_first() else { return true };
        carry.push(b);
        data = rest;
        match std::str::from_utf8(carry) {
            Ok(c) => {
                text.push_str(c);
                carry.clear();
            }
            Err(e) if e.error_len().is_none() => {}
            Err(_) => return false,
        }
    }
    let (valid, cut) = match std::str::from_utf8(data) {
        Ok(s) => (s, &[][..]),
        Err(e) if e.error_len().is_none() => {
            let (v, c) = data.split_at(e.valid_up_to());
            (std::str::from_utf8(v).unwrap_or_default(), c)
        }
        Err(_) => return false,
    };
    // Checked before the first allocation: a binary file allocates nothing.
    if text.capacity() == 0 {
        text.reserve_exact(hint);
    }
    text.push_str(valid);
    carry.extend_from_slice(cut);
    true
}

#[cfg(test)]
mod tests {
    use super::{Head, Keep};

    fn gather(keep: Keep, parts: &[&[u8]]) -> Head {
        let mut h = Head::new(keep);
        for p in parts {
            h.push(p);
        }
        h
    }

    #[test]
    fn bytes_keeps_a_prefix_of_anything() {
        let h = gather(Keep::Bytes(5), &[b"\0\xff", b"abcdef"]);
        assert!(!h.not_text());
        assert_eq!(h.len(), 5);
        assert_eq!(h.clone().into_text(true), None);
        assert_eq!(h.into_bytes(), b"\0\xffabc");
        assert!(gather(Keep::Nothing, &[b"abc"]).is_empty());
        assert_eq!(gather(Keep::Bytes(9), &[b"ab", b"c"]).into_text(false).as_deref(), Some("abc"));
    }

    #[test]
    fn text_keeps_text_across_reads() {
        let s = "héllo wörld".as_bytes();
        // Cut inside the two-byte characters.
        let h = gather(Keep::Text(100), &[&s[..2], &s[2..8], &s[8..]]);
        assert!(!h.not_text());
        assert_eq!(h.clone().into_bytes(), s);
        assert_eq!(h.into_text(false).as_deref(), Some("héllo wörld"));
        // One byte at a time, through every cut.
        let parts: Vec<&[u8]> = s.chunks(1).collect();
        assert_eq!(gather(Keep::Text(100), &parts).into_text(false).as_deref(), Some("héllo wörld"));
        // A limit that cuts a character keeps the cut byte: dropped when
        // the file goes on, not text when the file ends there.
        let h = gather(Keep::Text(2), &[s]);
        assert!(!h.not_text());
        assert_eq!(h.clone().into_bytes(), &s[..2]);
        assert_eq!(h.clone().into_text(true).as_deref(), Some("h"));
        assert_eq!(h.into_text(false), None);
    }

    #[test]
    fn text_gives_up_at_a_nul_or_bad_utf8_and_keeps_nothing() {
        for parts in [&[&b"abc"[..], b"d\0e"][..], &[b"\xff\xfe"], &[b"abc\xc3", b"("], &[b"ok", b"\x80"]] {
            let h = gather(Keep::Text(100), parts);
            assert!(h.not_text(), "{parts:?}");
            assert!(h.is_empty());
            assert_eq!(h.clone().into_text(true), None);
            assert_eq!(h.into_bytes().capacity(), 0);
        }
        // A binary first read allocates nothing.
        let h = gather(Keep::Text(1 << 20), &[b"\xff\x01\x02"]);
        assert_eq!(h.into_bytes().capacity(), 0);
    }

    #[test]
    fn bytes_past_the_limit_do_not_count() {
        // A NUL after the limit is not looked at.
        let h = gather(Keep::Text(3), &[b"abc\0"]);
        assert!(!h.not_text());
        assert_eq!(h.into_text(true).as_deref(), Some("abc"));
    }
}
