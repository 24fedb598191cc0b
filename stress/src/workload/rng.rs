//! A tiny seeded random number generator (xorshift64*), so that a run is
//! reproducible from its `--seed` without another dependency.

/// xorshift64* with a splitmix64-scrambled seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value, 0 included).
    pub fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Rng(if z == 0 { 0x2545_F491_4F6C_DD1D } else { z })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// An index in `0..n` (0 when `n` is 0).
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    /// A value in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// True with probability `per_mille / 1000`.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }

    /// A seed for another generator.
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next_u64())
    }

    /// `len` bytes of printable text (letters, digits, spaces, newlines):
    /// byte `b` of each 64-bit draw, low byte first, picks letter
    /// `b % 69` of the alphabet (through a table of all 256 answers, about
    /// twice as fast as the division per byte; the same text).
    pub fn text(&mut self, len: usize) -> String {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789      \n";
        const TABLE: [u8; 256] = {
            let mut t = [0u8; 256];
            let mut i = 0;
            while i < 256 {
                t[i] = ALPHABET[i % ALPHABET.len()];
                i += 1;
            }
            t
        };
        let mut s = Vec::with_capacity(len + 8);
        while s.len() < len {
            s.extend(self.next_u64().to_le_bytes().map(|b| TABLE[usize::from(b)]));
        }
        s.truncate(len);
        String::from_utf8(s).unwrap_or_default()
    }

    /// Shuffles `v` in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.index(i + 1);
            v.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_in_range() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
            assert!(a.range(3, 9) <= 9);
            b.range(3, 9);
        }
        assert_ne!(Rng::new(0).next_u64(), 0);
        assert_eq!(a.text(100).len(), 100);
    }

    #[test]
    fn text_is_the_alphabet_drawn_a_byte_of_a_draw_at_a_time() {
        // The reference: one `char` per byte of each 64-bit draw, low
        // byte first (what runs of one seed are compared by).
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789      \n";
        let mut r = Rng::new(11);
        let mut expected = String::new();
        for _ in 0..13 {
            let bits = r.next_u64();
            for k in 0..8 {
                expected.push(ALPHABET[((bits >> (8 * k)) & 0xff) as usize % ALPHABET.len()] as char);
            }
        }
        expected.truncate(100);
        let mut r = Rng::new(11);
        assert_eq!(r.text(100), expected);
        // 100 bytes took 13 draws, the last one in part: the next draw is
        // the 14th.
        let mut reference = Rng::new(11);
        for _ in 0..13 {
            reference.next_u64();
        }
        assert_eq!(r.next_u64(), reference.next_u64());
        assert_eq!(Rng::new(3).text(0), "");
    }
}
