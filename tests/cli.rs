//! The CLI surface: help, completions, JSON summaries.

mod common;

use common::{assert_ok, model, tgi};

#[test]
fn help_and_completions() {
    for args in [vec!["--help"], vec!["quantize", "--help"], vec!["completions", "--help"]] {
        let out = assert_ok(&tgi(&args));
        assert!(out.contains("Usage"), "{args:?}: {out}");
    }
    let quantize_help = assert_ok(&tgi(["quantize", "--help"]));
    for flag in ["--type", "--output-tensor-type", "--token-embedding-type", "--tensor-type", "--json", "--force"] {
        assert!(quantize_help.contains(flag), "{flag} missing from help");
    }
    assert!(quantize_help.contains("q4_k_m") && quantize_help.contains("q2_k"));
    for shell in ["bash", "zsh", "fish"] {
        let out = assert_ok(&tgi(["completions", shell]));
        assert!(out.contains("quantize"), "{shell}");
    }
    assert_eq!(tgi(["completions", "tcsh"]).status.code(), Some(2));
}

#[test]
fn json_summary_describes_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("q.gguf");
    let out = tgi([
        "quantize".as_ref(),
        model("stories-distill-4l/hf").as_os_str(),
        "--type".as_ref(),
        "q4_k_m".as_ref(),
        "--tensor-type".as_ref(),
        "ffn_up=q8_0".as_ref(),
        "-o".as_ref(),
        target.as_os_str(),
        "--json".as_ref(),
    ]);
    let v: serde_json::Value = serde_json::from_str(&assert_ok(&out)).unwrap();
    assert_eq!(v["preset"], "q4_k_m");
    assert_eq!(v["tensors"], 39);
    assert_eq!(v["output_bytes"].as_u64(), Some(std::fs::metadata(&target).unwrap().len()));
    let types: Vec<&str> = v["by_type"].as_array().unwrap().iter().map(|t| t["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["f32", "q4_K", "q6_K", "q8_0"]);
    let up = v["per_tensor"].as_array().unwrap().iter().find(|t| t["name"] == "blk.0.ffn_up.weight").unwrap();
    assert_eq!(up["type"], "q8_0");
    let bpw = v["bits_per_weight"].as_f64().unwrap();
    assert!(bpw > 4.5 && bpw < 6.0, "{bpw}");
    let mean = v["mean_relative_rmse"].as_f64().unwrap();
    assert!(mean > 0.005 && mean < 0.12, "{mean}");
}

/// A shell-like split: words, with '...' and "..." quoting and \-escapes in double quotes and outside quotes.
fn shell_words(line: &str) -> Vec<String> {
    let (mut words, mut word, mut any) = (Vec::new(), String::new(), false);
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' if any => {
                words.push(std::mem::take(&mut word));
                any = false;
            }
            ' ' | '\t' => {}
            '\'' => {
                any = true;
                word.extend(chars.by_ref().take_while(|&c| c != '\''));
            }
            '"' => {
                any = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                any = true;
                word.extend(chars.next());
            }
            c => {
                any = true;
                word.push(c);
            }
        }
    }
    if any {
        words.push(word);
    }
    words
}

/// The examples of `tgi SUB --help` at 80 columns: each command with its `\` continuations joined; panics on a
/// line that starts no command (an example wrapped mid-argument).
fn help_examples(sub: &str) -> Vec<String> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tgi")).args([sub, "--help"]).env("COLUMNS", "80").output();
    let help = String::from_utf8(out.unwrap().stdout).unwrap();
    let block = help.split("\nExamples:\n").nth(1).unwrap_or_else(|| panic!("tgi {sub} --help has no examples"));
    let mut commands: Vec<String> = Vec::new();
    let mut continued = false;
    for line in block.lines().take_while(|l| !l.trim().is_empty()) {
        let text = line.trim();
        if continued {
            commands.last_mut().unwrap().push_str(text);
        } else {
            let starts = ["tgi ", "curl ", "echo ", "TGI_"].iter().any(|p| text.starts_with(p)) || text == "tgi";
            assert!(starts, "tgi {sub} --help: an example line starts no command (wrapped?): {line:?}\n{help}");
            commands.push(text.to_string());
        }
        continued = text.ends_with('\\');
        if continued {
            let c = commands.last_mut().unwrap();
            c.pop();
        }
    }
    commands
}

/// The help's examples copy-paste and run: none is wrapped mid-argument at 80 columns, each `tgi` command in
/// them parses as the binary parses it, and those that need no server, network or placeholder file run
/// (from a directory where `models/` is the repository's).
#[test]
fn help_examples_copy_paste_and_run() {
    use clap::Parser;
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(common::root().join("models"), dir.path().join("models")).unwrap();
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_tgi")).parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut ran = 0;
    for sub in ["quantize", "generate", "perplexity", "serve", "bench", "tune"] {
        for example in help_examples(sub) {
            let words = shell_words(&example);
            let tgi_words: Vec<&[String]> = words
                .split(|w| w == "|")
                .filter_map(|segment| {
                    let start = segment.iter().position(|w| w == "tgi")?;
                    segment[..start].iter().all(|w| w.contains('=')).then(|| &segment[start..])
                })
                .collect();
            if !example.starts_with("curl ") {
                assert_eq!(tgi_words.len(), 1, "{example}");
            }
            for argv in &tgi_words {
                let argv = tgi_commands::habits::normalize(argv.iter().map(std::ffi::OsString::from));
                if let Err(e) = tgi_commands::Cli::try_parse_from(&argv) {
                    panic!("`{example}` does not parse: {e}");
                }
            }
            // Run what needs no server, network or placeholder file (nor minutes: AWQ's calibration).
            let outputs = ["-o", "--out", "--json", "--plot"];
            let placeholder = words.iter().enumerate().any(|(i, w)| {
                let file_like = w.contains('/')
                    || [".gguf", ".raw", ".kld", ".jsonl", ".toml", ".txt"].iter().any(|e| w.ends_with(e));
                file_like && !(i > 0 && outputs.contains(&words[i - 1].as_str())) && !dir.path().join(w).exists()
            });
            let sub = tgi_words.first().and_then(|w| w.get(1)).map_or("", String::as_str);
            let runs_here = ["generate", "perplexity", "quantize", "tune"].contains(&sub);
            let slow = example.contains("--format awq") && !example.contains("rtn");
            if example.starts_with("curl ") || !runs_here || placeholder || slow {
                continue;
            }
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(&example)
                .current_dir(dir.path())
                .env("PATH", &path)
                .output()
                .unwrap();
            assert!(out.status.success(), "`{example}` failed: {}", String::from_utf8_lossy(&out.stderr));
            ran += 1;
        }
    }
    assert!(ran >= 10, "only {ran} examples ran");
    // The default output name is the model's (models/stories-distill-4l/hf), not its folder's.
    assert!(dir.path().join("stories-distill-4l-Q4_K_M.gguf").is_file());
}
