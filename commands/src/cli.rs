//! The command-line interface: the top-level parser and its subcommands. The man pages in
//! `man/` are generated from these same definitions.

use clap::{Parser, Subcommand};

/// From checkpoint to fast, measured LLM service, in one binary.
#[derive(Debug, Parser)]
#[command(name = "tgi", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// The subcommand to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Convert a Hugging Face checkpoint or a GGUF file into a quantized GGUF file, or a checkpoint into bitsandbytes NF4/FP4 or AWQ.
    Quantize(crate::quantize::QuantizeArgs),
    /// Generate text from a prompt, streaming it as it is produced.
    Generate(crate::generate::GenerateArgs),
    /// Measure a model's perplexity on a text file, as llama-perplexity does.
    Perplexity(crate::perplexity::PerplexityArgs),
    /// Compute a model's importance matrix over a text, as llama-imatrix does, for quantize --imatrix.
    Imatrix(crate::imatrix::ImatrixArgs),
    /// Serve a model over HTTP: TGI's API, OpenAI's (chat, completions, Responses) and Anthropic's Messages, with
    /// continuous batching.
    Serve(crate::serve::ServeArgs),
    /// Benchmark an LLM server (TGI-, OpenAI- or Anthropic-compatible, or a model served in-process): TTFT, ITL,
    /// TPOT, E2E latency and throughput per load level; `tgi bench compare` sets saved runs side by side.
    Bench(crate::bench::BenchCommand),
    /// Sweep serving parameters for a hardware profile (each configuration served and measured), rank them against
    /// the profile's SLOs and write the best as a `tgi serve --config` file.
    Tune(crate::tune::TuneArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(CompletionsArgs),
}

/// Arguments of `tgi completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to generate completions for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// The clap command tree, for help, completions and man pages.
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// Renders the man pages: `tgi.1` and one `tgi-<sub>.1` per subcommand, as (file name, roff).
pub fn man_pages() -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let mut cmd = command();
    cmd.build();
    let mut pages = Vec::new();
    let mut top = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut top)?;
    pages.push(("tgi.1".to_string(), top));
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = format!("tgi-{}", sub.get_name());
        let sub = sub.clone().name(name.clone());
        let mut buf = Vec::new();
        clap_mangen::Man::new(sub).render(&mut buf)?;
        pages.push((format!("{name}.1"), buf));
    }
    Ok(pages)
}

/// Writes the completion script for `shell` to `out`.
pub fn completions(shell: clap_complete::Shell, out: &mut dyn std::io::Write) {
    clap_complete::generate(shell, &mut command(), "tgi", out);
}

#[cfg(test)]
mod tests {
    #[test]
    fn cli_is_consistent() {
        super::command().debug_assert();
    }
}
