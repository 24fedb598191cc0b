//! Where the machine's CPU went during the timed phase: the guardian, the
//! frontends, this tool (the workload driver and its checks), and the rest
//! of the machine (the commands the workload runs, `winx-release audit`
//! runs, and anything else on the machine).
//!
//! A run on a machine whose cores are all busy is bound by CPU, not by
//! waiting: its releases per second are then the cores divided by the CPU
//! one release costs *everything* (its share of the writes, reads and
//! commands around it included). This split says how much of that the
//! release engine (guardian and frontends) is, so a throughput figure can
//! be read against it.
//!
//! Each process is sampled at the start and at the end of the timed phase
//! (`utime + stime` of `/proc/<pid>/stat`, its own threads, not its reaped
//! children); a frontend restarted in between is counted from its new
//! start only (its predecessor's time falls into `other_s`). The machine's
//! busy time is `/proc/stat`'s first line less `idle` and `iowait`.
//!
//! # References
//! - [`proc_pid_stat(5)`](https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html)
//! - [`proc_stat(5)`](https://man7.org/linux/man-pages/man5/proc_stat.5.html)

use serde::Serialize;

/// CPU ticks of one process (`utime + stime`), or `None` when it is gone.
fn ticks_of(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_pid_stat(&stat)
}

/// `utime + stime` from a `/proc/<pid>/stat` line (fields 14 and 15; the
/// command name in parentheses may hold spaces and parentheses).
fn parse_pid_stat(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    // After ")": state is field 3, so utime (14) is the 12th from here.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The peak resident set of process `pid` in KiB (`VmHWM` of
/// `/proc/<pid>/status`), or `None` when it is gone.
///
/// # References
/// - [`proc_pid_status(5)`](https://man7.org/linux/man-pages/man5/proc_pid_status.5.html)
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    parse_vm_hwm(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

fn parse_vm_hwm(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line["VmHWM:".len()..].trim().strip_suffix("kB")?.trim().parse().ok()
}

/// Busy ticks of the whole machine: `/proc/stat`'s `cpu` line less `idle`
/// and `iowait` (guest time is already inside `user`).
fn machine_busy() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_machine_busy(stat.lines().next()?)
}

fn parse_machine_busy(line: &str) -> Option<u64> {
    let mut f = line.split_ascii_whitespace();
    if f.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = f.take(8).map(|x| x.parse().ok()).collect::<Option<_>>()?;
    let [user, nice, system, _idle, _iowait, irq, softirq, steal] = v.try_into().ok()?;
    Some(user + nice + system + irq + softirq + steal)
}

/// One sample of the run's processes.
#[derive(Clone, Debug)]
pub struct Sample {
    guardian: Option<(u32, u64)>,
    frontends: Vec<(u32, u64)>,
    driver: Option<u64>,
    machine: Option<u64>,
}

impl Sample {
    /// Samples the guardian `guardian`, the frontends `frontends` and this
    /// process now.
    pub fn take(guardian: u32, frontends: &[u32]) -> Sample {
        Sample {
            guardian: ticks_of(guardian).map(|t| (guardian, t)),
            frontends: frontends.iter().filter_map(|&p| ticks_of(p).map(|t| (p, t))).collect(),
            driver: ticks_of(std::process::id()),
            machine: machine_busy(),
        }
    }
}

/// CPU seconds of the timed phase, by process.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CpuReport {
    /// The guardian (release engine, executions, retention).
    pub guardian_s: f64,
    /// The MCP frontends together.
    pub frontends_s: f64,
    /// This tool: the workload driver, its ledger and its checks.
    pub driver_s: f64,
    /// Busy time of the whole machine.
    pub machine_s: f64,
    /// The machine less the three above: the workload's commands, audits,
    /// and whatever else ran on the machine.
    pub other_s: f64,
    /// Cores available to this process.
    pub cores: usize,
    /// `machine_s` over `cores` × the phase's seconds: near 1, the run was
    /// bound by CPU.
    pub busy_share: f64,
    /// Guardian plus frontends per release request of the phase, in ms.
    pub engine_ms_per_release: f64,
    /// The guardian alone per release request of the phase, in ms.
    pub guardian_ms_per_release: f64,
    /// The frontends together per release request of the phase, in ms.
    pub frontends_ms_per_release: f64,
    /// This tool per release request of the phase, in ms.
    pub driver_ms_per_release: f64,
    /// The whole machine per release request of the phase, in ms.
    pub machine_ms_per_release: f64,
}

fn secs(ticks: u64) -> f64 {
    let hz = rustix::param::clock_ticks_per_second().max(1);
    (ticks as f64 / hz as f64 * 100.0).round() / 100.0
}

/// CPU ticks spent between two samples, by process; the ticks of several
/// intervals add up (the release-only mix times only its release rounds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ticks {
    guardian: u64,
    frontends: u64,
    driver: u64,
    machine: u64,
}

impl Ticks {
    /// The ticks spent between `start` and `end`.
    pub fn between(start: &Sample, end: &Sample) -> Ticks {
        let delta = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => 0,
        };
        let guardian = match (start.guardian, end.guardian) {
            (Some((p, a)), Some((q, b))) if p == q => b.saturating_sub(a),
            (_, Some((_, b))) => b,
            _ => 0,
        };
        let frontends: u64 = end
            .frontends
            .iter()
            .map(|&(p, b)| start.frontends.iter().find(|s| s.0 == p).map_or(b, |s| b.saturating_sub(s.1)))
            .sum();
        Ticks {
            guardian,
            frontends,
            driver: delta(start.driver, end.driver),
            machine: delta(start.machine, end.machine),
        }
    }

    /// Adds the ticks of another interval.
    pub fn add(&mut self, other: Ticks) {
        self.guardian += other.guardian;
        self.frontends += other.frontends;
        self.driver += other.driver;
        self.machine += other.machine;
    }

    /// The split of these ticks, spent over `run_s` seconds in which
    /// `releases` release requests were made.
    pub fn report(&self, run_s: f64, releases: u64) -> CpuReport {
        let Ticks { guardian, frontends, driver, machine } = *self;
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let per =
            |t: u64| if releases == 0 { 0.0 } else { (secs(t) * 1000.0 / releases as f64 * 100.0).round() / 100.0 };
        CpuReport {
            guardian_s: secs(guardian),
            frontends_s: secs(frontends),
            driver_s: secs(driver),
            machine_s: secs(machine),
            other_s: secs(machine.saturating_sub(guardian + frontends + driver)),
            cores,
            busy_share: if run_s > 0.0 {
                (secs(machine) / (cores as f64 * run_s) * 100.0).round() / 100.0
            } else {
                0.0
            },
            engine_ms_per_release: per(guardian + frontends),
            guardian_ms_per_release: per(guardian),
            frontends_ms_per_release: per(frontends),
            driver_ms_per_release: per(driver),
            machine_ms_per_release: per(machine),
        }
    }
}

/// The split between `start` and `end`, over `run_s` seconds in which
/// `releases` release requests were made.
pub fn report(start: &Sample, end: &Sample, run_s: f64, releases: u64) -> CpuReport {
    Ticks::between(start, end).report(run_s, releases)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_stat_line_with_spaces_and_parentheses_in_the_name_parses() {
        let line = "4242 (a b) c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 137 42 5 6 20 0 1 0 99 0 0";
        assert_eq!(parse_pid_stat(line), Some(137 + 42));
        assert_eq!(parse_pid_stat("garbage"), None);
    }

    #[test]
    fn the_peak_resident_set_is_read_from_vm_hwm() {
        let status = "Name:\tx\nVmPeak:\t  900 kB\nVmHWM:\t   4242 kB\nVmRSS:\t  4000 kB\n";
        assert_eq!(parse_vm_hwm(status), Some(4242));
        assert_eq!(parse_vm_hwm("Name:\tx\n"), None);
        assert!(peak_rss_kib(std::process::id()).is_some_and(|k| k > 0));
    }

    #[test]
    fn machine_busy_leaves_out_idle_and_iowait() {
        let line = "cpu  100 2 30 5000 70 4 5 6 0 0";
        assert_eq!(parse_machine_busy(line), Some(100 + 2 + 30 + 4 + 5 + 6));
        assert_eq!(parse_machine_busy("cpu0 1 2 3 4 5 6 7 8"), None);
    }

    #[test]
    fn this_process_is_sampled_and_its_time_grows() {
        let a = Sample::take(std::process::id(), &[]);
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < std::time::Duration::from_millis(150) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let b = Sample::take(std::process::id(), &[]);
        let r = report(&a, &b, 0.15, 1);
        assert!(r.driver_s > 0.0 && r.guardian_s > 0.0, "{r:?}");
        assert!(r.machine_s >= r.driver_s * 0.5, "{r:?}");
    }

    #[test]
    fn ticks_of_two_intervals_add_up_and_split_per_release() {
        let s = |g: u64, f: u64, d: u64, m: u64| Sample {
            guardian: Some((7, g)),
            frontends: vec![(8, f)],
            driver: Some(d),
            machine: Some(m),
        };
        let mut t = Ticks::between(&s(100, 50, 10, 1000), &s(130, 60, 15, 1100));
        t.add(Ticks::between(&s(200, 70, 20, 1200), &s(230, 80, 25, 1300)));
        assert_eq!(t, Ticks { guardian: 60, frontends: 20, driver: 10, machine: 200 });
        let r = t.report(1.0, 10);
        let want = |ticks: u64| (secs(ticks) * 1000.0 / 10.0 * 100.0).round() / 100.0;
        assert!(want(60) > 0.0);
        assert_eq!(r.guardian_ms_per_release, want(60), "{r:?}");
        assert_eq!(r.frontends_ms_per_release, want(20), "{r:?}");
        assert_eq!(r.driver_ms_per_release, want(10), "{r:?}");
        assert_eq!(r.engine_ms_per_release, want(80), "{r:?}");
        assert_eq!(r.other_s, secs(110), "{r:?}");
    }
}
