//! The cost of the `in_use` check (`liveness::in_use_detail`) with many
//! processes of the user: 300 extra processes, 100 targets. Ignored by
//! default (it measures); run with
//! `cargo test --release -p winx-release-engine --test in_use_cost -- --ignored --nocapture`.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use winx_release_engine::liveness::{find_holder, in_use_detail};
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

/// This thread's CPU time so far (`/proc/thread-self/schedstat`, first field, ns).
fn thread_cpu() -> Duration {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    Duration::from_nanos(s.split_whitespace().next().unwrap().parse().unwrap())
}

#[test]
#[ignore = "measurement: run with --ignored --nocapture"]
fn in_use_check_with_300_processes_and_100_targets() {
    let dir = tempfile::tempdir().unwrap();
    let mut targets = HashSet::new();
    for i in 0..100 {
        let p = dir.path().join(format!("h{i:03}"));
        std::fs::write(&p, b"helper").unwrap();
        let m = std::fs::metadata(&p).unwrap();
        targets.insert(PhysicalId { dev: m.dev(), ino: m.ino() });
    }
    let mut kids = Kids(Vec::new());
    for _ in 0..300 {
        let c = Command::new("sleep").arg("60").stdin(Stdio::null()).stdout(Stdio::null()).spawn().unwrap();
        kids.0.push(c);
    }
    std::thread::sleep(Duration::from_millis(300));
    let me = [std::process::id() as i32];
    let uid = rustix::process::geteuid().as_raw();
    let scan = find_holder(&targets, uid, &me).unwrap();
    let processes = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|s| s.parse::<u32>().is_ok()))
        .count();
    assert!(scan.inspected >= 300, "{scan:?}");
    let mut times = Vec::new();
    let mut cpu = Vec::new();
    for _ in 0..50 {
        let (t, c) = (Instant::now(), thread_cpu());
        assert_eq!(in_use_detail(&targets, &me), None);
        times.push(t.elapsed());
        cpu.push(thread_cpu() - c);
    }
    times.sort();
    cpu.sort();
    let p50 = times[times.len() / 2];
    let p90 = times[times.len() * 9 / 10];
    let cpu50 = cpu[cpu.len() / 2];
    println!(
        "in_use check: {} processes in /proc, {} of this user inspected, 100 targets: \
         wall p50 {:?}, p90 {:?}, min {:?}; on-CPU of the calling worker p50 {:?}, min {:?}",
        processes, scan.inspected, p50, p90, times[0], cpu50, cpu[0]
    );
    // A holder among them is found.
    let held = dir.path().join("h050");
    let c = Command::new("sleep").arg("60").stdin(std::fs::File::open(&held).unwrap()).spawn().unwrap();
    let pid = c.id();
    kids.0.push(c);
    let d = in_use_detail(&targets, &me).expect("held");
    assert!(d.contains(&pid.to_string()), "{d}");
    // No assertion on time: on a machine shared with other builds, wall
    // time mostly measures waiting for a core. docs/DESIGN.md records the
    // figures.
    let _ = cpu50;
}
