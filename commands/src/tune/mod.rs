//! `tgi tune`: sweeps serving parameters for a hardware profile by really running `tgi serve` and
//! measuring it with `tgi bench`'s machinery, and writes the best configuration as the TOML
//! `tgi serve --config` (and `tgi serve --profile`) reads.

pub mod args;
pub mod fit;
pub mod journal;
pub mod quant;
pub mod rank;
pub mod search;
pub mod space;
pub mod trial;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub use args::TuneArgs;
use journal::{Journal, TrialRecord};
use search::Strategy;
use trial::{Setup, Trials};

use crate::error::InputError;
use crate::output::{finish_writer, AtomicFile};
use crate::profile::{self, LocalMachine, Profile, ProfileSlo};

/// Runs `tgi tune`.
pub fn run(args: TuneArgs) -> Result<()> {
    if args.list_profiles {
        println!("{}", profile::list_table(&Profile::builtin()));
        return Ok(());
    }
    validate(&args)?;
    isolate_trials();
    let spec = args.profile.as_deref().expect("clap requires --profile");
    let profile = Profile::resolve(spec)?;
    let machine = LocalMachine::this();
    let mut workload = profile.workload;
    workload.concurrency = args.concurrency.unwrap_or(workload.concurrency);
    workload.requests = args.requests.unwrap_or(workload.requests);
    workload.input_tokens = args.input_tokens.unwrap_or(workload.input_tokens);
    workload.output_tokens = args.output_tokens.unwrap_or(workload.output_tokens);
    let slo = args.slo.as_ref().map_or(profile.slo, |s| profile.slo.with(s));
    let source = match &args.model {
        Some(m) => m.clone(),
        None => crate::model_args::bundled_path()?.display().to_string(),
    };
    let out_path = args.out.clone().unwrap_or_else(|| PathBuf::from(format!("tuned-{}.toml", profile.name)));
    let journal_path = args.journal.clone().unwrap_or_else(|| out_path.with_extension("jsonl"));

    let serve_timeout = Duration::from_secs_f64(args.serve_timeout);
    let mut notes = fit::transfer_notes(&profile, &machine);
    let limits = fit::limits(&profile, &machine, &source, serve_timeout, &mut notes)?;
    let space = fit::space(&args, &limits, &workload)?;
    let base = limits.baseline();
    if args.dry_run {
        print!("{}", plan(&profile, &notes, &space, &base, &args, &workload));
        return Ok(());
    }
    // Opened now so that a bad path fails before the sweep, not after it.
    let out = AtomicFile::create(&out_path, true, &[])?;
    let json = args.json.as_deref().map(|p| AtomicFile::create(p, true, &[])).transpose()?;
    let setup = Setup {
        source: source.clone(),
        slo,
        workload,
        repeats: args.repeats,
        warmup: args.warmup,
        serve_timeout,
        request_timeout: args.timeout,
        context: format!(
            "model={source} workload={workload:?} slo={slo:?} repeats={} warmup={}",
            args.repeats, args.warmup
        ),
    };
    let journal = Journal::open(&journal_path, &setup.context)?;
    let grid = space.grid_size();
    let strategy = if grid <= args.budget { "full grid" } else { "coordinate descent from the baseline" };
    eprintln!(
        "tgi tune: profile {} ({}), model {}",
        profile.name,
        profile.description,
        args.model.as_deref().unwrap_or("(bundled stories260k)")
    );
    for n in &notes {
        eprintln!("  {n}");
    }
    eprintln!(
        "tgi tune: {grid} configurations, {strategy}, at most {} trials of {} x {} requests ({} in, {} out, {} clients); \
         journal {} ({} finished trials)",
        args.budget.min(grid),
        args.repeats,
        workload.requests,
        workload.input_tokens,
        workload.output_tokens,
        workload.concurrency,
        journal_path.display(),
        journal.len()
    );

    let bar = progress(args.quiet, args.budget.min(grid) as u64);
    let mut trials = Trials::new(&setup, journal, bar.clone());
    let outcome = search::search(&space, &base, args.budget, &mut trials)?;
    bar.finish_and_clear();
    let records = std::mem::take(&mut trials.records);
    if !args.quiet {
        println!("{}", rank::table(&records, &slo));
    }
    let how = match outcome.strategy {
        Strategy::Grid => "grid",
        Strategy::CoordinateDescent => "coordinate descent",
    };
    eprintln!(
        "tgi tune: {} trials ({} from the journal, {how}{})",
        records.len(),
        trials.recalled,
        if outcome.budget_exhausted { ", budget spent" } else { "" }
    );
    let title = format!("tgi tune: {} on profile {}", model_label(&args), profile.name);
    if let Some(dir) = &args.plot {
        let written = rank::write_chart(&records, &slo, &base, &title, dir)?;
        if !args.quiet {
            eprintln!("tgi tune: {} chart files in {}", written.len(), dir.display());
        }
    }
    let best = rank::best(&records, &slo, &base);
    if let Some(f) = json {
        write_json(f, &profile, &machine, &notes, &records, best)?;
    }
    let Some(best) = best else {
        drop(out);
        anyhow::bail!(
            "no configuration met the SLOs (TTFT P99 {} ms, TPOT P99 {} ms, E2E P99 {} ms); the trials are in {}",
            slo.ttft_p99_ms,
            slo.tpot_p99_ms,
            slo.e2e_p99_ms,
            journal_path.display()
        );
    };
    if records[best].config == base && records.len() > 1 {
        eprintln!(
            "tgi tune: no configuration beats serve's defaults by more than the noise (the repeats' spread, at least \
             {:.0}% of goodput); keeping them",
            search::NOISE_FLOOR * 100.0
        );
    }
    let text = best_toml(&records[best], &profile, &slo, args.model.is_some())?;
    write_text(out, &text)?;
    eprintln!("tgi tune: best {} -> {}", records[best].config, out_path.display());
    if !args.no_install {
        install(&profile.name, &text)?;
    }
    Ok(())
}

/// `--dry-run`: what a run would measure, without running it.
fn plan(
    profile: &Profile,
    notes: &[String],
    space: &space::Space,
    base: &space::Config,
    args: &TuneArgs,
    w: &profile::Workload,
) -> String {
    let grid = space.grid_size();
    let mut out = format!("tgi tune --dry-run: profile {} ({})\n", profile.name, profile.description);
    for n in notes {
        out.push_str(&format!("  {n}\n"));
    }
    out.push_str(&format!(
        "each trial: {} x {} requests ({} tokens in, {} out, {} clients) after {} warm-up requests\n",
        args.repeats, w.requests, w.input_tokens, w.output_tokens, w.concurrency, args.warmup
    ));
    if grid <= args.budget {
        out.push_str(&format!("the full grid, {grid} trials:\n"));
        for (i, c) in space.grid(base).iter().enumerate() {
            out.push_str(&format!("  {:>3}. {c}\n", i + 1));
        }
    } else {
        out.push_str(&format!(
            "{grid} configurations: coordinate descent, at most {} trials, from serve's defaults ({base}), one \
             parameter at a time:\n",
            args.budget
        ));
        for (p, values) in &space.0 {
            let values: Vec<String> = values.iter().map(ToString::to_string).collect();
            out.push_str(&format!("  {}: {}\n", p.name(), values.join(", ")));
        }
    }
    out
}

/// Keeps `TGI_*` settings in this environment (a `TGI_CONFIG`, `TGI_PROFILE`, `TGI_MAX_BATCH_SIZE`, ...) out of
/// the trials' servers, so that each runs exactly its configuration; `TGI_API_KEY` stays (bench sends it too).
fn isolate_trials() {
    let names: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| k.starts_with("TGI_") && k != "TGI_API_KEY")
        .collect();
    for k in &names {
        std::env::remove_var(k);
    }
    if !names.is_empty() {
        eprintln!("tgi tune: ignoring {} for the trials' servers", names.join(", "));
    }
}

/// Checks what clap cannot.
fn validate(a: &TuneArgs) -> Result<(), InputError> {
    let bad = |m: &str| Err(InputError(m.to_string()));
    if a.budget == 0 || a.repeats == 0 {
        return bad("--budget and --repeats must be at least 1");
    }
    if a.concurrency == Some(0) || a.requests == Some(0) || a.input_tokens == Some(0) || a.output_tokens == Some(0) {
        return bad("--concurrency, --requests, --input-tokens and --output-tokens must be at least 1");
    }
    if !(a.serve_timeout.is_finite() && a.serve_timeout > 0.0 && a.timeout.is_finite() && a.timeout > 0.0) {
        return bad("--serve-timeout and --timeout must be positive numbers of seconds");
    }
    fit::check_lists(a)
}

fn model_label(a: &TuneArgs) -> String {
    a.model.as_deref().map_or("stories260k".into(), |m| {
        Path::new(m).file_name().map_or(m.to_string(), |n| n.to_string_lossy().into_owned())
    })
}

/// A progress bar over trials on stderr.
fn progress(quiet: bool, total: u64) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_draw_target(ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("tune [{bar:30}] {pos}/{len} trials {elapsed} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(500));
    bar
}

/// The best configuration as `tgi serve --config` reads it, with its measures as comments.
fn best_toml(r: &TrialRecord, profile: &Profile, slo: &ProfileSlo, model_given: bool) -> Result<String> {
    let mut t = r.config.toml();
    if model_given || r.config.quantize().is_some() {
        t.insert("model".into(), toml::Value::String(r.model.clone()));
    }
    let m = &r.median;
    Ok(format!(
        "# tgi tune: best configuration for profile {} ({})\n\
         # measured: goodput {:.2} req/s, {:.1} output tok/s, TTFT P99 {:.0} ms, TPOT P99 {:.1} ms, E2E P99 {:.0} ms\n\
         # SLOs: TTFT P99 {} ms, TPOT P99 {} ms, E2E P99 {} ms\n\
         # configuration: {}\n{}",
        profile.name,
        profile.description,
        m.goodput,
        m.output_tokens_per_s,
        m.ttft_ms.p99,
        m.tpot_ms.p99,
        m.e2e_ms.p99,
        slo.ttft_p99_ms,
        slo.tpot_p99_ms,
        slo.e2e_p99_ms,
        r.config,
        toml::to_string(&t).context("cannot write the configuration")?
    ))
}

fn write_text(f: AtomicFile, text: &str) -> Result<()> {
    let mut w = f.writer()?;
    w.write_all(text.as_bytes())?;
    finish_writer(w)?;
    f.commit()
}

/// Copies the best configuration to where `tgi serve --profile NAME` finds it.
fn install(name: &str, text: &str) -> Result<()> {
    let Some(path) = profile::tuned_path(name) else {
        eprintln!("tgi tune: neither XDG_CONFIG_HOME nor HOME is set; not installed for tgi serve --profile");
        return Ok(());
    };
    let dir = path.parent().expect("a directory");
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    write_text(AtomicFile::create(&path, true, &[])?, text)?;
    eprintln!("tgi tune: installed as {} (tgi serve --profile {name})", path.display());
    Ok(())
}

fn write_json(
    f: AtomicFile,
    profile: &Profile,
    machine: &LocalMachine,
    notes: &[String],
    records: &[TrialRecord],
    best: Option<usize>,
) -> Result<()> {
    let v = serde_json::json!({
        "profile": profile,
        "machine": {"cores": machine.cores, "memory_gib": machine.memory_gib},
        "notes": notes,
        "trials": records,
        "pareto": rank::pareto(records),
        "best": best,
    });
    let mut w = f.writer()?;
    serde_json::to_writer_pretty(&mut w, &v)?;
    w.write_all(b"\n")?;
    finish_writer(w)?;
    f.commit()
}
