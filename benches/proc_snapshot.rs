//! One process-table snapshot, as each look of a liveness answer takes it
//! (`procfs::snapshot`: every process's owner and `stat`, the kernel
//! threads an earlier snapshot found passed over), against the baseline of
//! the same group: what `ps -e` reads, the `stat` of every process listed
//! in `/proc`, with `std::fs`. With 100 extra processes of the user on the
//! machine (a smoke run, `cargo test --all-targets`: 5).

use criterion::{criterion_group, criterion_main, Criterion};
use winx_release_kernel::procfs::snapshot;

mod common;

/// The `stat` of every process `/proc` lists; how many were read.
fn every_stat() -> usize {
    let mut n = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().filter(|s| s.bytes().all(|b| b.is_ascii_digit())) else { continue };
        if std::fs::read(format!("/proc/{pid}/stat")).is_ok() {
            n += 1;
        }
    }
    n
}

fn proc_snapshot(c: &mut Criterion) {
    let extra = if common::smoke() { 5 } else { 100 };
    let _kids = common::Sleepers::start(extra);
    // The first snapshot finds the kernel threads.
    let first = snapshot().unwrap();
    let later = snapshot().unwrap();
    eprintln!(
        "processes listed {}, read by a later snapshot {}, kernel threads passed over {}",
        every_stat(),
        later.entries.len(),
        later.kernel_threads_passed
    );
    assert!(first.entries.len() >= extra);
    let mut g = c.benchmark_group("process-table snapshot");
    g.bench_function("every process's stat (ps -e, baseline)", |b| b.iter(every_stat));
    g.bench_function("procfs::snapshot", |b| b.iter(|| snapshot().unwrap().entries.len()));
    g.finish();
}

criterion_group!(benches, proc_snapshot);
criterion_main!(benches);
