//! Read-and-pin for display: the bytes a host shows are the bytes the pin
//! hashed, from one read, and a pin of those bytes never releases newer
//! ones.

use sha2::{Digest, Sha256};
use winx_release_engine::read::{read_pinned, Keep};
use winx_release_engine::{release, Admission, IdleOwner, Layout, Outcome, ReleaseOptions, ReleaseRequest, Target};

fn layout() -> (tempfile::TempDir, Layout) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    std::fs::create_dir(root.join("ws")).unwrap();
    let layout = Layout::new(root.join("ws"), root.join("data")).unwrap();
    layout.create_session_dir("t1").unwrap();
    (tmp, layout)
}

#[test]
fn the_bytes_shown_are_the_bytes_pinned() {
    let (_tmp, layout) = layout();
    let dir = layout.session_dir("t1");
    let helper = dir.join("helper.bin");
    // Not text: a host shows it its own way, from these bytes.
    let bytes: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    std::fs::write(&helper, &bytes).unwrap();
    let read = read_pinned(&dir, &helper, Keep::Bytes(1 << 20)).unwrap();
    assert!(read.is_whole());
    let pin = read.pin;
    let shown = read.into_whole().unwrap();
    assert_eq!(shown, bytes);
    assert_eq!(<[u8; 32]>::from(Sha256::digest(&shown)), pin.sha256, "the pin hashed other bytes than shown");
    assert_eq!(pin.size, shown.len() as u64);
}

#[test]
fn a_head_shorter_than_the_file_is_not_whole() {
    let (_tmp, layout) = layout();
    let dir = layout.session_dir("t1");
    let helper = dir.join("long.txt");
    std::fs::write(&helper, "x".repeat(5000)).unwrap();
    let read = read_pinned(&dir, &helper, Keep::Bytes(4096)).unwrap();
    assert!(!read.is_whole());
    assert_eq!(read.into_whole(), None);
    // Text that is not text keeps nothing: not whole either.
    std::fs::write(&helper, b"ab\0cd").unwrap();
    let read = read_pinned(&dir, &helper, Keep::Text(4096)).unwrap();
    assert!(!read.is_whole());
    // An empty file is whole.
    std::fs::write(&helper, b"").unwrap();
    assert_eq!(read_pinned(&dir, &helper, Keep::Text(4096)).unwrap().into_whole(), Some(vec![]));
}

#[test]
fn a_file_changed_after_the_read_is_not_released_on_the_newer_bytes() {
    let (_tmp, layout) = layout();
    let dir = layout.session_dir("t1");
    let helper = dir.join("helper.sh");
    std::fs::write(&helper, "echo shown\n").unwrap();
    let read = read_pinned(&dir, &helper, Keep::Bytes(1 << 16)).unwrap();
    let pin = read.pin;
    assert_eq!(read.into_whole().unwrap(), b"echo shown\n");
    // The agent rewrites it (same length, same object) after it was shown.
    std::fs::write(&helper, "echo newer\n").unwrap();
    let targets = [Target::new(&helper, pin)];
    let rr = ReleaseRequest { layout: &layout, thread_id: "t1", targets: &targets };
    let barrier = Admission::new();
    let _no_fork = crate::common::no_fork_now();
    let report = release(&rr, &barrier.enter(), &IdleOwner, &ReleaseOptions::default());
    assert_ne!(report.files[0].outcome, Outcome::Released, "{report}");
    assert_eq!(std::fs::read(&helper).unwrap(), b"echo newer\n");
}
