//! Generation tokens: what `ReadFiles` hands out and a release must present.
//!
//! A token is `"g1."` followed by 64 lowercase hex digits: an HMAC-SHA256,
//! under a 32-byte secret drawn from the OS when the frontend process starts,
//! over an explicitly length-framed message (see [`frame`]):
//!
//! 1. the domain tag `winx-release/artifact-generation/v2`,
//! 2. the thread id, 3. the workspace root, 4. the exact path,
//! 5. device, 6. inode, 7. size (each a big-endian `u64`),
//! 8. change time seconds (big-endian `i64`), 9. nanoseconds (big-endian `u32`),
//! 10. the 32 bytes of the SHA-256 of the bytes read,
//! 11. the birth time (`STATX_BTIME`): seconds (big-endian `i64`) then
//!     nanoseconds (big-endian `u32`), or an empty field where the
//!     filesystem reports none,
//! 12. the inode generation number (`FS_IOC_GETVERSION`, big-endian `u32`),
//!     or an empty field where the filesystem answers none.
//!
//! Fields 11 and 12 tell a file recreated under a reused inode number within
//! one change-time tick from the one that was read.
//!
//! Nothing is stored per file: a token verifies only against the same fields
//! and the same secret, so a new frontend process (a new secret) expires every
//! earlier token. Verification is constant-time ([`Mac::verify_slice`]).

use std::fmt;
use std::io;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use winx_release_engine::{Pin, Reason};

/// The domain tag, the first framed field of every token message.
pub const TOKEN_DOMAIN: &str = "winx-release/artifact-generation/v2";
/// The prefix of every token's text.
pub const TOKEN_PREFIX: &str = "g1.";

type HmacSha256 = Hmac<Sha256>;

/// Appends one field to `out`: its length as a big-endian `u64`, then its
/// bytes. A sequence of framed fields decodes in exactly one way, so two
/// different field lists never give the same message.
pub fn frame(out: &mut Vec<u8>, field: &[u8]) {
    out.extend_from_slice(&(field.len() as u64).to_be_bytes());
    out.extend_from_slice(field);
}

/// What a token binds: the scoped thread, workspace and path, and the
/// physical identity and digest of the file that was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenSubject<'a> {
    /// The thread id.
    pub thread_id: &'a str,
    /// The workspace root, as `Initialize` returned it.
    pub workspace_root: &'a str,
    /// The exact path as requested.
    pub path: &'a str,
    /// Device, inode, size, change time and SHA-256 of the opened file.
    pub pin: Pin,
}

impl TokenSubject<'_> {
    /// The framed message the HMAC is computed over.
    pub fn message(&self) -> Vec<u8> {
        let p = &self.pin;
        let mut m = Vec::with_capacity(256 + self.path.len() + self.workspace_root.len() + self.thread_id.len());
        frame(&mut m, TOKEN_DOMAIN.as_bytes());
        frame(&mut m, self.thread_id.as_bytes());
        frame(&mut m, self.workspace_root.as_bytes());
        frame(&mut m, self.path.as_bytes());
        frame(&mut m, &p.dev.to_be_bytes());
        frame(&mut m, &p.ino.to_be_bytes());
        frame(&mut m, &p.size.to_be_bytes());
        frame(&mut m, &p.ctime_sec.to_be_bytes());
        frame(&mut m, &p.ctime_nsec.to_be_bytes());
        frame(&mut m, &p.sha256);
        match p.btime {
            Some((sec, nsec)) => frame(&mut m, &[sec.to_be_bytes().as_slice(), &nsec.to_be_bytes()].concat()),
            None => frame(&mut m, &[]),
        }
        match p.generation {
            Some(g) => frame(&mut m, &g.to_be_bytes()),
            None => frame(&mut m, &[]),
        }
        m
    }
}

/// The process secret that tokens are made and checked with.
pub struct TokenKey {
    secret: [u8; 32],
}

impl fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenKey(<secret>)")
    }
}

impl TokenKey {
    /// A key with a fresh random secret from the OS: one per frontend
    /// process, so that a restart expires every earlier token.
    ///
    /// # Errors
    /// The OS's random source failed.
    ///
    /// # References
    /// - [`getrandom(2)`](https://man7.org/linux/man-pages/man2/getrandom.2.html)
    pub fn generate() -> io::Result<TokenKey> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| io::Error::other(format!("random secret: {e}")))?;
        Ok(TokenKey { secret })
    }

    /// A key with a given secret (tests and tools that must reproduce tokens).
    pub fn from_secret(secret: [u8; 32]) -> TokenKey {
        TokenKey { secret }
    }

    fn mac(&self, subject: &TokenSubject<'_>) -> HmacSha256 {
        // HMAC accepts keys of any length; 32 bytes cannot fail.
        let mut mac = <HmacSha256 as KeyInit>::new_from_slice(&self.secret).expect("HMAC takes any key length");
        mac.update(&subject.message());
        mac
    }

    /// The token for `subject`: `g1.<64 lowercase hex>`.
    pub fn mint(&self, subject: &TokenSubject<'_>) -> String {
        let tag = self.mac(subject).finalize().into_bytes();
        format!("{TOKEN_PREFIX}{}", hex::encode(tag))
    }

    /// Checks `token` against `subject` in constant time.
    ///
    /// A missing or malformed token, one made under another secret, or one
    /// made for any other field value fails with `read_required`.
    pub fn verify(&self, token: Option<&str>, subject: &TokenSubject<'_>) -> Result<(), Reason> {
        let tag = token.and_then(parse_token).ok_or(Reason::ReadRequired)?;
        self.mac(subject).verify_slice(&tag).map_err(|_| Reason::ReadRequired)
    }
}

/// The 32 tag bytes of a well-formed token, or `None`.
fn parse_token(token: &str) -> Option<[u8; 32]> {
    let h = token.strip_prefix(TOKEN_PREFIX)?;
    if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return None;
    }
    let mut tag = [0u8; 32];
    hex::decode_to_slice(h, &mut tag).ok()?;
    Some(tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin() -> Pin {
        Pin {
            dev: 2049,
            ino: 1234,
            size: 10,
            ctime_sec: 1_700_000_000,
            ctime_nsec: 5,
            sha256: [7u8; 32],
            btime: Some((1_700_000_000, 4)),
            generation: Some(77),
        }
    }

    fn subject(pin: Pin) -> TokenSubject<'static> {
        TokenSubject { thread_id: "t1", workspace_root: "/ws", path: "/ws/.winx/tmp/session-x/h.py", pin }
    }

    #[test]
    fn roundtrip_and_shape() {
        let k = TokenKey::from_secret([1u8; 32]);
        let s = subject(pin());
        let t = k.mint(&s);
        assert!(t.starts_with("g1.") && t.len() == 67);
        assert!(t[3..].bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_eq!(k.verify(Some(&t), &s), Ok(()));
        // Deterministic for one secret.
        assert_eq!(k.mint(&s), t);
    }

    #[test]
    fn every_field_is_bound() {
        let k = TokenKey::from_secret([2u8; 32]);
        let base = subject(pin());
        let t = k.mint(&base);
        let mut variants: Vec<TokenSubject<'static>> = vec![
            TokenSubject { thread_id: "t2", ..base },
            TokenSubject { workspace_root: "/ws2", ..base },
            TokenSubject { path: "/ws/.winx/tmp/session-x/g.py", ..base },
        ];
        let p = pin();
        for q in [
            Pin { dev: p.dev + 1, ..p },
            Pin { ino: p.ino + 1, ..p },
            Pin { size: p.size + 1, ..p },
            Pin { ctime_sec: p.ctime_sec + 1, ..p },
            Pin { ctime_nsec: p.ctime_nsec + 1, ..p },
            Pin { sha256: [8u8; 32], ..p },
            Pin { btime: Some((1_700_000_000, 5)), ..p },
            Pin { btime: None, ..p },
            Pin { generation: Some(78), ..p },
            Pin { generation: None, ..p },
        ] {
            variants.push(subject(q));
        }
        for v in &variants {
            assert_eq!(k.verify(Some(&t), v), Err(Reason::ReadRequired), "{v:?}");
        }
    }

    /// An inode number reused within one change-time tick, same bytes: only
    /// the generation number or the birth time differs. The tokens differ,
    /// and the release's comparison refuses the recreated file.
    #[test]
    fn reused_inode_differing_only_in_generation_or_birth_is_another_generation() {
        let k = TokenKey::from_secret([6u8; 32]);
        let p = pin();
        let read = winx_release_engine::Identity {
            dev: p.dev,
            ino: p.ino,
            mode: 0o100600,
            nlink: 1,
            size: p.size,
            ctime_sec: p.ctime_sec,
            ctime_nsec: p.ctime_nsec,
            blocks: 8,
            btime: p.btime,
            generation: p.generation,
        };
        assert!(p.matches_identity(&read));
        let t = k.mint(&subject(p));
        for recreated in [
            winx_release_engine::Identity { generation: Some(78), ..read },
            winx_release_engine::Identity { btime: Some((1_700_000_000, 6)), ..read },
        ] {
            let q = Pin::new(&recreated, p.sha256);
            assert_ne!(k.mint(&subject(q)), t);
            assert_eq!(k.verify(Some(&t), &subject(q)), Err(Reason::ReadRequired));
            assert!(!p.matches_identity(&recreated), "{recreated:?}");
            assert!(!p.same_object(&recreated), "{recreated:?}");
        }
    }

    #[test]
    fn other_secret_and_malformed_tokens() {
        let s = subject(pin());
        let t = TokenKey::from_secret([3u8; 32]).mint(&s);
        let other = TokenKey::from_secret([4u8; 32]);
        assert_eq!(other.verify(Some(&t), &s), Err(Reason::ReadRequired));
        let k = TokenKey::from_secret([3u8; 32]);
        let upper = format!("g1.{}", t[3..].to_uppercase());
        let mut flipped = t.clone().into_bytes();
        flipped[10] = if flipped[10] == b'0' { b'1' } else { b'0' };
        let flipped = String::from_utf8(flipped).unwrap();
        for bad in [
            None,
            Some(""),
            Some("g1."),
            Some(&t[3..]),
            Some(&t[..66]),
            Some(upper.as_str()),
            Some(flipped.as_str()),
            Some("g2.0000000000000000000000000000000000000000000000000000000000000000"),
        ] {
            assert_eq!(k.verify(bad, &s), Err(Reason::ReadRequired), "{bad:?}");
        }
        let extra = format!("{t}0");
        assert_eq!(k.verify(Some(&extra), &s), Err(Reason::ReadRequired));
    }

    #[test]
    fn framing_separates_fields() {
        let k = TokenKey::from_secret([5u8; 32]);
        let a = TokenSubject { thread_id: "ab", workspace_root: "c", path: "/p", pin: pin() };
        let b = TokenSubject { thread_id: "a", workspace_root: "bc", path: "/p", pin: pin() };
        assert_ne!(a.message(), b.message());
        assert_ne!(k.mint(&a), k.mint(&b));
        let mut m = Vec::new();
        frame(&mut m, b"ab");
        assert_eq!(m, [0, 0, 0, 0, 0, 0, 0, 2, b'a', b'b']);
    }

    #[test]
    fn generated_keys_differ() {
        let s = subject(pin());
        let a = TokenKey::generate().unwrap();
        let b = TokenKey::generate().unwrap();
        assert_ne!(a.mint(&s), b.mint(&s));
        assert_eq!(format!("{a:?}"), "TokenKey(<secret>)");
    }
}
