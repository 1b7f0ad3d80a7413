//! Progress of a long command on standard error (docs/CLI.md "Progress"): a bar on a terminal,
//! otherwise one line every [`PROGRESS_EVERY`], so a log or a CI job shows the command is alive.
//! Nothing is written on standard output, which stays the command's result.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// How often a progress line is written when standard error is not a terminal.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// One command's progress: `done` of `total` `unit`s (positions, leaves, events).
pub struct Progress {
    label: &'static str,
    unit: &'static str,
    bar: Option<indicatif::ProgressBar>,
    last_line: Instant,
    start: Instant,
    quiet: bool,
}

impl Progress {
    /// A progress for the command `label` counting `unit`s. `quiet` shows nothing at all (a
    /// verb whose output would otherwise be mixed with it, or a test that wants none).
    pub fn new(label: &'static str, unit: &'static str, quiet: bool) -> Progress {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::new(0);
            let template =
                format!("{label} {{bar:40}} {{pos}}/{{len}} {unit}, {{per_sec}} ({{eta}})");
            bar.set_style(
                indicatif::ProgressStyle::with_template(&template)
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar
        });
        let now = Instant::now();
        Progress {
            label,
            unit,
            bar,
            last_line: now,
            start: now,
            quiet,
        }
    }

    /// `done` of `total` so far, and a free-form `detail` for the plain line (may be empty).
    pub fn show(&mut self, done: u64, total: u64, detail: &str) {
        if self.quiet {
            return;
        }
        if let Some(bar) = &self.bar {
            bar.set_length(total);
            bar.set_position(done);
        } else if self.last_line.elapsed() >= PROGRESS_EVERY {
            self.last_line = Instant::now();
            let secs = self.start.elapsed().as_secs_f64().max(1e-9);
            let sep = if detail.is_empty() { "" } else { ", " };
            crate::errln!(
                "{}: {done} of {total} {}{sep}{detail} ({:.0}/s)",
                self.label,
                self.unit,
                done as f64 / secs
            );
        }
    }

    /// Clears the bar (the plain lines stay).
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
