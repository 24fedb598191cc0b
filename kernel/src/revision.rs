//! Revision strings: the contract's name for a helper's bytes,
//! `sha256:<64 lowercase hex>` of the SHA-256 of every byte.
//!
//! A read (the release engine's `read_pinned`) gives the digest in its
//! [`Pin`](crate::Pin); a write that knows its bytes computes it with
//! [`of_bytes`]; a request that quotes a revision is parsed back with
//! [`parse`], which accepts nothing but the exact form (lowercase hex, no
//! other prefix), so two spellings never name one revision.
//!
//! # References
//! - [FIPS 180-4](https://nvlpubs.nist.gov/nistpubs/FIPS/NIST.FIPS.180-4.pdf) (SHA-256)

use sha2::{Digest, Sha256};

/// SHA-256 of a byte slice.
pub fn sha256_bytes(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The revision string of a digest: `sha256:<64 lowercase hex>`.
pub fn format(digest: &[u8; 32]) -> String {
    format!("sha256:{}", hex::encode(digest))
}

/// The revision string of `bytes`: `format()` of their SHA-256.
pub fn of_bytes(bytes: &[u8]) -> String {
    format(&sha256_bytes(bytes))
}

/// Parses a revision string back into its digest.
///
/// `None` unless `rev` is exactly `sha256:` and 64 lowercase hex digits.
pub fn parse(rev: &str) -> Option<[u8; 32]> {
    let hex_part = rev.strip_prefix("sha256:")?;
    if hex_part.len() != 64 || hex_part.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex_part, &mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_revision_parses_back_and_only_in_its_exact_form() {
        let d = super::sha256_bytes(b"print('hi')\n");
        let r = super::format(&d);
        assert_eq!(super::of_bytes(b"print('hi')\n"), r);
        assert_eq!(super::parse(&r), Some(d));
        assert_eq!(super::parse(&r.to_uppercase()), None);
        assert_eq!(super::parse(&r[..70]), None);
        assert_eq!(super::parse(&r.replace("sha256:", "sha1:")), None);
    }
}
