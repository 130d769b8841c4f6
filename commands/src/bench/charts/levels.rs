//! Load levels across reports: their kind (concurrency or rate), the union of the levels that
//! ran, and the run of a report at a given level. Shared by the charts and `tgi bench compare`.

use crate::loadgen::report::{BenchReport, RunReport};
use crate::InputError;

/// What the load levels of a report measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadKind {
    /// Closed loop: number of clients.
    Concurrency,
    /// Open loop: requests per second.
    Rate,
}

impl LoadKind {
    /// The kind of one run, `None` when it records neither.
    pub fn of(run: &RunReport) -> Option<LoadKind> {
        match (run.concurrency, run.rate) {
            (Some(_), _) => Some(LoadKind::Concurrency),
            (None, Some(_)) => Some(LoadKind::Rate),
            (None, None) => None,
        }
    }

    /// Name in messages and JSON.
    pub fn name(self) -> &'static str {
        match self {
            LoadKind::Concurrency => "concurrency",
            LoadKind::Rate => "rate",
        }
    }

    /// Axis description, with unit.
    pub fn axis(self) -> &'static str {
        match self {
            LoadKind::Concurrency => "concurrency (clients)",
            LoadKind::Rate => "request rate (req/s)",
        }
    }

    /// A level in a sentence: `concurrency 8`, `rate 2.5 req/s`.
    pub fn describe(self, level: f64) -> String {
        match self {
            LoadKind::Concurrency => format!("concurrency {}", fmt_level(level)),
            LoadKind::Rate => format!("rate {} req/s", fmt_level(level)),
        }
    }

    /// A level beside a point: `c=8`, `2.5/s`.
    pub fn short(self, level: f64) -> String {
        match self {
            LoadKind::Concurrency => format!("c={}", fmt_level(level)),
            LoadKind::Rate => format!("{}/s", fmt_level(level)),
        }
    }
}

/// A level without trailing zeros: `8`, `2.5`.
pub fn fmt_level(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The one load kind of all runs of `reports`, named by `names` (one per report) in errors:
/// refuses reports without runs, runs without a level and mixed kinds.
pub fn common_kind(reports: &[BenchReport], names: &[String]) -> Result<LoadKind, InputError> {
    let mut found: Option<(LoadKind, &str)> = None;
    for (report, name) in reports.iter().zip(names) {
        if report.runs.is_empty() {
            return Err(InputError(format!("{name}: the report has no runs")));
        }
        for run in &report.runs {
            let kind = LoadKind::of(run)
                .ok_or_else(|| InputError(format!("{name}: a run has neither a concurrency nor a rate")))?;
            match found {
                None => found = Some((kind, name)),
                Some((k, first)) if k != kind => {
                    return Err(InputError(format!(
                        "{first} measures {} but {name} measures {}; compare runs of the same kind",
                        k.name(),
                        kind.name()
                    )))
                }
                Some(_) => {}
            }
        }
    }
    found.map(|(k, _)| k).ok_or_else(|| InputError("no reports given".into()))
}

/// Every level that ran in any report, ascending, equal levels once.
pub fn all_levels(reports: &[BenchReport]) -> Vec<f64> {
    let mut v: Vec<f64> = reports.iter().flat_map(|r| r.runs.iter().map(|run| run.load().0)).collect();
    v.sort_by(f64::total_cmp);
    v.dedup_by(|a, b| same(*a, *b));
    v
}

/// The first run of `report` at `level`.
pub fn run_at(report: &BenchReport, level: f64) -> Option<&RunReport> {
    report.runs.iter().find(|r| same(r.load().0, level))
}

/// Whether the report ran two or more distinct levels.
pub fn is_sweep(report: &BenchReport) -> bool {
    all_levels(std::slice::from_ref(report)).len() > 1
}

fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}
