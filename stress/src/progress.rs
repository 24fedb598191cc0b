//! The progress line on stderr: one builder for every bar of the tool.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// What a progress line counts.
#[derive(Clone, Copy, Debug)]
pub enum Progress {
    /// Nothing: a spinner with the elapsed time and a message.
    Spinner,
    /// The milliseconds of a timed phase of this length.
    Timed(Duration),
    /// Commands, up to this many.
    Commands(u64),
}

/// Makes a progress line on stderr, or a hidden one when `enabled` is
/// false (`--no-progress`, or stderr is not a terminal).
pub fn bar(enabled: bool, kind: Progress) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let (len, template) = match kind {
        Progress::Spinner => (None, "{spinner} {elapsed:>4} {msg}"),
        Progress::Timed(d) => (Some(d.as_millis() as u64), "{bar:24} {elapsed:>3} {msg}"),
        Progress::Commands(n) => (Some(n), "{bar:24} {pos}/{len} commands {elapsed:>4} {msg}"),
    };
    let pb = ProgressBar::with_draw_target(len, ProgressDrawTarget::stderr());
    let fallback = if len.is_some() { ProgressStyle::default_bar() } else { ProgressStyle::default_spinner() };
    pb.set_style(ProgressStyle::with_template(template).unwrap_or(fallback));
    if len.is_none() {
        pb.enable_steady_tick(Duration::from_millis(120));
    }
    pb
}
