//! How the `in_use` check of one release (one target, none held) grows
//! with the machine's processes (issue 57): 300, 1,000 and 3,000 extra
//! idle processes of the user (`sleep`, three descriptors each), wall time
//! and CPU time (the whole process's, the sweep's worker threads included)
//! per check. CPU does not depend on what else the machine runs, so the
//! CPU per extra process is the figure to compare across days. Ignored by
//! default (it measures); run with
//! `cargo test --release -p winx-release-engine --test suite in_use_processes:: -- --ignored --nocapture --test-threads=1`
//! (alone: the CPU figure is the whole test process's).

use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use winx_release_engine::release::in_use::{in_use, Held};
use winx_release_engine::PhysicalId;

struct Kids(Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The whole process's CPU time so far, exited threads included
/// (`/proc/self/stat`: `utime` + `stime`, in clock ticks of 10 ms; 15
/// checks of tens of milliseconds each make the tick fine enough).
fn process_cpu() -> Duration {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &s[s.rfind(')').unwrap() + 2..];
    let f: Vec<u64> = after.split_whitespace().skip(11).take(2).map(|x| x.parse().unwrap()).collect();
    Duration::from_millis((f[0] + f[1]) * 10)
}

#[test]
#[ignore = "measurement: run with --ignored --nocapture"]
fn in_use_check_with_300_1000_and_3000_idle_processes() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("h");
    std::fs::write(&p, b"helper").unwrap();
    let file = std::fs::File::open(&p).unwrap();
    let m = file.metadata().unwrap();
    let held = [Held { path: "h", id: PhysicalId { dev: m.dev(), ino: m.ino() }, file: file.as_fd() }];
    let me = [std::process::id() as i32];
    let mut kids = Kids(Vec::new());
    let mut rows = Vec::new();
    for n in [300usize, 1_000, 3_000] {
        while kids.0.len() < n {
            let mut c = Command::new("sleep");
            c.arg("120").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
            kids.0.push(crate::common::spawn(&mut c));
        }
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(in_use(&held, &me), None);
        let rounds = 15;
        let mut walls = Vec::new();
        let cpu0 = process_cpu();
        for _ in 0..rounds {
            let t = Instant::now();
            assert_eq!(in_use(&held, &me), None);
            walls.push(t.elapsed());
        }
        let cpu = (process_cpu() - cpu0) / rounds;
        walls.sort();
        let load = std::fs::read_to_string("/proc/loadavg").unwrap();
        let procs = std::fs::read_dir("/proc").unwrap().filter(|e| {
            e.as_ref().is_ok_and(|e| e.file_name().to_str().is_some_and(|s| s.bytes().all(|b| b.is_ascii_digit())))
        });
        println!(
            "{n} extra processes ({} on the machine): wall p50 {:.2} ms (min {:.2}), CPU {:.2} ms per check; load {}",
            procs.count(),
            walls[rounds as usize / 2].as_secs_f64() * 1e3,
            walls[0].as_secs_f64() * 1e3,
            cpu.as_secs_f64() * 1e3,
            load.split_whitespace().next().unwrap_or("?")
        );
        rows.push((n, walls[rounds as usize / 2], cpu));
    }
    let (first, last) = (rows[0], rows[2]);
    let per = (last.2.as_secs_f64() - first.2.as_secs_f64()) / (last.0 - first.0) as f64;
    println!(
        "3,000 / 300: wall {:.2}, CPU {:.2}; CPU per extra process {:.1} us",
        last.1.as_secs_f64() / first.1.as_secs_f64(),
        last.2.as_secs_f64() / first.2.as_secs_f64(),
        per * 1e6
    );
}
