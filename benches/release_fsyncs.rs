//! Group `release_fsyncs` (issue 57): the four syncs of one warm release,
//! each timed alone on the same disk, against the baseline in the same
//! group, so that the per-fsync costs of benches/mcp_fsyncs.py's table
//! become ratios:
//!
//! - baseline: a plain 4 KiB write and `fdatasync` of a fresh file (created
//!   untimed) in the receipt shard's directory;
//! - journal: `Journal::begin` over a kept, zeroed journal (the engine's
//!   own code, `engine/src/journal`: the intent written over the zeros of
//!   a block the file has, and its `fdatasync`), the journal retired in
//!   place afterwards, untimed, as a release that succeeds retires it;
//! - session directory: the `fsync` of the session directory after a
//!   release's changes to it, reproduced (untimed): a helper created in
//!   it, a quarantine directory made beside it, the helper renamed into it
//!   and unlinked, the quarantine removed; then `fsync(2)` of the session
//!   directory's descriptor, timed (as `engine/src/release/finish.rs`
//!   does, through its own descriptor);
//! - receipt: the receipt's `fdatasync`, reproduced: the steps of
//!   `kernel::sys::write_durable` (a temporary file in the shard, a 2 KiB
//!   receipt written, untimed), its `fdatasync` timed, then the rename,
//!   untimed;
//! - receipt shard directory: the same steps untimed up to the rename,
//!   then `kernel::sys::fsync_dir` of the shard (the kernel's own code:
//!   open and `fsync`), timed;
//! - and the receipt as `write_durable` does it, whole (the kernel's own
//!   code: both syncs, the create, write and rename).
//!
//! The directories are laid out as a guardian's: `D/journal`,
//! `D/receipts/<shard>`, and the session directory under the workspace,
//! all in `$WINX_BENCH_DIR` (else the system temporary directory), on one
//! filesystem. A smoke run (`cargo test --all-targets`) runs each once.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use winx_release_engine::journal::{keep_idle_journals, Journal, JournalIntent, JournalLock, JournalTarget};
use winx_release_engine::{Identity, Pin};
use winx_release_kernel::sys::{fsync_dir, random_hex, write_durable};

mod common;

/// A receipt's size (a pretty-printed receipt of one target is about
/// 1.5–2 KiB): one block.
const RECEIPT_LEN: usize = 2048;

fn private_dir(p: &Path) {
    fs::DirBuilder::new().recursive(true).mode(0o700).create(p).unwrap();
}

/// A fresh temporary file in `dir` holding `bytes`, not synced.
fn temp_with(dir: &Path, bytes: &[u8]) -> (File, PathBuf) {
    let p = dir.join(format!(".r.tmp-{}", random_hex(6)));
    let mut f = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&p).unwrap();
    f.write_all(bytes).unwrap();
    (f, p)
}

fn release_fsyncs(c: &mut Criterion) {
    let root = tempfile::Builder::new().prefix("fsyncs-").tempdir_in(common::cache_dir()).unwrap();
    let data = root.path().join("data/winx");
    let journal_dir = data.join("journal");
    let shard = data.join("receipts/ab");
    let session = root.path().join("ws/.winx/sessions/bench");
    for d in [&journal_dir, &shard, &session] {
        private_dir(d);
    }
    let session_fd = File::open(&session).unwrap();
    let receipt = vec![b'r'; RECEIPT_LEN];
    let block = vec![b'b'; 4096];

    // The journal: one intent of one target, into a kept file (the first
    // release creates it; a guardian keeps retired journals).
    keep_idle_journals(1);
    let pinned = session.join("pinned.py");
    fs::write(&pinned, b"print(1)\n").unwrap();
    let f = File::open(&pinned).unwrap();
    let id = Identity::of_fd(&f).unwrap();
    let intent = JournalIntent {
        version: 1,
        id: "bench".to_owned(),
        workspace: root.path().join("ws"),
        session_dir: session.clone(),
        quarantine_dir: session.join(".q-0123456789ab"),
        quarantine_identity: None,
        targets: vec![JournalTarget {
            file_path: pinned.clone(),
            quarantine_name: "0".to_owned(),
            pin: Pin::new(&id, [7; 32]),
        }],
    };
    let begin = || Journal::begin(JournalLock::shared(&journal_dir).unwrap(), &journal_dir, &intent).unwrap();
    begin().retire_after_quarantine().unwrap();

    let mut n = 0usize;
    let mut g = c.benchmark_group("release_fsyncs");
    g.sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5));
    g.bench_function("baseline: 4 KiB write + fdatasync of a fresh file", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let p = shard.join(format!("plain-{}", random_hex(6)));
                let mut f = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&p).unwrap();
                let t = Instant::now();
                f.write_all(&block).unwrap();
                f.sync_data().unwrap();
                total += t.elapsed();
                drop(f);
                fs::remove_file(&p).unwrap();
            }
            total
        })
    });
    g.bench_function("journal fdatasync (kept journal, Journal::begin)", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let lock = JournalLock::shared(&journal_dir).unwrap();
                let t = Instant::now();
                let j = Journal::begin(lock, &journal_dir, &intent).unwrap();
                total += t.elapsed();
                j.retire_after_quarantine().unwrap();
            }
            total
        })
    });
    g.bench_function("session directory fsync", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                n += 1;
                let helper = session.join(format!("h{n}.py"));
                fs::write(&helper, &block).unwrap();
                let q = session.join(format!(".q-{}", random_hex(6)));
                private_dir(&q);
                fs::rename(&helper, q.join("0")).unwrap();
                fs::remove_file(q.join("0")).unwrap();
                fs::remove_dir(&q).unwrap();
                let t = Instant::now();
                rustix::fs::fsync(session_fd.as_fd()).unwrap();
                total += t.elapsed();
            }
            total
        })
    });
    g.bench_function("receipt fdatasync", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let (f, tmp) = temp_with(&shard, &receipt);
                let t = Instant::now();
                f.sync_data().unwrap();
                total += t.elapsed();
                drop(f);
                fs::rename(&tmp, shard.join(random_hex(16))).unwrap();
            }
            total
        })
    });
    g.bench_function("receipt shard directory fsync", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let (f, tmp) = temp_with(&shard, &receipt);
                f.sync_data().unwrap();
                drop(f);
                fs::rename(&tmp, shard.join(random_hex(16))).unwrap();
                let t = Instant::now();
                fsync_dir(&shard).unwrap();
                total += t.elapsed();
            }
            total
        })
    });
    g.bench_function("receipt whole (write_durable: both syncs)", |b| {
        b.iter(|| write_durable(&shard.join(random_hex(16)), &receipt).unwrap())
    });
    g.finish();
    winx_release_engine::journal::drop_idle_journals();
}

criterion_group!(benches, release_fsyncs);
criterion_main!(benches);
