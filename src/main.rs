//! The `tgi` binary: parses the command line, dispatches, and maps errors to exit codes
//! (0 success, 1 failure, 2 bad input or usage).

use std::ffi::OsString;

use clap::Parser;
use tgi_commands::serve::ServeSettings;
use tgi_commands::{cli, exit_code, Cli, Command};

fn main() {
    // llama.cpp's `-ngl 99` and `-np 4` under their long names; unknown llama.cpp and TGI flags get a pointer.
    let argv: Vec<OsString> = tgi_commands::habits::normalize(std::env::args_os());
    let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| tgi_commands::habits::explain(e).exit());
    // `serve` handles SIGTERM/SIGINT itself (it drains requests in flight); the other commands
    // remove their temporary files and exit 130.
    if !matches!(cli.command, Command::Serve(_)) {
        tgi_commands::output::install_interrupt_cleanup();
    }
    let result = match cli.command {
        Command::Quantize(args) => tgi_commands::quantize::run(args),
        Command::Generate(args) => tgi_commands::generate::run(args),
        Command::Perplexity(args) => tgi_commands::perplexity::run(args),
        Command::Imatrix(args) => tgi_commands::imatrix::run(args),
        Command::Serve(args) => ServeSettings::resolve(args, &argv).and_then(|settings| {
            let rust_log = std::env::var("RUST_LOG").ok();
            tgi_commands::serve::run(settings, rust_log.as_deref())
        }),
        Command::Bench(args) => tgi_commands::bench::run(args),
        Command::Tune(args) => tgi_commands::tune::run(args),
        Command::Completions(args) => {
            cli::completions(args.shell, &mut std::io::stdout());
            Ok(())
        }
    };
    if let Err(err) = result {
        eprintln!("error: {err:#}");
        std::process::exit(exit_code(&err));
    }
}
