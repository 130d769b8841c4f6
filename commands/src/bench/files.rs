//! The report files: `--json` (the whole [`BenchReport`]) and `--csv` (one row per request), written atomically.

use std::io::Write;

use anyhow::Result;

use crate::loadgen::report::{BenchReport, RunReport};
use crate::output::{finish_writer, AtomicFile};

/// Writes `report` as pretty JSON into `f` (created before the run, so a bad path fails early).
pub fn write_json(report: &BenchReport, f: AtomicFile) -> Result<()> {
    let mut w = f.writer()?;
    serde_json::to_writer_pretty(&mut w, report)?;
    w.write_all(b"\n")?;
    finish_writer(w)?;
    f.commit()
}

/// The CSV columns.
const HEADER: &str = "concurrency,rate,id,scheduled_s,queue_ms,ttft_ms,tpot_ms,e2e_ms,input_tokens,output_tokens,\
itl_ms,error,error_message";

/// Writes every request of every level as CSV into `f` (ITLs space-separated in one column).
pub fn write_csv(report: &BenchReport, f: AtomicFile) -> Result<()> {
    let mut w = f.writer()?;
    writeln!(w, "{HEADER}")?;
    for run in &report.runs {
        for line in csv_rows(run) {
            writeln!(w, "{line}")?;
        }
    }
    finish_writer(w)?;
    f.commit()
}

fn csv_rows(run: &RunReport) -> Vec<String> {
    let opt = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.3}"));
    run.requests
        .iter()
        .map(|r| {
            let itl: Vec<String> = r.itl_ms.iter().map(|x| format!("{x:.3}")).collect();
            [
                run.concurrency.map_or(String::new(), |c| c.to_string()),
                run.rate.map_or(String::new(), |x| format!("{x}")),
                r.id.to_string(),
                format!("{:.6}", r.scheduled_s),
                format!("{:.3}", r.queue_ms),
                opt(r.ttft_ms),
                opt(r.tpot_ms()),
                opt(r.e2e_ms),
                r.input_tokens.map_or(String::new(), |n| n.to_string()),
                r.output_tokens.to_string(),
                itl.join(" "),
                r.error.map_or(String::new(), |e| e.name().to_string()),
                quote(r.error_message.as_deref().unwrap_or("")),
            ]
            .join(",")
        })
        .collect()
}

/// A CSV field, quoted when it holds a comma, quote or line break.
fn quote(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_fields() {
        assert_eq!(quote("plain"), "plain");
        assert_eq!(quote("a, \"b\""), "\"a, \"\"b\"\"\"");
    }
}
