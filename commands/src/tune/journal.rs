//! The sweep's journal: one JSON line per finished trial (configuration and measures), appended
//! and synced as each trial ends, so a killed sweep resumes without redoing finished trials.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::search::Measured;
use super::space::Config;

/// Percentiles of one latency measure, ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// What one measured run of the workload gave.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Time to first token.
    pub ttft_ms: Percentiles,
    /// Time per output token.
    pub tpot_ms: Percentiles,
    /// Inter-token latency.
    pub itl_ms: Percentiles,
    /// End to end.
    pub e2e_ms: Percentiles,
    /// Successful requests per second.
    pub requests_per_s: f64,
    /// Generated tokens per second.
    pub output_tokens_per_s: f64,
    /// Requests per second meeting every SLO.
    pub goodput: f64,
    /// Fraction of requests meeting every SLO.
    pub slo_attainment: f64,
    /// Requests that succeeded.
    pub requests_ok: u64,
    /// Requests that failed.
    pub errors: u64,
}

/// One finished trial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialRecord {
    /// What the trial was measured under (model, workload, objectives, repeats); trials of another
    /// context in the same journal are not reused.
    pub context: String,
    /// The configuration.
    pub config: Config,
    /// The model file served (the quantized copy when the configuration quantizes).
    pub model: String,
    /// Why the trial produced no measures (the server did not start, every request failed, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Each repeat's measures.
    pub repeats: Vec<Metrics>,
    /// The median of each measure over the repeats.
    pub median: Metrics,
    /// Median absolute deviation of goodput over the repeats.
    pub goodput_mad: f64,
    /// Peak resident memory of the server (VmHWM), MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rss_mib: Option<f64>,
    /// The server's process id (gone once the trial ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_pid: Option<u32>,
    /// Seconds the trial took, start to stop.
    pub wall_s: f64,
}

impl TrialRecord {
    /// The search objective: goodput, `-inf` for a failed trial.
    pub fn measured(&self) -> Measured {
        if self.error.is_some() {
            return Measured { score: f64::NEG_INFINITY, spread: 0.0 };
        }
        Measured { score: self.median.goodput, spread: self.goodput_mad }
    }
}

/// The journal file and the trials it already holds for this context.
pub struct Journal {
    path: PathBuf,
    done: HashMap<Config, TrialRecord>,
    /// Lines skipped on loading: other contexts, or a torn last line.
    pub skipped: usize,
    /// The file ends inside a line (a sweep killed while writing): start the next on a new line.
    torn: bool,
}

impl Journal {
    /// Opens `path` (missing is empty) and keeps the trials of `context`.
    pub fn open(path: &Path, context: &str) -> Result<Journal> {
        let mut done = HashMap::new();
        let mut skipped = 0;
        let mut torn = false;
        match std::fs::read_to_string(path) {
            Ok(text) => {
                torn = !text.is_empty() && !text.ends_with('\n');
                for line in text.lines().filter(|l| !l.trim().is_empty()) {
                    match serde_json::from_str::<TrialRecord>(line) {
                        Ok(r) if r.context == context => {
                            done.insert(r.config.clone(), r);
                        }
                        _ => skipped += 1,
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot read the journal {}", path.display())),
        }
        Ok(Journal { path: path.to_path_buf(), done, skipped, torn })
    }

    /// The finished trial of `c`, if any.
    pub fn get(&self, c: &Config) -> Option<&TrialRecord> {
        self.done.get(c)
    }

    /// Trials held.
    pub fn len(&self) -> usize {
        self.done.len()
    }

    /// Whether it holds no trials.
    pub fn is_empty(&self) -> bool {
        self.done.is_empty()
    }

    /// Appends `r` as one line and syncs it to disk.
    pub fn append(&mut self, r: &TrialRecord) -> Result<()> {
        let mut line = if std::mem::take(&mut self.torn) { "\n".to_string() } else { String::new() };
        line.push_str(&serde_json::to_string(r)?);
        line.push('\n');
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .with_context(|| format!("cannot write the journal {}", self.path.display()))?;
        f.write_all(line.as_bytes()).and_then(|_| f.sync_data()).context("cannot write the journal")?;
        self.done.insert(r.config.clone(), r.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::space::{Param, Value};
    use super::*;

    fn record(context: &str, threads: &str, goodput: f64) -> TrialRecord {
        TrialRecord {
            context: context.into(),
            config: Config::default().with(Param::Threads, &Value::Set(threads.into())),
            model: "m.gguf".into(),
            error: None,
            repeats: vec![],
            median: Metrics { goodput, ..Metrics::default() },
            goodput_mad: 0.1,
            peak_rss_mib: Some(12.0),
            server_pid: Some(42),
            wall_s: 1.0,
        }
    }

    #[test]
    fn resumes_only_finished_trials_of_the_same_context() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        let mut j = Journal::open(&path, "a").unwrap();
        assert!(j.is_empty());
        j.append(&record("a", "1", 2.0)).unwrap();
        j.append(&record("b", "2", 3.0)).unwrap();
        j.append(&record("a", "2", 4.0)).unwrap();
        // A sweep killed while writing leaves a torn line.
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"context\":\"a\",\"conf").unwrap();
        let mut j = Journal::open(&path, "a").unwrap();
        assert_eq!((j.len(), j.skipped), (2, 2));
        j.append(&record("a", "4", 1.0)).unwrap();
        assert_eq!(Journal::open(&path, "a").unwrap().len(), 3, "the line after a torn one is kept");
        let two = Config::default().with(Param::Threads, &Value::Set("2".into()));
        assert_eq!(j.get(&two).unwrap().measured(), Measured { score: 4.0, spread: 0.1 });
        let mut failed = record("a", "3", 9.0);
        failed.error = Some("did not start".into());
        assert_eq!(failed.measured().score, f64::NEG_INFINITY);
    }
}
