//! Random bytes and random names from the kernel.
//!
//! # References
//! - [`getrandom(2)`](https://man7.org/linux/man-pages/man2/getrandom.2.html)

use std::io;

/// Fills `buf` with random bytes from the kernel, or fails.
///
/// Use this for secrets (the frontend's token key). It blocks only until the
/// kernel's pool is initialised at boot, and retries on `EINTR`.
///
/// # References
/// - [`getrandom(2)`](https://man7.org/linux/man-pages/man2/getrandom.2.html)
pub fn fill_random(buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// A random lowercase-hex name of `2 * bytes` characters.
///
/// Names made here (command ids, instance ids, quarantine and temporary
/// names) are never secrets. Should the kernel refuse `getrandom` (it does not
/// on any supported Linux), this falls back to a SHA-256 chain over the time,
/// the pid and a process-wide counter, which is unique though not secret.
pub fn random_hex(bytes: usize) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut buf = vec![0u8; bytes];
    if fill_random(&mut buf).is_ok() {
        return hex::encode(buf);
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let seed = format!("{:?}/{}/{}", now, std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
    let mut out = String::new();
    let mut block = crate::revision::sha256_bytes(seed.as_bytes());
    while out.len() < 2 * bytes {
        out.push_str(&hex::encode(block));
        block = crate::revision::sha256_bytes(&block);
    }
    out.truncate(2 * bytes);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_have_the_asked_length_and_differ() {
        let a = super::random_hex(8);
        assert_eq!(a.len(), 16);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(a, super::random_hex(8));
    }
}
