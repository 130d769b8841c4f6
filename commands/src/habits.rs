//! Command lines written from llama.cpp and TGI launcher habits: llama.cpp's multi-letter short flags
//! (`-ngl 99`, `-np 4`) rewritten to their long names before parsing, and an unknown flag that means
//! something in llama.cpp or TGI answered with what to use here.

use std::ffi::{OsStr, OsString};

use clap::builder::StyledStr;
use clap::error::{ContextKind, ContextValue, ErrorKind};

/// llama.cpp's short flags of more than one letter, which clap cannot declare (it reads `-fa` as `-f -a`), and
/// their long names: tgi's where it has the setting, else llama.cpp's, which [`HINTS`] answers.
const MULTI_LETTER: [(&str, &str); 8] = [
    ("-ngl", "--n-gpu-layers"),
    ("-np", "--parallel"),
    ("-fa", "--flash-attn"),
    ("-cb", "--cont-batching"),
    ("-ub", "--ubatch-size"),
    ("-tb", "--threads-batch"),
    ("-hf", "--hf-repo"),
    ("-hff", "--hf-file"),
];

/// Flags of llama.cpp and TGI's launcher that mean something different here or nothing at all, with what to
/// use instead.
const HINTS: [(&[&str], &str); 14] = [
    (
        &["-c", "--ctx-size"],
        "the context is `tgi serve -c/--max-total-tokens` and `tgi perplexity -c/--ctx`; `tgi generate` sizes it to \
         the prompt plus -n, and `tgi bench -c` is its concurrency",
    ),
    (
        &["-b", "--batch-size", "--ubatch-size"],
        "prompt tokens per step are `tgi serve --max-batch-prefill-tokens` and `tgi generate --prefill-chunk`",
    ),
    (&["--flash-attn"], "tgi picks its attention kernels per device; there is no switch"),
    (&["--jinja"], "tgi always renders chat templates with Jinja (the model's, or --chat-template's); drop --jinja"),
    (&["--cont-batching"], "continuous batching is always on in `tgi serve`"),
    (&["--threads-batch"], "--threads sets every CPU thread"),
    (
        &["--repeat-penalty"],
        "--repetition-penalty (TGI's and transformers', over the whole prompt and output; llama.cpp's covers the \
         last 64 tokens)",
    ),
    (
        &["--hf-repo", "--hf-file"],
        "-m takes a hub id (org/name) of a transformers checkpoint; download a GGUF file first and give its path",
    ),
    (
        &["--n-gpu-layers"],
        "--n-gpu-layers belongs to serve, generate and perplexity; `tgi bench` passes it on with \
         --serve-arg=--n-gpu-layers=N",
    ),
    (&["--parallel"], "--parallel belongs to `tgi serve` (--max-batch-size); `tgi bench -c` sets concurrency"),
    (&["--json-output"], "--log-format json (TGI_LOG_FORMAT=json, or TGI's JSON_OUTPUT=true)"),
    (
        &["--num-shard", "--sharded"],
        "tgi runs one server per device; run several behind a router for more (see deploy/)",
    ),
    (
        &["--cuda-memory-fraction"],
        "the KV cache takes 90% of the GPU's free memory after loading; --max-batch-total-tokens sets it exactly",
    ),
    (&["--trust-remote-code"], "tgi runs no code from the hub; drop it"),
];

/// `argv` with llama.cpp's multi-letter short flags (`-ngl 99`, `-ngl=99`) under their long names; what follows a
/// `--` is left as it is.
pub fn normalize(argv: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut literal = false;
    for arg in argv {
        if literal || arg == "--" {
            literal = true;
            out.push(arg);
            continue;
        }
        out.push(rename(&arg).unwrap_or(arg));
    }
    out
}

/// The long form of a multi-letter short flag, with its `=VALUE` if any.
fn rename(arg: &OsStr) -> Option<OsString> {
    let text = arg.to_str()?;
    let (flag, value) = match text.split_once('=') {
        Some((f, v)) => (f, Some(v)),
        None => (text, None),
    };
    let (_, long) = MULTI_LETTER.iter().find(|(short, _)| *short == flag)?;
    Some(match value {
        Some(v) => format!("{long}={v}").into(),
        None => OsString::from(long),
    })
}

/// What to use here instead of `flag`, a llama.cpp or TGI launcher flag that means something else or nothing.
pub fn hint(flag: &str) -> Option<&'static str> {
    let flag = flag.split('=').next().unwrap_or(flag);
    HINTS.iter().find(|(flags, _)| flags.contains(&flag)).map(|(_, hint)| *hint)
}

/// `err` with a tip naming the equivalent when it is about an unknown llama.cpp or TGI launcher flag.
pub fn explain(mut err: clap::Error) -> clap::Error {
    if err.kind() != ErrorKind::UnknownArgument {
        return err;
    }
    let Some(ContextValue::String(flag)) = err.get(ContextKind::InvalidArg) else {
        return err;
    };
    if let Some(hint) = hint(flag) {
        let mut tips = match err.get(ContextKind::Suggested) {
            Some(ContextValue::StyledStrs(tips)) => tips.clone(),
            _ => Vec::new(),
        };
        tips.push(StyledStr::from(format!("coming from llama.cpp or TGI: {hint}")));
        err.insert(ContextKind::Suggested, ContextValue::StyledStrs(tips));
    }
    err
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    /// `tgi ARGS` parsed as the binary parses it.
    fn parse(args: &[&str]) -> Result<Cli, String> {
        let argv = normalize(std::iter::once("tgi").chain(args.iter().copied()).map(OsString::from));
        Cli::try_parse_from(argv).map_err(|e| explain(e).to_string())
    }

    #[test]
    fn multi_letter_short_flags_become_long_ones() {
        let argv = |v: &[&str]| normalize(v.iter().map(OsString::from));
        assert_eq!(
            argv(&["-ngl", "99", "-np=4", "--", "-ngl"]),
            argv(&["--n-gpu-layers", "99", "--parallel=4", "--", "-ngl"])
        );
        assert_eq!(argv(&["-n", "5"]), vec![OsString::from("-n"), OsString::from("5")]);
    }

    /// Each llama.cpp and TGI habit of issue 34 either means the same here, or its error names the equivalent.
    #[test]
    fn llama_cpp_and_tgi_habits_work_or_name_the_equivalent() {
        let serve = |args: &[&str]| match parse(&[&["serve"], args].concat()).unwrap().command {
            Command::Serve(a) => a,
            _ => unreachable!(),
        };
        let s =
            serve(&["-c", "2048", "--parallel", "4", "--host", "0.0.0.0", "--port", "8080", "--model-id", "m.gguf"]);
        assert_eq!((s.max_total_tokens, s.max_batch_size), (Some(2048), Some(4)));
        assert_eq!((s.hostname.as_str(), s.port, s.model.model.as_deref()), ("0.0.0.0", 8080, Some("m.gguf")));
        let s = serve(&["-ngl", "99", "-np", "2", "--ctx-size", "512"]);
        assert_eq!((s.model.n_gpu_layers, s.max_batch_size, s.max_total_tokens), (Some(99), Some(2), Some(512)));
        assert_eq!(serve(&["--gpu-layers", "-1"]).model.n_gpu_layers, Some(-1));
        assert!(parse(&["serve", "--quantize", "Q4_K_M"]).is_ok());
        assert!(parse(&["serve", "--quantize", "bitsandbytes-nf4"]).is_ok());

        match parse(&["generate", "-p", "Once", "-n", "8", "--temp", "0", "-s", "1"]).unwrap().command {
            Command::Generate(g) => {
                assert_eq!((g.prompt_text.as_deref(), g.max_new_tokens, g.temperature), (Some("Once"), 8, 0.0));
                assert_eq!(g.seed, Some(1));
            }
            _ => unreachable!(),
        }
        assert!(
            matches!(parse(&["generate", "-f", "prompt.txt"]).unwrap().command, Command::Generate(g) if g.file.is_some())
        );
        match parse(&["generate", "--temperature", "-1", "--presence-penalty", "-0.5", "hi"]).unwrap().command {
            Command::Generate(g) => {
                assert_eq!(g.temperature, -1.0, "a negative number is a value, refused with the range later");
                assert_eq!(g.presence_penalty, -0.5);
            }
            _ => unreachable!(),
        }
        assert!(matches!(parse(&["perplexity", "-f", "wiki.raw", "-c", "128"]).unwrap().command,
            Command::Perplexity(p) if p.file_flag.is_some() && p.ctx == Some(128)));
        assert!(parse(&["bench", "-p", "512", "-n", "128"]).is_ok());
        assert!(parse(&["quantize", "in.gguf", "out.gguf", "Q8_0"]).is_ok());
        assert!(parse(&["quantize", "in.gguf", "--type", "Q4_K"]).is_ok());

        for (args, needle) in [
            (&["quantize", "in.gguf", "-t", "8"][..], "--threads 8"),
            (&["generate", "-c", "2048", "hi"], "-c/--max-total-tokens"),
            (&["serve", "--jinja"], "always renders chat templates"),
            (&["serve", "-fa"], "no switch"),
            (&["serve", "-b", "512"], "--max-batch-prefill-tokens"),
            (&["serve", "--json-output"], "--log-format json"),
            (&["serve", "--num-shard", "2"], "one server per device"),
            (&["generate", "--repeat-penalty", "1.1", "hi"], "--repetition-penalty"),
            (&["bench", "-ngl", "99"], "--serve-arg=--n-gpu-layers"),
            (&["bench", "-np", "4"], "tgi bench -c"),
        ] {
            let e = parse(args).map(|_| ()).unwrap_err();
            assert!(e.contains(needle), "{args:?}: {e}");
        }
    }
}
