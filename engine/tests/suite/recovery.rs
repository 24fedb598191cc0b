//! Recovery never forgets: only `ENOENT` means a quarantine is gone; any
//! other error keeps the journal and is reported. Recovery holds `D/journal`
//! exclusively and never runs beside a release in flight.

use std::fs;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use crate::common::{target, Fixture};
use winx_release_engine::admission::Admission;
use winx_release_engine::fault::FaultPoint;
use winx_release_engine::journal::{entry_name, rename_noreplace, Quarantine};
use winx_release_engine::journal::{DirIdentity, Journal, JournalIntent, JournalLock, JournalTarget};
use winx_release_engine::owner::IdleOwner;
use winx_release_engine::recovery::{recover, recover_with, RecoveryOptions};
use winx_release_engine::release::{release, ReleaseOptions, ReleaseRequest, Status};
use winx_release_engine::resolve::open_dir_abs;
use winx_release_kernel::identity::Identity;

/// The state a release leaves when it dies right after moving `h` into its
/// quarantine: a journal naming it, the object in the quarantine, its name
/// free. Returns (journal path, quarantined path).
fn crashed_after_rename(fx: &Fixture, h: &Path) -> (PathBuf, PathBuf) {
    crashed_after_rename_with(fx, h, false)
}

/// [`crashed_after_rename`], the journal recording the quarantine's
/// identity (as releases now write it) when `identity`, else not (as older
/// releases did).
fn crashed_after_rename_with(fx: &Fixture, h: &Path, identity: bool) -> (PathBuf, PathBuf) {
    let t = target(h);
    let session = open_dir_abs(&fx.session).unwrap();
    let q = Quarantine::create(session.as_fd(), &fx.session).unwrap();
    let jdir = fx.layout.journal_dir();
    let intent = JournalIntent {
        version: 1,
        id: q.name.trim_start_matches(".winx-release-").to_owned(),
        workspace: fx.layout.workspace().to_path_buf(),
        session_dir: fx.session.clone(),
        quarantine_dir: q.path.clone(),
        quarantine_identity: identity.then(|| DirIdentity::of(&Identity::of_fd(&q.dir).unwrap())),
        targets: vec![JournalTarget { file_path: h.to_path_buf(), quarantine_name: entry_name(0), pin: t.pin }],
    };
    let journal = Journal::begin(JournalLock::shared(&jdir).unwrap(), &jdir, &intent).unwrap();
    let jpath = journal.path().to_path_buf();
    let name = h.file_name().unwrap().to_str().unwrap();
    rename_noreplace(session.as_fd(), name, q.dir.as_fd(), entry_name(0)).unwrap();
    drop(journal); // the process died: its lock is gone, its journal stays
    (jpath, q.path.join(entry_name(0)))
}

#[test]
fn injected_emfile_opening_the_quarantine_keeps_the_journal() {
    let fx = Fixture::new();
    let h = fx.helper("h.txt", b"keep me");
    let (jpath, qpath) = crashed_after_rename(&fx, &h);
    let hook = |p: &FaultPoint<'_>| match p {
        FaultPoint::RecoveryOpenQuarantine { .. } => Err(io::Error::from_raw_os_error(libc::EMFILE)),
        _ => Ok(()),
    };
    let opts = RecoveryOptions { faults: Some(&hook), ..RecoveryOptions::default() };
    let r = recover_with(fx.layout.data_dir(), &[], &opts).unwrap();
    assert!(jpath.exists(), "the journal, the only map back to {}, was retired: {r:?}", h.display());
    assert_eq!(r.kept_journals.len(), 1, "{r:?}");
    assert!(r.kept_journals[0].error.contains("os error 24"), "{r:?}");
    assert!(r.restored.is_empty() && r.removed_before_crash.is_empty(), "{r:?}");
    assert_eq!(fs::read(&qpath).unwrap(), b"keep me");

    // Once the error is gone, recovery puts it back and retires the journal.
    let r = recover(fx.layout.data_dir(), &[]).unwrap();
    assert_eq!(r.restored.len(), 1, "{r:?}");
    assert_eq!(fs::read(&h).unwrap(), b"keep me");
    assert!(!jpath.exists());
}

/// A real `EACCES`: recovery runs in a thread whose credentials are
/// `nobody`'s, and the quarantine is root's 0700 directory.
#[test]
fn real_eacces_opening_the_quarantine_keeps_the_journal() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root to take another uid in one thread");
        return;
    }
    let fx = Fixture::new();
    let h = fx.helper("h.txt", b"keep me too");
    let (jpath, qpath) = crashed_after_rename(&fx, &h);
    // Everything readable by nobody except the quarantine itself (0700).
    let mut p = fx.session.clone();
    loop {
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        if p == fx._tmp.path().canonicalize().unwrap() || !p.pop() {
            break;
        }
    }
    for d in [fx.layout.data_dir().to_path_buf(), fx.layout.journal_dir()] {
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
    }
    fs::set_permissions(&jpath, fs::Permissions::from_mode(0o644)).unwrap();
    let data = fx.layout.data_dir().to_path_buf();
    let r = std::thread::spawn(move || {
        let nobody = rustix::process::Uid::from_raw(65534);
        rustix::thread::set_thread_res_uid(nobody, nobody, nobody).unwrap();
        recover(&data, &[])
    })
    .join()
    .unwrap()
    .unwrap();
    assert!(jpath.exists(), "journal retired on EACCES: {r:?}");
    assert_eq!(r.kept_journals.len(), 1, "{r:?}");
    assert!(r.kept_journals[0].error.contains("ermission denied"), "{r:?}");
    assert_eq!(fs::read(&qpath).unwrap(), b"keep me too");
}

/// A release paused after its first rename holds `D/journal` shared; a
/// recovery beside it refuses within its wait, or waits for it, and never
/// retires or restores anything of the live run.
#[test]
fn recovery_beside_a_release_in_flight_waits_or_refuses() {
    let fx = Fixture::new();
    let h = fx.helper("h.txt", b"in flight");
    let t = [target(&h)];
    let (at_tx, at_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let go_rx = std::sync::Mutex::new(go_rx);
    let at_tx = std::sync::Mutex::new(at_tx);
    let hook = move |p: &FaultPoint<'_>| {
        if let FaultPoint::AfterRename { .. } = p {
            at_tx.lock().unwrap().send(()).unwrap();
            go_rx.lock().unwrap().recv().unwrap();
        }
        Ok(())
    };
    std::thread::scope(|s| {
        let releasing = s.spawn(|| {
            let opts = ReleaseOptions { faults: Some(&hook), ..ReleaseOptions::default() };
            release(
                &ReleaseRequest { layout: &fx.layout, thread_id: &fx.thread, targets: &t },
                &Admission::new().enter(),
                &IdleOwner,
                &opts,
            )
        });
        at_rx.recv().unwrap();
        let journals: Vec<_> = fs::read_dir(fx.layout.journal_dir()).unwrap().collect();
        assert_eq!(journals.len(), 1, "a live journal");
        assert!(!h.exists(), "the target sits in quarantine");

        // Refuses within its wait, touching nothing.
        let opts = RecoveryOptions { lock_wait: Duration::from_millis(200), ..RecoveryOptions::default() };
        let e = recover_with(fx.layout.data_dir(), &[fx.layout.workspace().to_path_buf()], &opts).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{e}");
        assert!(!h.exists(), "recovery restored a target of a live release");
        assert_eq!(fs::read_dir(fx.layout.journal_dir()).unwrap().count(), 1, "live journal retired");

        // Waits: it runs once the release is done, and finds nothing left.
        let waiting = s.spawn(|| recover(fx.layout.data_dir(), &[fx.layout.workspace().to_path_buf()]));
        std::thread::sleep(Duration::from_millis(200));
        assert!(!waiting.is_finished(), "recovery did not wait for the release");
        go_tx.send(()).unwrap();
        let report = releasing.join().unwrap();
        assert_eq!(report.status, Status::Completed, "{report:?}");
        let r = waiting.join().unwrap().unwrap();
        assert_eq!(r.journals, 0, "{r:?}");
        assert!(r.restored.is_empty() && r.preserved.is_empty(), "{r:?}");
    });
    assert!(!h.exists());
}

/// The workspace moved after a crash and a new one stands at its path
/// (`Initialize` made the session directory again): the quarantine is not
/// at its journaled path, but it is not gone. The journal is kept and
/// reported; once the workspace is back, recovery restores the helper.
#[test]
fn a_replaced_session_directory_keeps_the_journal() {
    let fx = Fixture::new();
    let h = fx.helper("h.txt", b"moved with the workspace");
    let (jpath, qpath) = crashed_after_rename_with(&fx, &h, true);
    let ws = fx.ws().to_path_buf();
    let moved = ws.with_file_name("ws.moved");
    fs::rename(&ws, &moved).unwrap();
    fs::create_dir_all(&fx.session).unwrap();
    let r = recover(fx.layout.data_dir(), &[]).unwrap();
    assert!(jpath.exists(), "the journal was retired while its quarantine lives on: {r:?}");
    assert_eq!(r.kept_journals.len(), 1, "{r:?}");
    assert!(r.kept_journals[0].error.contains("not found at its journaled path"), "{r:?}");
    let elsewhere = moved.join(qpath.strip_prefix(&ws).unwrap());
    assert_eq!(fs::read(&elsewhere).unwrap(), b"moved with the workspace");

    // Another directory under the quarantine's name: not the one the
    // release made. Nothing is taken from it; the journal stays.
    fs::create_dir(qpath.parent().unwrap()).unwrap();
    let r = recover(fx.layout.data_dir(), &[]).unwrap();
    assert!(jpath.exists(), "{r:?}");
    assert!(r.kept_journals[0].error.contains("identity differs"), "{r:?}");
    assert!(qpath.parent().unwrap().exists(), "recovery removed a directory it did not make");

    // The workspace is back: the helper is restored, the journal retired.
    fs::remove_dir_all(&ws).unwrap();
    fs::rename(&moved, &ws).unwrap();
    let r = recover(fx.layout.data_dir(), &[]).unwrap();
    assert_eq!(r.restored.len(), 1, "{r:?}");
    assert_eq!(fs::read(&h).unwrap(), b"moved with the workspace");
    assert!(!jpath.exists());
}

/// A journal without the quarantine's identity (written by an older
/// release) keeps today's rule: `ENOENT` at the journaled path retires it.
#[test]
fn an_old_journal_without_identity_is_retired_on_enoent() {
    let fx = Fixture::new();
    let h = fx.helper("h.txt", b"old journal");
    let (jpath, _) = crashed_after_rename_with(&fx, &h, false);
    let ws = fx.ws().to_path_buf();
    fs::rename(&ws, ws.with_file_name("ws.moved")).unwrap();
    fs::create_dir_all(&fx.session).unwrap();
    let r = recover(fx.layout.data_dir(), &[]).unwrap();
    assert!(!jpath.exists(), "{r:?}");
    assert_eq!(r.unaccounted.len(), 1, "{r:?}");
}

/// A release that crashed after it removed its empty quarantine but before
/// it retired its journal: every target is accounted for (released and
/// verified, or back at its path), so the journal is retired.
#[test]
fn a_gone_quarantine_with_every_target_accounted_for_is_retired() {
    let fx = Fixture::new();
    let h = fx.helper("h.txt", b"never moved");
    let (jpath, qpath) = crashed_after_rename_with(&fx, &h, true);
    // Put it back by hand and remove the (now empty) quarantine.
    fs::rename(&qpath, &h).unwrap();
    fs::remove_dir(qpath.parent().unwrap()).unwrap();
    let r = recover(fx.layout.data_dir(), &[]).unwrap();
    assert!(!jpath.exists(), "{r:?}");
    assert_eq!(r.untouched.len(), 1, "{r:?}");
    assert!(r.kept_journals.is_empty(), "{r:?}");
}

/// A recovery that holds `D/journal` (stuck on a hung filesystem, say)
/// bounds a release's wait for the lock: refused with a clear message
/// after the bound, never hung.
#[test]
fn a_release_waits_for_a_recovery_at_most_the_bound() {
    let fx = Fixture::new();
    let jdir = fx.layout.journal_dir();
    fs::create_dir_all(&jdir).unwrap();
    let held = JournalLock::exclusive(&jdir, Duration::from_secs(1)).unwrap().unwrap();
    let t = std::time::Instant::now();
    let e = JournalLock::shared_within(&jdir, Duration::from_millis(200)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    assert!(e.to_string().contains("recovery"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5));
    drop(held);
    JournalLock::shared_within(&jdir, Duration::from_millis(200)).unwrap();
}

/// A fifo where a journal should be (the agent's commands can write `D`)
/// is kept and reported, not opened: before, its `open` waited for a
/// writer for ever, and with it the guardian's start.
#[test]
fn a_fifo_in_the_journal_directory_is_kept_and_never_waited_on() {
    let fx = Fixture::new();
    let h = fx.helper("h.txt", b"journaled");
    let (jpath, _) = crashed_after_rename(&fx, &h);
    let fifo = jpath.with_file_name("0-fifo.jsonl");
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(0o600), 0)
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let data = fx.layout.data_dir().to_path_buf();
    std::thread::spawn(move || tx.send(recover(&data, &[])).unwrap());
    let r = rx.recv_timeout(Duration::from_secs(20)).expect("recovery waited on the fifo").unwrap();
    assert_eq!(r.kept_journals.len(), 1, "{r:?}");
    assert_eq!(r.kept_journals[0].journal, fifo, "{r:?}");
    assert!(r.kept_journals[0].error.contains("not a regular file"), "{r:?}");
    // The real journal beside it was recovered: the helper is back.
    assert!(!jpath.exists() && h.exists(), "{r:?}");
    fs::remove_file(&fifo).unwrap();
}

/// Makes every `getdents64(2)` of the calling thread (and of threads it
/// starts later) fail with `EIO`, by a seccomp filter on this thread alone:
/// a directory listing cut short by an I/O error.
///
/// # References
/// - [`seccomp(2)`](https://man7.org/linux/man-pages/man2/seccomp.2.html)
fn listings_fail_on_this_thread() {
    let stmt = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    // BPF_LD|BPF_W|BPF_ABS of `seccomp_data.nr`; BPF_JMP|BPF_JEQ|BPF_K;
    // BPF_RET|BPF_K of SECCOMP_RET_ERRNO|EIO, else SECCOMP_RET_ALLOW.
    let program = [
        stmt(0x20, 0, 0, 0),
        stmt(0x15, 0, 1, libc::SYS_getdents64 as u32),
        stmt(0x06, 0, 0, 0x0005_0000 | libc::EIO as u32),
        stmt(0x06, 0, 0, 0x7fff_0000),
    ];
    let fprog = libc::sock_fprog { len: program.len() as u16, filter: program.as_ptr().cast_mut() };
    // SAFETY: `PR_SET_NO_NEW_PRIVS` takes integers; `PR_SET_SECCOMP` with
    // `SECCOMP_MODE_FILTER` (2) reads the program through `fprog`, which
    // points at `program`, both alive for the call (the kernel copies it).
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(libc::prctl(libc::PR_SET_SECCOMP, 2, &fprog as *const libc::sock_fprog, 0, 0), 0);
    }
}

/// A listing of `D/journal` cut short by an I/O error fails the recovery:
/// it had passed over every journal as if there were none and answered a
/// clean run while a crashed release's helper sat in its quarantine.
#[test]
fn a_journal_directory_that_cannot_be_listed_fails_the_recovery() {
    let fx = Fixture::new();
    let h = fx.helper("a.sh", b"echo hi\n");
    let (jpath, quarantined) = crashed_after_rename_with(&fx, &h, true);
    let (data, ws) = (fx.layout.data_dir().to_path_buf(), fx.ws().to_path_buf());
    // On a thread of its own: the filter goes with it.
    let r = std::thread::spawn(move || {
        listings_fail_on_this_thread();
        recover(&data, &[ws]).map_err(|e| e.to_string())
    })
    .join()
    .unwrap();
    assert!(r.is_err(), "{r:?}");
    assert!(jpath.exists() && quarantined.exists());
    // Listable again: recovered.
    let rep = recover(fx.layout.data_dir(), &[fx.ws().to_path_buf()]).unwrap();
    assert_eq!(rep.restored.len(), 1, "{rep:?}");
    assert!(h.exists());
}
