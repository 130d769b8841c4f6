//! One trial: start `tgi serve` with the configuration (the shared [`LocalServer`]), warm it up, run the
//! profile's workload through the shared load generator `repeats` times, read the server's peak memory,
//! stop and reap it, and journal the result. Trials already in the journal are recalled, not rerun.

use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Parser;
use indicatif::ProgressBar;

use super::journal::{Journal, Metrics, Percentiles, TrialRecord};
use super::quant;
use super::search::{mad, median, Measured, Objective};
use super::space::Config;
use crate::loadgen::args::LoadArgs;
use crate::loadgen::report::{Distribution, RunSummary};
use crate::loadgen::run;
use crate::loadgen::spawn::LocalServer;
use crate::profile::{ProfileSlo, Workload};

/// What every trial shares.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The model file or id served (the bundled model's file when none was given).
    pub source: String,
    /// Latency objectives.
    pub slo: ProfileSlo,
    /// The load.
    pub workload: Workload,
    /// Measured runs of the workload per trial.
    pub repeats: usize,
    /// Requests sent before the first measured run.
    pub warmup: usize,
    /// How long a server may take to become healthy.
    pub serve_timeout: Duration,
    /// Seconds a request may wait for its next chunk.
    pub request_timeout: f64,
    /// The journal context (what makes trials comparable).
    pub context: String,
}

/// The real objective: trials against `tgi serve` children, journaled.
pub struct Trials<'a> {
    setup: &'a Setup,
    journal: Journal,
    bar: ProgressBar,
    /// Every trial measured or recalled, in order.
    pub records: Vec<TrialRecord>,
    /// How many came from the journal.
    pub recalled: usize,
}

impl<'a> Trials<'a> {
    /// Trials under `setup`, recorded in `journal`, counted on `bar`.
    pub fn new(setup: &'a Setup, journal: Journal, bar: ProgressBar) -> Trials<'a> {
        Trials { setup, journal, bar, records: Vec::new(), recalled: 0 }
    }

    fn run(&self, cfg: &Config) -> TrialRecord {
        let start = Instant::now();
        let mut rec = TrialRecord {
            context: self.setup.context.clone(),
            config: cfg.clone(),
            model: self.setup.source.clone(),
            error: None,
            repeats: Vec::new(),
            median: Metrics::default(),
            goodput_mad: 0.0,
            peak_rss_mib: None,
            server_pid: None,
            wall_s: 0.0,
        };
        if let Err(e) = self.measure_into(cfg, &mut rec) {
            rec.error = Some(format!("{e:#}"));
        }
        rec.wall_s = start.elapsed().as_secs_f64();
        rec
    }

    fn measure_into(&self, cfg: &Config, rec: &mut TrialRecord) -> Result<()> {
        if let Some(preset) = cfg.quantize() {
            self.bar.set_message(format!("tgi quantize --type {preset}"));
            rec.model = quant::quantized(&self.setup.source, preset)?.display().to_string();
        }
        self.bar.set_message(cfg.to_string());
        let server = LocalServer::start(Some(&rec.model), &cfg.serve_args(), self.setup.serve_timeout, true)?;
        rec.server_pid = server.pid();
        for repeat in 0..self.setup.repeats {
            let args = load_args(self.setup, repeat)?;
            let report = run::measure(&args, &server.url)?;
            let summary = &report.runs.first().ok_or_else(|| anyhow::anyhow!("no load level ran"))?.summary;
            rec.repeats.push(metrics(summary));
        }
        rec.peak_rss_mib = server.peak_rss_kib().map(|k| k as f64 / 1024.0);
        drop(server);
        rec.median = Metrics::median(&rec.repeats);
        rec.goodput_mad = mad(&rec.repeats.iter().map(|m| m.goodput).collect::<Vec<_>>());
        if rec.median.requests_ok == 0 {
            anyhow::bail!("every request failed");
        }
        Ok(())
    }
}

impl Objective for Trials<'_> {
    fn measure(&mut self, cfg: &Config) -> Result<Measured> {
        if let Some(r) = self.journal.get(cfg) {
            self.records.push(r.clone());
            self.recalled += 1;
            self.bar.inc(1);
            return Ok(r.measured());
        }
        let r = self.run(cfg);
        self.journal.append(&r)?;
        self.bar.inc(1);
        let m = r.measured();
        self.records.push(r);
        Ok(m)
    }
}

/// The load flags of one measured run.
#[derive(Debug, Parser)]
#[command(name = "load")]
struct LoadCli {
    #[command(flatten)]
    args: LoadArgs,
}

/// The load arguments of repeat `repeat` (warm-up before the first only; each repeat its own prompts).
fn load_args(s: &Setup, repeat: usize) -> Result<LoadArgs> {
    let w = &s.workload;
    let mut argv: Vec<String> = ["load", "--quiet", "--ignore-eos"].map(String::from).to_vec();
    argv.extend([
        format!("--requests={}", w.requests),
        format!("--input-tokens={}", w.input_tokens),
        format!("--output-tokens={}", w.output_tokens),
        format!("--concurrency={}", w.concurrency),
        format!("--warmup={}", if repeat == 0 { s.warmup } else { 0 }),
        format!("--seed={repeat}"),
        format!("--timeout={}", s.request_timeout),
        format!("--slo=ttft={}ms,tpot={}ms,e2e={}ms", s.slo.ttft_p99_ms, s.slo.tpot_p99_ms, s.slo.e2e_p99_ms),
    ]);
    if let Some(rate) = w.rate {
        argv.push(format!("--rate={rate}"));
    }
    Ok(LoadCli::try_parse_from(argv).map_err(|e| anyhow::anyhow!("load arguments: {e}"))?.args)
}

/// The figures tune keeps of a level's summary.
fn metrics(s: &RunSummary) -> Metrics {
    let p = |d: &Distribution| Percentiles { p50: d.p50, p90: d.p90, p99: d.p99 };
    Metrics {
        ttft_ms: p(&s.ttft_ms),
        tpot_ms: p(&s.tpot_ms),
        itl_ms: p(&s.itl_ms),
        e2e_ms: p(&s.e2e_ms),
        requests_per_s: s.requests_per_s,
        output_tokens_per_s: s.output_tokens_per_s,
        goodput: s.goodput.unwrap_or(0.0),
        slo_attainment: s.slo_attainment.unwrap_or(0.0),
        requests_ok: s.requests_ok,
        errors: s.errors.values().sum(),
    }
}

impl Metrics {
    /// The median of each figure over `runs`.
    pub fn median(runs: &[Metrics]) -> Metrics {
        let m = |f: fn(&Metrics) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
        let pm = |f: fn(&Metrics) -> &Percentiles| Percentiles {
            p50: median(&runs.iter().map(|r| f(r).p50).collect::<Vec<_>>()),
            p90: median(&runs.iter().map(|r| f(r).p90).collect::<Vec<_>>()),
            p99: median(&runs.iter().map(|r| f(r).p99).collect::<Vec<_>>()),
        };
        Metrics {
            ttft_ms: pm(|r| &r.ttft_ms),
            tpot_ms: pm(|r| &r.tpot_ms),
            itl_ms: pm(|r| &r.itl_ms),
            e2e_ms: pm(|r| &r.e2e_ms),
            requests_per_s: m(|r| r.requests_per_s),
            output_tokens_per_s: m(|r| r.output_tokens_per_s),
            goodput: m(|r| r.goodput),
            slo_attainment: m(|r| r.slo_attainment),
            requests_ok: m(|r| r.requests_ok as f64).round() as u64,
            errors: m(|r| r.errors as f64).round() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_flags_and_medians() {
        let setup = Setup {
            source: "m.gguf".into(),
            slo: ProfileSlo { ttft_p99_ms: 500.0, tpot_p99_ms: 50.0, e2e_p99_ms: 5000.0 },
            workload: Workload { input_tokens: 16, output_tokens: 8, concurrency: 2, rate: Some(1.5), requests: 6 },
            repeats: 2,
            warmup: 3,
            serve_timeout: Duration::from_secs(5),
            request_timeout: 30.0,
            context: "c".into(),
        };
        let a = load_args(&setup, 0).unwrap();
        assert_eq!(
            (a.requests, a.warmup, a.concurrency.clone(), a.ignore_eos, a.quiet),
            (Some(6), 3, vec![2], true, true)
        );
        assert_eq!(a.slo.unwrap().tpot_ms, Some(50.0));
        assert!(a.rate.is_some());
        assert_eq!(load_args(&setup, 1).unwrap().warmup, 0);
        let run = |g: f64, ok: u64| Metrics { goodput: g, requests_ok: ok, ..Metrics::default() };
        let m = Metrics::median(&[run(1.0, 6), run(3.0, 6), run(2.0, 5)]);
        assert_eq!((m.goodput, m.requests_ok), (2.0, 6));
    }
}
