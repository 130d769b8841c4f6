//! A whole `tgi bench` run: serve the model in-process when no URL is given, measure it (see
//! [`crate::loadgen::run::measure`]), then write the files and draw the charts.

use std::time::Duration;

use anyhow::Result;

use super::args::BenchArgs;
use super::{charts, files};
use crate::error::InputError;
use crate::loadgen::client::http::Endpoint;
use crate::loadgen::run::measure;
use crate::loadgen::spawn::LocalServer;
use crate::output::AtomicFile;

/// Checks flag combinations clap cannot express.
fn validate(a: &BenchArgs) -> Result<(), InputError> {
    if a.url.is_some() && (a.model.is_some() || !a.serve_args.is_empty()) {
        return Err(InputError(
            "--model and --serve-arg start a server in-process; leave them out with --url".to_string(),
        ));
    }
    if !(a.serve_timeout.is_finite() && a.serve_timeout > 0.0) {
        return Err(InputError("--serve-timeout must be a positive number of seconds".to_string()));
    }
    a.load.validate()
}

/// Runs the benchmark described by `args`.
pub fn run(args: BenchArgs) -> Result<()> {
    validate(&args)?;
    let load = &args.load;
    let json = args.json.as_deref().map(|p| AtomicFile::create(p, args.force, &[])).transpose()?;
    let csv = args.csv.as_deref().map(|p| AtomicFile::create(p, args.force, &[])).transpose()?;
    let (connect, read) = (Duration::from_secs_f64(load.connect_timeout), Duration::from_secs_f64(load.timeout));
    if let Some(url) = &args.url {
        Endpoint::parse(url, connect, read).map_err(InputError)?;
    }
    let server = match &args.url {
        Some(_) => None,
        None => Some(LocalServer::start(
            args.model.as_deref(),
            &args.serve_args,
            Duration::from_secs_f64(args.serve_timeout),
            load.quiet,
        )?),
    };
    let url = args.url.clone().or_else(|| server.as_ref().map(|s| s.url.clone())).expect("one of them");
    let report = measure(load, &url);
    let report = match (report, &server) {
        (Err(e), Some(s)) if !s.log_tail().is_empty() => {
            return Err(e.context(format!("server log:\n{}", s.log_tail())))
        }
        (r, _) => r?,
    };
    drop(server);
    if let Some(f) = json {
        files::write_json(&report, f)?;
    }
    if let Some(f) = csv {
        files::write_csv(&report, f)?;
    }
    if let Some(dir) = &args.plot {
        let written = charts::write_charts(std::slice::from_ref(&report), dir)?;
        if !load.quiet {
            eprintln!("tgi bench: {} charts in {}", written.len(), dir.display());
        }
    }
    let total: usize = report.runs.iter().map(|r| r.requests.len()).sum();
    let ok: u64 = report.runs.iter().map(|r| r.summary.requests_ok).sum();
    if ok == 0 {
        let first = report.runs.iter().flat_map(|r| &r.requests).find_map(|r| r.error.zip(r.error_message.clone()));
        let why = first.map_or(String::new(), |(k, m)| format!(": {} ({m})", k.name()));
        anyhow::bail!("all {total} requests failed{why}");
    }
    Ok(())
}
