//! `tgi bench compare A.json B.json`: two (or more) saved runs side by side, as a table and charts.

use std::path::PathBuf;

/// Arguments of `tgi bench compare`.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// Reports written by `tgi bench --json` (two or more).
    #[arg(required = true, num_args = 2..)]
    pub reports: Vec<PathBuf>,
    /// Directory to draw the comparison charts into (PNG and SVG).
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
}

/// Runs `tgi bench compare`.
pub fn run(args: CompareArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("compare: to be written")
}
