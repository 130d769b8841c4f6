//! A load run against a server: settle the target, build the workload, run each load level with live progress
//! and a table per level (unless quiet); `tgi bench` writes the report, `tgi tune` keeps its figures.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::args::{ApiChoice, LoadArgs, RateSpec};
use super::client::api::Api;
use super::client::http::{Client, Endpoint};
use super::load::{run_level, Level, LevelResult, OnDone, Prompts, Stop};
use super::report::{BenchReport, RunReport, Target};
use super::target::detect;
use super::{scrape, summary, table, workload};
use crate::error::InputError;

/// Requests per level when neither --requests nor --duration is given.
const DEFAULT_REQUESTS: usize = 100;
/// Clients of a rate sweep's saturation level, unless --concurrency says.
const SWEEP_CLIENTS: usize = 64;
/// Most distinct prompts prepared.
const MAX_POOL: usize = 1024;

/// Measures the server at `url` as `args` say: every level's report, no files written (`tgi tune`'s trials too).
pub fn measure(args: &LoadArgs, url: &str) -> Result<BenchReport> {
    let (connect, read) = (Duration::from_secs_f64(args.connect_timeout), Duration::from_secs_f64(args.timeout));
    let mut endpoint = Endpoint::parse(url, connect, read).map_err(InputError)?;
    endpoint.api_key = args.api_key.clone();
    endpoint.anthropic = args.api == ApiChoice::Anthropic;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(bench(args, Arc::new(endpoint), url))
}

/// Probes the target, builds the workload and runs every level.
async fn bench(args: &LoadArgs, endpoint: Arc<Endpoint>, url: &str) -> Result<BenchReport> {
    let found = detect(&endpoint, args.api, args.endpoint, args.model_name.as_deref(), args.ignore_eos).await?;
    // Synthetic prompts need it; ShareGPT replies and file prompts are measured with it when there is one.
    let counter = workload::counter(args.tokenizer.as_deref(), endpoint.clone(), found.tgi_routes).await?;
    let levels = args.rate.as_ref().map_or(args.concurrency.len().max(1), |r| match r {
        RateSpec::List(v) => v.len(),
        RateSpec::Sweep => args.sweep_points,
    });
    let per_level = args.requests.unwrap_or(if args.duration.is_some() { MAX_POOL } else { DEFAULT_REQUESTS });
    let pool = (args.warmup + levels * per_level).min(MAX_POOL);
    let spec = workload::Spec {
        file: args.prompt_file.as_deref(),
        format: args.dataset,
        input: args.input_tokens,
        output: args.output_tokens,
        seed: args.seed,
    };
    let prompts = Arc::new(workload::build(&spec, counter.as_ref(), pool).await?);
    let label = args.label.clone().or_else(|| found.model.clone()).unwrap_or_else(|| url.to_string());
    let target = Target {
        url: url.to_string(),
        api: found.api.name().to_string(),
        route: found.api.path().to_string(),
        model: found.model.clone(),
        label,
    };
    let mut ctx = Ctx { args, endpoint, api: Arc::new(found.api), prompts, next_prompt: 0 };
    if !args.quiet {
        eprintln!(
            "tgi bench: {} ({} API, {}) with {} prompts",
            target.url,
            target.api,
            target.model.as_deref().unwrap_or("model not named"),
            ctx.prompts.len()
        );
    }
    let mut runs = Vec::new();
    if args.warmup > 0 {
        let c = args.concurrency.first().copied().unwrap_or(1).min(args.warmup);
        ctx.level(Level::Closed(c), Stop::Requests(args.warmup), "warm-up").await;
    }
    let cap = if args.rate.is_some() { args.concurrency.first().copied() } else { None };
    match &args.rate {
        None => {
            for &c in if args.concurrency.is_empty() { &[1][..] } else { &args.concurrency } {
                runs.push(ctx.measured(Level::Closed(c)).await?);
            }
        }
        Some(RateSpec::List(rates)) => {
            for &rate in rates {
                runs.push(ctx.measured(Level::Open { rate, burstiness: args.burstiness, cap }).await?);
            }
        }
        Some(RateSpec::Sweep) => {
            let sync = ctx.measured(Level::Closed(1)).await?;
            let max = ctx.measured(Level::Closed(cap.unwrap_or(SWEEP_CLIENTS))).await?;
            let (lo, hi) = (sync.summary.requests_per_s, max.summary.requests_per_s);
            runs.extend([sync, max]);
            let k = args.sweep_points - 2;
            if hi > lo && lo > 0.0 {
                for i in 1..=k {
                    let rate = lo + (hi - lo) * i as f64 / (k + 1) as f64;
                    runs.push(ctx.measured(Level::Open { rate, burstiness: args.burstiness, cap: None }).await?);
                }
            } else if !args.quiet && k > 0 {
                eprintln!("tgi bench: saturation throughput ({hi:.2} req/s) is not above synchronous ({lo:.2}); no rates between");
            }
        }
    }
    if runs.len() > 1 && !args.quiet {
        println!("{}", table::sweep_table(&runs));
    }
    Ok(BenchReport { target, runs })
}

/// What every level shares.
struct Ctx<'a> {
    args: &'a LoadArgs,
    endpoint: Arc<Endpoint>,
    api: Arc<Api>,
    prompts: Arc<Vec<super::client::api::Prompt>>,
    next_prompt: usize,
}

impl Ctx<'_> {
    fn stop(&self) -> Stop {
        match (self.args.requests, self.args.duration) {
            (_, Some(d)) => Stop::After(d),
            (n, None) => Stop::Requests(n.unwrap_or(DEFAULT_REQUESTS)),
        }
    }

    /// Runs a measured level and summarises it (with the server's metrics when asked).
    async fn measured(&mut self, level: Level) -> Result<RunReport> {
        let sampler = if self.args.scrape_metrics {
            Some(scrape::Sampler::start(self.endpoint.clone(), Duration::from_millis(100)).await?)
        } else {
            None
        };
        let (concurrency, rate) = match level {
            Level::Closed(c) => (Some(c), None),
            Level::Open { rate, cap, .. } => (cap, Some(rate)),
        };
        let name = table::level_name(concurrency, rate);
        let result = self.level(level, self.stop(), &name).await;
        let mut s = summary::summarize(&result, self.args.slo.as_ref());
        if let Some(sampler) = sampler {
            s.server = sampler.finish().await;
        }
        let run = RunReport { concurrency, rate, summary: s, requests: result.records };
        if !self.args.quiet {
            println!("{}", table::level_table(&run));
        }
        Ok(run)
    }

    /// Runs one level with a progress bar.
    async fn level(&mut self, level: Level, stop: Stop, name: &str) -> LevelResult {
        let bar = progress(self.args.quiet, stop, name);
        let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let on_done: OnDone = {
            let (bar, ok, failed) = (bar.clone(), ok.clone(), failed.clone());
            Arc::new(move |r| {
                let counter = if r.error.is_some() { &failed } else { &ok };
                counter.fetch_add(1, Ordering::Relaxed);
                let done = ok.load(Ordering::Relaxed);
                let secs = bar.elapsed().as_secs_f64().max(1e-3);
                bar.set_message(format!("{:.2} req/s, {} errors", done as f64 / secs, failed.load(Ordering::Relaxed)));
                bar.inc(1);
            })
        };
        let (endpoint, api, ignore_eos) = (self.endpoint.clone(), self.api.clone(), self.args.ignore_eos);
        let make = move || Client::new(endpoint.clone(), api.clone(), ignore_eos);
        let prompts = Prompts { pool: self.prompts.clone(), first: self.next_prompt };
        let seed = self.args.seed.wrapping_add(self.next_prompt as u64);
        let result = run_level(make, prompts, level, stop, seed, on_done).await;
        self.next_prompt += result.records.len();
        bar.finish_and_clear();
        result
    }
}

/// A progress bar on stderr: requests done of the total, or elapsed time of a timed level.
fn progress(quiet: bool, stop: Stop, name: &str) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let (bar, template) = match stop {
        Stop::Requests(n) => (ProgressBar::new(n as u64), "{prefix} [{bar:30}] {pos}/{len} requests, {msg}"),
        Stop::After(_) => (ProgressBar::new_spinner(), "{prefix} {spinner} {elapsed} {pos} requests, {msg}"),
    };
    bar.set_draw_target(ProgressDrawTarget::stderr());
    bar.set_style(ProgressStyle::with_template(template).expect("valid template").progress_chars("=> "));
    bar.set_prefix(name.to_string());
    if matches!(stop, Stop::After(_)) {
        bar.enable_steady_tick(Duration::from_millis(200));
    }
    bar
}
