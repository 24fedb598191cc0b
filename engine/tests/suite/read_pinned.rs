//! Read-and-pin as an embedder uses it, and refusals that name the target
//! and the cause.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use crate::common::{target, Fixture};
use winx_release_engine::preflight::preflight;
use winx_release_engine::read::{read_pinned, read_pinned_all, Keep};
use winx_release_engine::release::{Outcome, Status, Target};
use winx_release_engine::Reason;

fn run(fx: &Fixture, targets: &[Target]) -> winx_release_engine::ReleaseReport {
    fx.release(targets)
}

#[test]
fn a_pinned_read_releases_the_file_it_read() {
    let fx = Fixture::new();
    let h = fx.helper("sub/a.sh", b"echo hi\n");
    let read = read_pinned(&fx.session, &h, Keep::Bytes(3)).unwrap();
    assert_eq!(read.head.into_bytes(), b"ech");
    assert_eq!(read.pin.size, 8);
    assert_eq!(read.pin.revision(), winx_release_kernel::revision::of_bytes(b"echo hi\n"));
    let report = run(&fx, &[Target::new(&h, read.pin)]);
    assert_eq!(report.status, Status::Completed, "{report}");
    assert_eq!(report.files[0].outcome, Outcome::Released);
    assert!(!h.exists());
}

#[test]
fn a_pinned_read_refuses_what_a_release_refuses() {
    let fx = Fixture::new();
    let s = &fx.session;
    let h = fx.helper("h.py", b"x");
    fs::create_dir(s.join("real")).unwrap();
    fs::write(s.join("real/f"), b"y").unwrap();
    symlink(s.join("real"), s.join("link")).unwrap();
    symlink(&h, s.join("h-link")).unwrap();
    fs::hard_link(&h, s.join("h-twin")).unwrap();
    fs::create_dir(s.join("dir")).unwrap();
    let cases: [(&Path, Reason); 7] = [
        (&s.join("link/f"), Reason::Symlink),
        (&s.join("h-link"), Reason::Symlink),
        (&h, Reason::Hardlink),
        (&s.join("dir"), Reason::NotRegularFile),
        (&s.join("missing"), Reason::NotFound),
        (&fx.ws().join("source.rs"), Reason::NotSessionHelper),
        (&s.join(".winx-release-x/f"), Reason::ReservedNamespace),
    ];
    for (p, want) in cases {
        assert_eq!(read_pinned(s, p, Keep::Nothing).unwrap_err(), want, "{}", p.display());
    }
    // The batch gives each path what the one-file read gives.
    let paths: Vec<&Path> = cases.iter().map(|(p, _)| *p).collect();
    let got = std::sync::Mutex::new(vec![None; paths.len()]);
    read_pinned_all(s, &paths, Keep::Nothing, &|i, r| got.lock().unwrap()[i] = Some(r.map(|r| r.pin)));
    let want: Vec<_> = cases.iter().map(|(_, r)| Some(Err(*r))).collect();
    assert_eq!(got.into_inner().unwrap(), want);
}

/// A denial's detail names the refused target and the cause, not only a code.
#[test]
fn a_refusal_names_the_path_and_the_cause() {
    let fx = Fixture::new();
    let a = fx.helper("a.sh", b"one\n");
    let b = fx.helper("b.sh", b"two\n");
    let stale = target(&b);
    fs::write(&b, b"TWO\n").unwrap();
    // The file as it is now, with the bytes it had when it was read.
    let mut old_bytes = target(&b);
    old_bytes.pin.sha256 = stale.pin.sha256;
    let report = run(&fx, &[target(&a), old_bytes]);
    assert_eq!(report.error_code, Some(Reason::ReadRequired));
    let want = format!("{}: read_required (its content changed since it was read)", b.display());
    assert_eq!(report.detail.as_deref(), Some(want.as_str()), "{report}");

    // A pin whose identity no longer matches.
    let report = run(&fx, &[target(&a), stale]);
    let detail = report.detail.unwrap();
    assert!(detail.starts_with(&format!("{}: read_required (its identity", b.display())), "{detail}");

    // Placement and opening: the path and what the reason means.
    let missing = fx.session.join("gone.sh");
    let report = run(&fx, &[target(&a), crate::common::unpinned(missing.to_str().unwrap())]);
    assert_eq!(report.detail.unwrap(), format!("{}: not_found (the file does not exist)", missing.display()));
    let outside = fx.ws().join("src.rs");
    let refused = preflight(&fx.layout, &fx.thread, &[outside.display().to_string()]).unwrap_err();
    assert_eq!(refused.reason, Reason::NotSessionHelper);
    assert!(refused.detail.starts_with(&format!("{}: not_session_helper (", outside.display())));
    assert!(a.exists() && b.exists());
}

#[test]
fn a_reason_reads_as_its_code_or_with_what_it_means() {
    assert_eq!(Reason::ReadRequired.to_string(), "read_required");
    assert_eq!(
        format!("{:#}", Reason::ReadRequired),
        "read_required (the file changed since it was read, or its token is missing or expired)"
    );
    for r in Reason::ALL {
        assert!(!r.describe().is_empty());
    }
}

/// A helper whose name is not UTF-8 is read, pinned and released through
/// `&Path`; on the wire a target stays a JSON string.
#[test]
fn a_non_utf8_helper_is_released_from_its_path() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let fx = Fixture::new();
    let h = fx.session.join(OsStr::from_bytes(b"h\xff.sh"));
    let twin = fx.session.join(OsStr::from_bytes(b"h\xfe.sh"));
    fs::write(&h, b"echo 1\n").unwrap();
    fs::write(&twin, b"echo 1\n").unwrap();
    let read = read_pinned(&fx.session, &h, Keep::Nothing).unwrap();
    let t = Target::new(&h, read.pin);
    assert!(serde_json::to_string(&t).is_err(), "a non-UTF-8 path never goes on the wire altered");
    let report = run(&fx, &[t]);
    assert_eq!(report.status, Status::Completed, "{report}");
    assert!(!h.exists());
    assert!(twin.exists(), "the name with another invalid byte is another file");
    // A UTF-8 target's JSON is unchanged: the path is a plain string.
    let u = fx.helper("u.sh", b"x");
    let v = serde_json::to_value(Target::new(&u, read_pinned(&fx.session, &u, Keep::Nothing).unwrap().pin)).unwrap();
    assert_eq!(v["path"], serde_json::json!(u.to_str().unwrap()));
}
