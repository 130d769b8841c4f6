//! GGUF files of llama.cpp's i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M; made by
//! llama-quantize, committed under tests/reference/iq/) load and run: perplexity within 0.5% of
//! llama-perplexity's, the scalar kernels agreeing with the fastest level, greedy generation; `tgi quantize`
//! refuses to write IQ1_M.

mod common;

use std::path::{Path, PathBuf};

use common::{assert_fails, assert_ok, model, root, tgi};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    root().join("tests/reference/iq").join(name)
}

/// `tgi perplexity --ctx 128 --chunks N` on the held-out text (32 chunks: llama-perplexity's arguments in
/// perplexity.json) with extra flags.
fn perplexity(file: &Path, chunks: &str, extra: &[&str]) -> f64 {
    let text = root().join("models/stories-distill-4l/text/heldout.txt");
    let mut args: Vec<&std::ffi::OsStr> = vec!["perplexity".as_ref(), "-m".as_ref(), file.as_os_str()];
    args.extend(["--ctx", "128", "--chunks", chunks, "--json"].map(std::ffi::OsStr::new));
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    args.push(text.as_os_str());
    serde_json::from_str::<Value>(&assert_ok(&tgi(args))).unwrap()["perplexity"].as_f64().unwrap()
}

#[test]
fn iquant_perplexity_matches_llama_cpp() {
    let r: Value = serde_json::from_str(&std::fs::read_to_string(fixture("perplexity.json")).unwrap()).unwrap();
    let mut rows = Vec::new();
    for (name, want) in r["files"].as_object().unwrap() {
        let want = want["ppl"].as_f64().unwrap();
        let ppl = perplexity(&fixture(name), "32", &[]);
        rows.push(format!("{name}: tgi {ppl:.4} llama.cpp {want:.4}"));
        assert!((ppl / want - 1.0).abs() < 0.005, "{}", rows.join("\n"));
    }
    eprintln!("{}", rows.join("\n"));
}

#[test]
fn iquant_scalar_kernels_agree_with_the_fastest_level() {
    let file = fixture("mix.gguf");
    let fast = perplexity(&file, "4", &[]);
    let scalar = perplexity(&file, "4", &["--cpu-kernels", "scalar"]);
    assert!((fast / scalar - 1.0).abs() < 0.002, "default {fast} scalar {scalar}");
}

#[test]
fn iquant_generates() {
    let out = assert_ok(&tgi([
        "generate".as_ref(),
        "-m".as_ref(),
        fixture("iq2_m.gguf").as_os_str(),
        "--temperature".as_ref(),
        "0".as_ref(),
        "-n".as_ref(),
        "16".as_ref(),
        "--json".as_ref(),
        "--ignore-eos".as_ref(),
        "Once upon a time".as_ref(),
    ]));
    let g: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(g["generated_token_ids"].as_array().unwrap().len(), 16);
    assert!(!g["text"].as_str().unwrap().trim().is_empty());
}

#[test]
fn quantize_refuses_to_write_iquants() {
    let hf = model("stories-distill-4l/hf");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.gguf");
    for flag in ["--output-tensor-type", "--token-embedding-type"] {
        let args = ["quantize".as_ref(), hf.as_os_str(), "--type".as_ref(), "q4_0".as_ref(), flag.as_ref()];
        let tail = ["iq1_m".as_ref(), "-o".as_ref(), out.as_os_str()];
        assert_fails(&tgi(args.iter().chain(&tail)), 2, "tgi cannot encode iq1_m yet");
    }
    let args = ["quantize".as_ref(), hf.as_os_str(), "--type".as_ref(), "q4_0".as_ref(), "--tensor-type".as_ref()];
    let tail = ["attn_q=iq1_m".as_ref(), "-o".as_ref(), out.as_os_str()];
    assert_fails(&tgi(args.iter().chain(&tail)), 2, "tgi cannot encode iq1_m yet");
    let args = ["quantize".as_ref(), hf.as_os_str(), "--type".as_ref(), "iq1_m".as_ref(), "-o".as_ref()];
    assert_fails(&tgi(args.iter().chain([&out.as_os_str()])), 2, "tgi does not write it");
    assert!(!out.exists());
}
