//! Parity of the rehash backends: digests, fingerprints and kept heads
//! agree across io_uring and `pread`, every thread count, and with the
//! one-file read; `open_and_hash_at` checks the pin before it hashes.

use std::fs;
use std::os::fd::AsFd;
use std::os::unix::fs::symlink;

use crate::common::trees::*;
use winx_release_engine::read::Keep;
use winx_release_engine::rehash::{hash_fds, open_and_hash_at, HashJob, OpenJob, RehashBackend, RehashOptions};
use winx_release_engine::Pin;

fn temp_file(bytes: &[u8]) -> fs::File {
    use std::io::Write;
    let mut f = tempfile::tempfile().unwrap();
    f.write_all(bytes).unwrap();
    f
}

#[test]
fn rehash_digests_agree_across_backends() {
    let contents: Vec<Vec<u8>> =
        (0..40usize).map(|i| (0..(i * i * 997 + i)).map(|k| (k % 251) as u8 ^ i as u8).collect()).collect();
    let files: Vec<fs::File> = contents.iter().map(|c| temp_file(c)).collect();
    let want: Vec<([u8; 32], u64)> = files.iter().map(|f| winx_release_engine::rehash::sha256_fd(f).unwrap()).collect();
    // The fingerprints (BLAKE3) as the release's recheck takes them.
    let mut buf = vec![0u8; 4096];
    let prints: Vec<_> = files
        .iter()
        .map(|f| winx_release_engine::rehash::fingerprint_fd(f, &mut buf, u64::MAX - 1).unwrap().0)
        .collect();
    let jobs: Vec<HashJob<'_>> =
        files.iter().map(|f| HashJob { fd: f.as_fd(), limit: None, keep: Keep::Bytes(3) }).collect();
    for backend in [RehashBackend::Auto, RehashBackend::Uring, RehashBackend::Sync] {
        for threads in [0, 1, 2, 4] {
            for fingerprint in [false, true] {
                let got = hash_fds(&jobs, &RehashOptions { backend, threads, fingerprint });
                assert_eq!(got.len(), files.len());
                for (i, g) in got.iter().enumerate() {
                    let g = g.as_ref().unwrap();
                    assert_eq!((g.sha256, g.len), want[i], "{backend:?}/{threads}: file {i}");
                    assert_eq!(g.head.clone().into_bytes(), &contents[i][..contents[i].len().min(3)]);
                    assert_eq!(g.fingerprint, fingerprint.then_some(prints[i]), "{backend:?}/{threads}: file {i}");
                }
            }
        }
    }
}

/// Text kept across reads (characters cut by every read boundary), and
/// binary files given up, agree across backends and with the one-file read.
#[test]
fn rehash_text_heads_agree_across_backends() {
    let line = "ÿ€ text — 𝄞 line\n";
    let contents: Vec<Vec<u8>> = (0..24usize)
        .map(|i| {
            let mut c = line.repeat(i * 1500 + i).into_bytes();
            match i % 4 {
                // A NUL far in, past the first read.
                1 => c.insert(c.len() / 2, 0),
                // A bad byte.
                2 => c.push(0xff),
                // A character cut by the end of the file.
                3 => c.extend_from_slice(&"€".as_bytes()[..2]),
                _ => {}
            }
            c
        })
        .collect();
    let files: Vec<fs::File> = contents.iter().map(|c| temp_file(c)).collect();
    let limit = 300_000;
    let want: Vec<Option<String>> = files
        .iter()
        .map(|f| {
            let mut buf = vec![0u8; 4096];
            let r = winx_release_engine::rehash::read_and_hash(f, &mut buf, Keep::Text(limit)).unwrap();
            r.head.into_text(r.len > limit as u64)
        })
        .collect();
    // What the rule says, from the whole contents.
    for (i, c) in contents.iter().enumerate() {
        let expect = match std::str::from_utf8(&c[..c.len().min(limit)]) {
            Ok(s) if !s.contains('\0') => Some(s.to_owned()),
            Err(e) if e.error_len().is_none() && c.len() > limit => {
                Some(std::str::from_utf8(&c[..e.valid_up_to()]).unwrap().to_owned())
            }
            _ => None,
        };
        assert_eq!(want[i], expect, "file {i}");
    }
    assert!(want.iter().any(Option::is_none) && want.iter().filter(|w| w.is_some()).count() > 6);
    let jobs: Vec<HashJob<'_>> =
        files.iter().map(|f| HashJob { fd: f.as_fd(), limit: None, keep: Keep::Text(limit) }).collect();
    for backend in [RehashBackend::Uring, RehashBackend::Sync] {
        for threads in [1, 2] {
            let got = hash_fds(&jobs, &RehashOptions { backend, threads, fingerprint: false });
            for (i, g) in got.into_iter().enumerate() {
                let g = g.unwrap();
                let cut = g.len > limit as u64;
                assert_eq!(g.head.into_text(cut), want[i], "{backend:?}/{threads}: file {i}");
            }
        }
    }
}

#[test]
fn open_and_hash_checks_the_pin_before_hashing() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    write(&d.join("good"), 5000);
    write(&d.join("other"), 10);
    write(&d.join("linked"), 10);
    fs::hard_link(d.join("linked"), d.join("linked2")).unwrap();
    symlink("good", d.join("link")).unwrap();
    fifo(&d.join("fifo"));
    let pin_of = |name: &str| {
        let f = fs::File::open(d.join(name)).unwrap();
        let id = winx_release_engine::Identity::of_fd(&f).unwrap();
        Pin::new(&id, winx_release_engine::rehash::sha256_fd(&f).unwrap().0)
    };
    let good = pin_of("good");
    let linked = pin_of("linked");
    let dir = fs::File::open(d).unwrap();
    let jobs = [
        OpenJob { name: c"good", pin: Some(&good) },
        OpenJob { name: c"other", pin: Some(&good) },
        OpenJob { name: c"linked", pin: Some(&linked) },
        OpenJob { name: c"link", pin: Some(&good) },
        OpenJob { name: c"fifo", pin: None },
        OpenJob { name: c"missing", pin: None },
        OpenJob { name: c"other", pin: None },
    ];
    for backend in [RehashBackend::Auto, RehashBackend::Uring, RehashBackend::Sync] {
        let r = open_and_hash_at(dir.as_fd(), &jobs, &RehashOptions { backend, threads: 0, fingerprint: false });
        assert!(r[0].as_ref().unwrap().hash.as_ref().unwrap().matches(&good), "{backend:?}");
        assert!(r[1].as_ref().unwrap().hash.is_none());
        assert!(r[2].as_ref().unwrap().hash.is_none(), "two links: not hashed");
        assert_eq!(r[3].as_ref().unwrap_err().raw_os_error(), Some(libc_eloop()));
        assert!(r[4].as_ref().unwrap().hash.is_none(), "a fifo is opened non-blocking and not read");
        assert_eq!(r[5].as_ref().unwrap_err().raw_os_error(), Some(rustix::io::Errno::NOENT.raw_os_error()));
        assert_eq!(r[6].as_ref().unwrap().hash.as_ref().unwrap().len, 10);
    }
}

fn libc_eloop() -> i32 {
    rustix::io::Errno::LOOP.raw_os_error()
}
