//! `tgi bench`: loads an LLM server (TGI- or OpenAI-compatible) with streaming requests and
//! measures TTFT, inter-token latency, TPOT and end-to-end latency per load level; prints a table,
//! writes JSON/CSV and draws charts. `tgi bench compare A.json B.json` sets two runs side by side.

pub mod args;
pub mod charts;
pub mod compare;
pub mod files;
pub mod runner;

pub use args::BenchArgs;

/// `tgi bench` and its subcommand.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchCommand {
    /// `compare`, or none to run a benchmark.
    #[command(subcommand)]
    pub sub: Option<BenchSub>,
    /// The benchmark's flags.
    #[command(flatten)]
    pub run: BenchArgs,
}

/// The subcommands of `tgi bench`.
#[derive(Debug, clap::Subcommand)]
pub enum BenchSub {
    /// Compare saved runs (`tgi bench --json`) side by side, as a table and charts.
    Compare(compare::CompareArgs),
}

/// Runs `tgi bench` or `tgi bench compare`.
pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd.sub {
        Some(BenchSub::Compare(args)) => compare::run(args),
        None => runner::run(cmd.run),
    }
}
