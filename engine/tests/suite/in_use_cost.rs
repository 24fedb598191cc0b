//! The cost of the `in_use` check (`release::in_use::in_use`) with many
//! processes of the user: 300 extra processes, 100 targets. Ignored by
//! default (it measures); run with
//! `cargo test --release -p winx-release-engine --test suite in_use_cost -- --ignored --nocapture`.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::os::fd::AsFd;

use crate::common::spawn;
use winx_release_engine::release::in_use::{in_use, Held};
use winx_release_engine::PhysicalId;
use winx_release_kernel::procfs::{find_holder, find_holder_of};

struct Kids(Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `n` helper files in `dir` (`h000`, `h001`, ...), each opened read-only,
/// with their identities and names.
fn helpers(dir: &std::path::Path, n: usize) -> (Vec<std::fs::File>, Vec<PhysicalId>, Vec<String>) {
    let paths: Vec<String> = (0..n).map(|i| format!("h{i:03}")).collect();
    let opened: Vec<std::fs::File> = paths
        .iter()
        .map(|p| {
            std::fs::write(dir.join(p), b"helper").unwrap();
            std::fs::File::open(dir.join(p)).unwrap()
        })
        .collect();
    let ids = opened
        .iter()
        .map(|f| {
            let m = f.metadata().unwrap();
            PhysicalId { dev: m.dev(), ino: m.ino() }
        })
        .collect();
    (opened, ids, paths)
}

/// `n` extra processes of the user (`sleep 60`), each past its `exec`
/// (`spawn` returns once the child has exec'd: no wait needed).
fn sleepers(n: usize) -> Kids {
    Kids((0..n).map(|_| spawn(Command::new("sleep").arg("60").stdin(Stdio::null()).stdout(Stdio::null()))).collect())
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
    let (opened, ids, paths) = helpers(dir.path(), 100);
    let targets: HashSet<PhysicalId> = ids.iter().copied().collect();
    let files: Vec<_> = opened.iter().map(|f| f.as_fd()).collect();
    let held: Vec<Held<'_>> = (0..100).map(|i| Held { path: &paths[i], id: ids[i], file: files[i] }).collect();
    // As a release calls it (with its descriptors), or every view read.
    let in_use_detail = |given: &[std::os::fd::BorrowedFd<'_>], exempt: &[i32]| -> Option<String> {
        if given.is_empty() {
            find_holder(&targets, rustix::process::geteuid().as_raw(), exempt).unwrap().holder.map(|h| format!("{h:?}"))
        } else {
            in_use(&held, exempt)
        }
    };
    let mut kids = sleepers(300);
    let me = [std::process::id() as i32];
    let uid = rustix::process::geteuid().as_raw();
    let scan = find_holder(&targets, uid, &me).unwrap();
    let processes = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|s| s.parse::<u32>().is_ok()))
        .count();
    assert!(scan.inspected >= 300, "{scan:?}");
    // The kernel says no target is open elsewhere: memory maps are skipped.
    assert!(!find_holder_of(&targets, &files, uid, &me).unwrap().maps_read);
    // Both ways, interleaved: with the caller's descriptors (as a release
    // calls it), and every view read (no descriptors given).
    let mut fast = (Vec::new(), Vec::new());
    let mut full = (Vec::new(), Vec::new());
    for _ in 0..50 {
        for (given, into) in [(&files[..], &mut fast), (&[][..], &mut full)] {
            let (t, c) = (Instant::now(), thread_cpu());
            assert_eq!(in_use_detail(given, &me), None);
            into.0.push(t.elapsed());
            into.1.push(thread_cpu() - c);
        }
    }
    for (name, (times, cpu)) in [("in_use check", &mut fast), ("every view read", &mut full)] {
        times.sort();
        cpu.sort();
        println!(
            "{name}: {} processes in /proc, {} of this user inspected, 100 targets: \
             wall p50 {:?}, p90 {:?}, min {:?}; on-CPU of the calling worker p50 {:?}, min {:?}",
            processes,
            scan.inspected,
            times[times.len() / 2],
            times[times.len() * 9 / 10],
            times[0],
            cpu[cpu.len() / 2],
            cpu[0]
        );
    }
    // A holder among them is found.
    let held = dir.path().join("h050");
    let c = spawn(Command::new("sleep").arg("60").stdin(std::fs::File::open(&held).unwrap()));
    let pid = c.id();
    kids.0.push(c);
    let d = in_use_detail(&files, &me).expect("held");
    assert!(d.contains(&pid.to_string()), "{d}");
    // No assertion on time: on a machine shared with other builds, wall
    // time mostly measures waiting for a core. docs/DESIGN.md records the
    // figures.
}

/// The whole process's CPU time so far, exited threads included
/// (`/proc/self/stat`: `utime` + `stime`, in clock ticks of 10 ms).
fn process_cpu() -> Duration {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &s[s.rfind(')').unwrap() + 2..];
    let f: Vec<u64> = after.split_whitespace().skip(11).take(2).map(|x| x.parse().unwrap()).collect();
    Duration::from_millis((f[0] + f[1]) * 10)
}

#[test]
#[ignore = "measurement: run with --ignored --nocapture"]
fn in_use_checks_of_8_releases_at_once_with_300_processes() {
    // Eight releases of 10 targets each ask at once, 25 times, as eight
    // sessions' releases do in a guardian under load; 300 extra processes.
    let dir = tempfile::tempdir().unwrap();
    let (opened, ids, paths) = helpers(dir.path(), 80);
    let kids = sleepers(300);
    let me = [std::process::id() as i32];
    let (rounds, releases) = (25, 8);
    let (t, c) = (Instant::now(), process_cpu());
    std::thread::scope(|s| {
        for r in 0..releases {
            let (opened, ids, paths) = (&opened, &ids, &paths);
            s.spawn(move || {
                let held: Vec<Held<'_>> = (r * 10..r * 10 + 10)
                    .map(|i| Held { path: &paths[i], id: ids[i], file: opened[i].as_fd() })
                    .collect();
                for _ in 0..rounds {
                    assert_eq!(in_use(&held, &me), None);
                }
            });
        }
    });
    let (wall, cpu) = (t.elapsed(), process_cpu() - c);
    let n = (rounds * releases) as u32;
    println!(
        "{releases} releases at once, {rounds} checks each, 300 extra processes: {:?} wall and {:?} CPU per check \
         ({} checks in {wall:?})",
        wall / n,
        cpu / n,
        n
    );
    drop(kids);
}
