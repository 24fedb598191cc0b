//! A run of the stress tool from start to end: the processes, the setup
//! phase, the timed phase (or the release mix's rounds), the final
//! verification, the teardown, and the report.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::ProgressBar;

use crate::config::{Config, Mix, CALL_TIMEOUT};
use crate::harness::guardian::GuardianProc;
use crate::harness::private::Private;
use crate::phases::chaos;
use crate::phases::cpu::{self, CpuReport};
use crate::phases::liveness;
use crate::phases::release_mix;
use crate::phases::report::Report;
use crate::phases::setup;
use crate::phases::timed;
use crate::progress::{bar, Progress};
use crate::workload::backing::Backing;
use crate::workload::kills::Chaos;
use crate::workload::opening;
use crate::workload::ops;
use crate::workload::rng::Rng;
use crate::workload::world::{Stats, TrackedSession, Workspace, World};

/// Runs the stress workload and returns its report. An error means the run
/// could not be carried out (a frontend died, the private directory could
/// not be made); invariant violations are in the report.
pub fn run(cfg: &Config) -> anyhow::Result<Report> {
    anyhow::ensure!(
        cfg.sessions >= 1 && cfg.frontends >= 1 && cfg.workspaces >= 1,
        "sessions, frontends and workspaces must be at least 1"
    );
    anyhow::ensure!(!cfg.chaos || cfg.mix == Mix::Mixed, "--chaos runs with the mixed workload (--mix mixed)");
    let started = Instant::now();
    let pb = bar(cfg.progress, Progress::Spinner);
    pb.set_message("starting the guardian and the frontends");
    let private = Private::create(cfg.dir.as_deref())?;
    let mut guardian = private.start_guardian(&[])?;
    let caps = guardian.capabilities();
    let mut frontends = Vec::with_capacity(cfg.frontends + 2);
    for i in 0..cfg.frontends {
        frontends.push(private.spawn_frontend(&format!("mcp-{i}"), &[], CALL_TIMEOUT)?);
    }
    frontends.push(private.spawn_frontend("mcp-embedded", &["--embedded"], CALL_TIMEOUT)?);
    frontends.push(private.spawn_frontend("mcp-fresh", &[], CALL_TIMEOUT)?);
    let mut workspaces = Vec::with_capacity(cfg.workspaces);
    for i in 0..cfg.workspaces {
        let p = private.dirs.ws.join(format!("ws{i}"));
        std::fs::create_dir_all(&p)?;
        let root = std::fs::canonicalize(&p)?.to_str().context("workspace path is not UTF-8")?.to_owned();
        workspaces.push(Workspace { root, book: Default::default(), sources: Default::default() });
    }
    let mut w = World::new(private, frontends, cfg.frontends, workspaces);
    w.chaos = cfg.chaos.then(Chaos::default);
    w.check(
        "guardian ready line advertises temporary_release",
        caps.iter().any(|c| c == "temporary_release"),
        caps.join(","),
    );
    let sig = [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM]
        .iter()
        .filter_map(|s| signal_hook::flag::register(*s, w.stop.clone()).ok())
        .collect::<Vec<_>>();

    let result = run_in(&w, cfg, &pb, started, &mut guardian);
    for id in sig {
        signal_hook::low_level::unregister(id);
    }
    w.open_all_gates();
    pb.finish_and_clear();

    // Teardown: frontends, then the guardian (SIGTERM must end it cleanly).
    for f in &w.frontends {
        f.shutdown(Duration::from_secs(3));
    }
    let peak_rss = cpu::peak_rss_kib(guardian.pid());
    let code = guardian.stop(Duration::from_secs(10));
    let leftovers = w.private.end_leftovers();
    let (mut report, fatal) = match result {
        Ok(r) => (r, None),
        Err(e) => (Report::build(&w, cfg, 0.0, 0.0, 0), Some(format!("{e:#}"))),
    };
    report.error = fatal.or_else(|| w.fatal.lock().unwrap_or_else(|e| e.into_inner()).clone());
    report.interrupted = report.error.is_none() && w.stopping();
    report.guardian_peak_rss_kib = peak_rss;
    if code != Some(0) {
        w.findings.note("guardian_exit_not_0");
        report.notes.insert("guardian_exit_not_0".to_owned(), 1);
    }
    if leftovers > 0 {
        report.notes.insert("leftover_processes_ended".to_owned(), leftovers as u64);
    }
    if cfg.keep || report.error.is_some() {
        report.private_dir = Some(w.private.dirs.keep().display().to_string());
    } else {
        w.private.dirs.remove();
    }
    Ok(report)
}

fn run_in(
    w: &World,
    cfg: &Config,
    pb: &ProgressBar,
    started: Instant,
    guardian: &mut GuardianProc,
) -> anyhow::Result<Report> {
    let f = cfg.frontends;
    let mut sessions = Vec::with_capacity(cfg.sessions);
    let mut master = Rng::new(cfg.seed());
    for i in 0..cfg.sessions {
        let thread = format!("stress-{}-{i}", cfg.seed());
        let (s, v) = opening::open_session(w, i, i % cfg.workspaces, &thread, i % f, (i + 1) % f, None, master.fork())?;
        if i == 0 {
            setup::check_initialize(w, &v);
        }
        sessions.push(s);
    }
    let dirs: Vec<(usize, PathBuf)> = sessions.iter().map(|s| (s.ws, s.dir.clone())).collect();
    for s in &mut sessions {
        s.peer = dirs.iter().find(|(ws, d)| *ws == s.ws && *d != s.dir).map(|(_, d)| d.clone());
    }
    let scratch = w.workspaces.iter().map(Workspace::scratch).collect();
    let mut backing = Backing::new(&w.private.dirs.data, scratch);
    w.phase("start processes, open sessions");
    let target = cfg.backing_entries.min(opening::SCAN_BOUND - 100);
    if cfg.mix == Mix::Release {
        pb.set_message(format!("backing roots: {target} entries"));
        backing.set_total(target)?;
        w.phase("fill backing roots");
        let setup_s = started.elapsed().as_secs_f64();
        pb.finish_and_clear();
        let (sessions, run_s, cpu) = release_mix::run(w, cfg, pb, guardian.pid(), sessions, &mut backing, target);
        w.phase("timed release rounds");
        return finish(w, cfg, sessions, Vec::new(), backing, setup_s, run_s, cpu);
    }
    let mut extras: Vec<TrackedSession> = Vec::new();
    setup::run(w, &mut sessions, &mut extras, &mut backing, cfg, pb)?;
    // Processes left behind while the guardian is SIGKILLed and restarted.
    pb.set_message("left-behind processes across a guardian restart");
    liveness::left_behind_across_restart(w, &mut sessions, guardian)?;
    w.phase("left behind across a guardian restart");
    // Threads of their own whose shells run a command across each kill.
    let mut probes = Vec::new();
    if cfg.chaos {
        for k in 0..chaos::PROBES {
            let thread = format!("chaos-{}-{k}", cfg.seed());
            let fe = k % f;
            probes.push(
                opening::open_session(w, cfg.sessions + k, k % cfg.workspaces, &thread, fe, fe, None, master.fork())?.0,
            );
        }
    }
    let setup_s = started.elapsed().as_secs_f64();

    // The timed phase.
    pb.finish_and_clear();
    let rb = bar(cfg.progress, Progress::Timed(cfg.timed_phase()));
    w.stats.in_run.store(true, Ordering::SeqCst);
    let cpu_start = cpu::Sample::take(guardian.pid(), &w.frontend_pids());
    let start = Instant::now();
    let deadline = start + cfg.timed_phase();
    let done = AtomicBool::new(false);
    let sessions: Vec<TrackedSession> = std::thread::scope(|sc| {
        let keeper = sc.spawn(|| timed::keeper(w, &mut backing, target, &done));
        let ticker = sc.spawn(|| timed::ticker(w, &rb, start, &done));
        let chaos = sc.spawn(|| chaos::task(w, cfg, guardian, &probes, &done));
        let handles: Vec<_> = sessions.into_iter().map(|s| sc.spawn(move || timed::worker(w, s, deadline))).collect();
        let out: Vec<TrackedSession> = handles.into_iter().filter_map(|h| h.join().ok()).collect();
        done.store(true, Ordering::SeqCst);
        let _ = keeper.join();
        let _ = ticker.join();
        let _ = chaos.join();
        out
    });
    let run_s = start.elapsed().as_secs_f64();
    let cpu_end = cpu::Sample::take(guardian.pid(), &w.frontend_pids());
    w.stats.in_run.store(false, Ordering::SeqCst);
    rb.finish_and_clear();
    w.phase("timed");
    let cpu = cpu::report(&cpu_start, &cpu_end, run_s, Stats::get(&w.stats.run_releases));
    finish(w, cfg, sessions, extras, backing, setup_s, run_s, cpu)
}

/// The final verification after the timed phase (every byte re-hashed,
/// every fill file there, an audit per workspace) and the report.
#[allow(clippy::too_many_arguments)]
fn finish(
    w: &World,
    cfg: &Config,
    sessions: Vec<TrackedSession>,
    mut extras: Vec<TrackedSession>,
    mut backing: Backing,
    setup_s: f64,
    run_s: f64,
    cpu: CpuReport,
) -> anyhow::Result<Report> {
    anyhow::ensure!(sessions.len() == cfg.sessions, "a worker panicked");
    if let Some(e) = w.fatal.lock().unwrap_or_else(|e| e.into_inner()).clone() {
        anyhow::bail!("{e}");
    }

    // Final verification: every byte re-hashed, every fill file there.
    let vb = bar(cfg.progress, Progress::Spinner);
    vb.set_message("final verification");
    w.open_all_gates();
    let mut sessions = sessions;
    for s in sessions.iter_mut().chain(extras.iter_mut()) {
        setup::full_verify(w, &mut s.ledger, "final verification");
    }
    for ws in &w.workspaces {
        setup::full_verify(w, &mut ws.sources.lock().unwrap_or_else(|e| e.into_inner()), "final verification");
    }
    for m in backing.missing() {
        w.findings.lost(&m, 0, "a fill file of a backing root disappeared".to_owned());
    }
    for ws in 0..w.workspaces.len() {
        ops::audit(w, ws, "audit")?;
    }
    for s in sessions.iter().chain(extras.iter()) {
        strays(w, s);
    }
    vb.finish_and_clear();
    w.phase("final verification");
    let mut report = Report::build(w, cfg, setup_s, run_s, backing.removed);
    report.cpu = cpu;
    if !cfg.keep {
        backing.remove_all();
    }
    Ok(report)
}

/// Notes what is in a session directory that the ledger does not know:
/// files (`stray_file`) and entries in `.winx-release-*` quarantines
/// (`quarantine_leftover`). Neither is a violation by itself: a preserved
/// object is in the ledger at its quarantine path.
fn strays(w: &World, s: &TrackedSession) {
    fn walk(w: &World, s: &TrackedSession, dir: &std::path::Path, reserved: bool) {
        let Ok(rd) = std::fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let p = e.path();
            let r = reserved || e.file_name().to_string_lossy().starts_with(".winx-release-");
            match e.file_type() {
                Ok(t) if t.is_dir() => walk(w, s, &p, r),
                Ok(_) if s.ledger.is_present(&p) => {}
                Ok(_) if r => w.findings.note("quarantine_leftover"),
                Ok(_) => w.findings.note("stray_file"),
                Err(_) => {}
            }
        }
    }
    walk(w, s, &s.dir, false);
}
