//! `--chaos`: the task that SIGKILLs the guardian during the mixed timed
//! phase and starts a new one, and the re-attachment check around each
//! kill (what the workers do about it is `workload::chaos`).
//!
//! Each cycle: a seeded random pause (uniform in 0.5–1.5 × `--chaos-every`);
//! in each probe session (threads of their own, outside the workers') a
//! command that cannot end before its gate opens is started in the
//! thread's shell; every other cycle the kill waits for a worker to send a
//! release and lands a random 0–1.2 × the typical release latency later
//! (mid-release: in the frontend's checks, the guardian's run, or its
//! answer); the guardian is
//! SIGKILLed, a new one started on the same data directory and socket (it
//! runs crash recovery before its ready line). Then each probe's command
//! must still be `running` in the new guardian's `status_check`, and once
//! its gate opens complete with exit 0 and its output: a re-attachment. A
//! shell that did not survive is a violation (`shell_not_reattached`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::config::Config;
use crate::harness::guardian::GuardianProc;
use crate::workload::chaos::rejoin;
use crate::workload::kills::{inc, Chaos};
use crate::workload::ops;
use crate::workload::rng::Rng;
use crate::workload::world::{TrackedSession, World};

/// Probe sessions: shells with a command running across every kill.
pub const PROBES: usize = 2;

/// How long a mid-release kill waits for a worker's release.
const RELEASE_WAIT: Duration = Duration::from_secs(2);

/// Kills and restarts `guardian` until `done` (see the module docs).
pub fn task(w: &World, cfg: &Config, guardian: &mut GuardianProc, probes: &[TrackedSession], done: &AtomicBool) {
    let Some(c) = &w.chaos else { return };
    let mut rng = Rng::new(cfg.seed() ^ 0x0063_6861_6f73);
    while !done.load(Ordering::SeqCst) && !w.stopping() {
        let pause = Duration::from_secs_f64(cfg.chaos_every * (0.5 + rng.below(1001) as f64 / 1000.0));
        if !idle(w, done, pause) {
            break;
        }
        if let Err(e) = cycle(w, c, &mut rng, guardian, probes) {
            w.fail(&e.context("chaos"));
            break;
        }
    }
}

/// Waits `pause` unless the phase ends first (false then).
fn idle(w: &World, done: &AtomicBool, pause: Duration) -> bool {
    let until = Instant::now() + pause;
    while Instant::now() < until {
        if done.load(Ordering::SeqCst) || w.stopping() {
            return false;
        }
        std::thread::sleep((until - Instant::now()).min(Duration::from_millis(50)));
    }
    true
}

/// A probe's command running across a kill.
struct Running {
    probe: usize,
    id: String,
    gate: std::path::PathBuf,
    tag: String,
}

fn cycle(
    w: &World,
    c: &Chaos,
    rng: &mut Rng,
    guardian: &mut GuardianProc,
    probes: &[TrackedSession],
) -> anyhow::Result<()> {
    let n = c.report().kills + 1;
    let mut running = Vec::new();
    for (i, p) in probes.iter().enumerate() {
        let gate = w.new_gate();
        let tag = format!("{}-{n}", p.idx);
        let cmd = format!("while [ ! -e '{}' ]; do sleep 0.02; done; echo done-{tag}", gate.display());
        let v = ops::bash(w, p, &cmd, 0.0, false)?;
        if v["status"] != "running" {
            w.open_gate(&gate);
            w.findings.mismatch("a gated command in a probe's shell", "status running", v);
            continue;
        }
        let id = v["command_id"].as_str().unwrap_or_default().to_owned();
        running.push(Running { probe: i, id, gate, tag });
    }

    {
        let _no_initialize = c.init.write().unwrap_or_else(|e| e.into_inner());
        if rng.chance(500) {
            c.arm();
            let sent = c.wait_release(RELEASE_WAIT);
            c.disarm();
            if sent {
                // Anywhere in the release: its checks in the frontend, the
                // guardian's scan, capture, verification and removal, or
                // its answer.
                let typical = c.typical_latency().as_millis() as u64;
                ops::nap(rng.below((typical * 6 / 5).clamp(20, 3000) + 1));
                inc(&c.counts.kills_mid_release);
            }
        }
        c.down();
        guardian.kill();
        inc(&c.counts.kills);
        *guardian = w.private.start_guardian(&[])?;
        c.up();
    }

    for p in probes {
        rejoin(w, p)?;
    }
    for r in running {
        let p = &probes[r.probe];
        let args = json!({"thread_id": p.thread_id, "status_check": true, "command_id": r.id, "wait_for_seconds": 0});
        let after = ops::call_ok(w, p.home, "BashCommand", args)?.value;
        w.open_gate(&r.gate);
        let end = ops::wait_command(w, p, &r.id);
        let want = format!("done-{}", r.tag);
        match end {
            Ok(v) if after["status"] == "running" && v["exit_code"] == json!(0) && output_has(&v, &want) => {
                inc(&c.counts.reattached);
            }
            end => w.findings.violation(
                "shell_not_reattached",
                &p.dir,
                format!(
                    "command {} of thread {} across a guardian kill: after the restart {after}; at its end {}",
                    r.id,
                    p.thread_id,
                    end.map_or_else(|e| format!("{e:#}"), |v| v.to_string())
                ),
            ),
        }
    }
    Ok(())
}

fn output_has(v: &Value, want: &str) -> bool {
    v["output"].as_str().is_some_and(|o| o.lines().any(|l| l.trim() == want))
}
