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
    /// everything kept is dropped and the head is marked [`Head::not_text`].
    Text(usize),
}

impl Keep {
    /// The most bytes kept.
    pub fn limit(self) -> usize {
        match self {
            Keep::Nothing => 0,
            Keep::Bytes(n) | Keep::Text(n) => n,
        }
    }
}

/// The first bytes of a file, gathered read by read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Head {
    keep: Keep,
    bytes: Vec<u8>,
    /// `bytes[..checked]` is valid UTF-8 (text mode).
    checked: usize,
    not_text: bool,
}

impl Head {
    /// An empty head that keeps what `keep` says.
    pub fn new(keep: Keep) -> Head {
        Head { keep, ..Head::default() }
    }

    /// Adds the next bytes read (from where the last ones ended).
    pub fn push(&mut self, data: &[u8]) {
        let room = self.keep.limit().saturating_sub(self.bytes.len());
        if room == 0 || self.not_text {
            return;
        }
        let data = &data[..room.min(data.len())];
        if let Keep::Text(_) = self.keep {
            if data.contains(&0) {
                return self.give_up();
            }
            // The first bytes are checked before they are copied, so that a
            // binary file is given up without an allocation.
            if self.bytes.is_empty() {
                if let Err(e) = std::str::from_utf8(data) {
                    if e.error_len().is_some() {
                        return self.give_up();
                    }
                }
            }
        }
        if self.bytes.capacity() == 0 {
            self.bytes.reserve_exact(self.keep.limit());
        }
        self.bytes.extend_from_slice(data);
        if let Keep::Text(_) = self.keep {
            match std::str::from_utf8(&self.bytes[self.checked..]) {
                Ok(_) => self.checked = self.bytes.len(),
                // A character cut at the end of these bytes: the next
                // read may complete it.
                Err(e) if e.error_len().is_none() => self.checked += e.valid_up_to(),
                Err(_) => self.give_up(),
            }
        }
    }

    fn give_up(&mut self) {
        self.not_text = true;
        self.bytes = Vec::new();
        self.checked = 0;
    }

    /// Whether a [`Keep::Text`] head met a byte that cannot be text (it then
    /// holds nothing).
    pub fn not_text(&self) -> bool {
        self.not_text
    }

    /// The bytes kept.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The bytes kept, by value.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
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
        assert_eq!(h.bytes(), b"\0\xffabc");
        assert!(!h.not_text());
        assert_eq!(gather(Keep::Nothing, &[b"abc"]).bytes(), b"");
    }

    #[test]
    fn text_keeps_text_across_reads() {
        let s = "héllo wörld".as_bytes();
        // Cut inside the two-byte characters.
        let h = gather(Keep::Text(100), &[&s[..2], &s[2..8], &s[8..]]);
        assert_eq!(h.bytes(), s);
        assert!(!h.not_text());
        // A limit that cuts a character keeps the cut bytes: the caller trims.
        let h = gather(Keep::Text(2), &[s]);
        assert_eq!(h.bytes(), &s[..2]);
        assert!(!h.not_text());
    }

    #[test]
    fn text_gives_up_at_a_nul_or_bad_utf8_and_keeps_nothing() {
        for parts in [&[&b"abc"[..], b"d\0e"][..], &[b"\xff\xfe"], &[b"abc\xc3", b"("], &[b"ok", b"\x80"]] {
            let h = gather(Keep::Text(100), parts);
            assert!(h.not_text(), "{parts:?}");
            assert_eq!(h.bytes(), b"");
            assert_eq!(h.clone().into_bytes().capacity(), 0);
        }
        // A binary first read allocates nothing.
        let h = gather(Keep::Text(1 << 20), &[b"\x00\x01\x02"]);
        assert_eq!(h.into_bytes().capacity(), 0);
    }

    #[test]
    fn bytes_past_the_limit_do_not_count() {
        // A NUL after the limit is not looked at.
        let h = gather(Keep::Text(3), &[b"abc\0"]);
        assert_eq!(h.bytes(), b"abc");
        assert!(!h.not_text());
    }
}
