//! Choosing how a root's many misses are read: sequentially, by the walk
//! itself, or ahead of it by the parallel fill (`fill.rs`), by what each
//! way has cost in this process.
//!
//! The cache lives as long as its owner (the guardian), so it measures
//! instead of guessing from the load average (which lags a minute behind
//! the load a fill meets): every large fill (at least [`LARGE`]
//! directories read) notes its wall time per directory read for the way
//! it ran, as a moving average. A large fill then runs the way whose
//! average is lower, except every [`EXPLORE`]th, which runs the other way,
//! so that an average taken under another load does not stand for good.
//! The first large fill, before anything is measured, runs in parallel
//! (measured on the 50,000-entry bench tree, 2 cores, interleaved: 0.73 of
//! the sequential fill's wall time for 1.19 times its CPU, and 0.84–1.10
//! at load 6; `benches/README.md`), and the next one sequentially. A
//! machine with one core always reads sequentially. A walk that set out
//! sequentially because its records foretold few misses, and has read
//! [`LARGE`] directories afresh anyway, reads the rest in parallel unless
//! the sequential way measured cheaper ([`FillChooser::late`]); such a
//! walk is not measured (it ran both ways). Both ways produce the
//! same records (`fill.rs`): the choice is only about time.

use std::sync::Mutex;
use std::time::Duration;

/// Fewer directories to read than this: the walk reads them itself (a
/// warm scan's few misses are not worth a thread).
pub(crate) const LARGE: usize = 64;

/// One large fill in this many runs the way not currently preferred.
pub(crate) const EXPLORE: u64 = 8;

/// The weight of the newest measurement in a moving average.
const NEWEST: f64 = 0.5;

/// How a root's misses are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Way {
    /// By the walk, one at a time.
    Sequential,
    /// Ahead of the walk, by this many workers (the calling thread one of
    /// them).
    Parallel(usize),
}

#[derive(Debug, Default)]
struct Costs {
    /// Nanoseconds per directory read, sequentially and in parallel.
    sequential: Option<f64>,
    parallel: Option<f64>,
    /// Large fills chosen so far.
    fills: u64,
}

/// The measured choice between the ways (module docs).
#[derive(Debug)]
pub(crate) struct FillChooser {
    costs: Mutex<Costs>,
    threads: usize,
}

impl FillChooser {
    /// A chooser with nothing measured, for `threads` workers at most.
    pub(crate) fn new(threads: usize) -> FillChooser {
        FillChooser { costs: Mutex::default(), threads }
    }

    /// The way to read `misses` directories (a lower bound: a cold root's
    /// count is unknown before its walk and given as [`LARGE`]).
    pub(crate) fn choose(&self, misses: usize) -> Way {
        if misses < LARGE || self.threads < 2 {
            return Way::Sequential;
        }
        let mut c = self.costs.lock().unwrap_or_else(|e| e.into_inner());
        c.fills += 1;
        let parallel = match (c.sequential, c.parallel) {
            (_, None) => true,
            (None, Some(_)) => false,
            (Some(s), Some(p)) => (p < s) != c.fills.is_multiple_of(EXPLORE),
        };
        if parallel {
            Way::Parallel(self.threads)
        } else {
            Way::Sequential
        }
    }

    /// The measured costs per directory, sequential and parallel.
    #[cfg(test)]
    pub(crate) fn costs(&self) -> (Option<f64>, Option<f64>) {
        let c = self.costs.lock().unwrap();
        (c.sequential, c.parallel)
    }

    /// The workers a walk that meets a large miss its records did not
    /// foretell (a new subtree) reads the rest with: `None` when the
    /// sequential way measured cheaper (or there is one core).
    pub(crate) fn late(&self) -> Option<usize> {
        let c = self.costs.lock().unwrap_or_else(|e| e.into_inner());
        let parallel = match (c.sequential, c.parallel) {
            (Some(s), Some(p)) => p < s,
            _ => true,
        };
        (parallel && self.threads >= 2).then_some(self.threads)
    }

    /// Notes that a fill run `way` read `reads` directories in `took`.
    /// Only large fills count.
    pub(crate) fn note(&self, way: Way, reads: u64, took: Duration) {
        if reads < LARGE as u64 {
            return;
        }
        let per = took.as_nanos() as f64 / reads as f64;
        let mut c = self.costs.lock().unwrap_or_else(|e| e.into_inner());
        let slot = match way {
            Way::Sequential => &mut c.sequential,
            Way::Parallel(_) => &mut c.parallel,
        };
        *slot = Some(slot.map_or(per, |old| old * (1.0 - NEWEST) + per * NEWEST));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn small_fills_and_one_core_read_sequentially() {
        let two = FillChooser::new(2);
        assert_eq!(two.choose(LARGE - 1), Way::Sequential);
        assert_eq!(FillChooser::new(1).choose(10_000), Way::Sequential);
        // Small fills are not measured either.
        two.note(Way::Parallel(2), LARGE as u64 - 1, MS);
        assert!(two.costs.lock().unwrap().parallel.is_none());
    }

    #[test]
    fn parallel_first_then_sequential_then_the_cheaper_with_exploration() {
        let c = FillChooser::new(2);
        // Nothing measured: in parallel, until a parallel fill was large
        // enough to be measured.
        assert_eq!(c.choose(LARGE), Way::Parallel(2));
        assert_eq!(c.choose(LARGE), Way::Parallel(2));
        c.note(Way::Parallel(2), 1000, 15 * MS);
        // One way measured: the other one is tried.
        assert_eq!(c.choose(LARGE), Way::Sequential);
        c.note(Way::Sequential, 1000, 20 * MS);
        // Both measured: the cheaper per directory, but every EXPLORE-th
        // large fill the other way.
        let ways: Vec<Way> = (0..2 * EXPLORE).map(|_| c.choose(LARGE)).collect();
        let seq = ways.iter().filter(|w| **w == Way::Sequential).count();
        assert_eq!(seq, 2, "{ways:?}");
        // Under load the parallel way gets slower than the sequential one:
        // the next measurements turn the choice.
        c.note(Way::Parallel(2), 1000, 40 * MS);
        c.note(Way::Parallel(2), 1000, 40 * MS);
        let ways: Vec<Way> = (0..EXPLORE).map(|_| c.choose(LARGE)).collect();
        assert_eq!(ways.iter().filter(|w| **w == Way::Sequential).count() as u64, EXPLORE - 1, "{ways:?}");
    }
}
