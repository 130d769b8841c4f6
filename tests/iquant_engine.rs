//! GGUF files of llama.cpp's i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M; made by
//! llama-quantize, committed under tests/reference/iq/) load and run: perplexity within 0.5% of
//! llama-perplexity's, the scalar kernels agreeing with the fastest level, greedy generation; `tgi quantize`
//! writes IQ1_M output and token embeddings without a matrix, as llama-quantize does, and refuses other IQ1_M
//! tensors without one.

mod common;

use std::path::{Path, PathBuf};

use common::gguf_refs::tensor_hashes;
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
fn quantize_writes_iq1_m_where_llama_quantize_needs_no_matrix() {
    // llama-quantize asks for a matrix for IQ1_M tensors except token_embd and output (ggml then weighs by x²).
    let hf = model("stories-distill-4l/hf");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.gguf");
    let args = ["quantize".as_ref(), hf.as_os_str(), "--type".as_ref(), "q4_0".as_ref()];
    let tail = ["--output-tensor-type", "iq1_m", "--token-embedding-type", "iq1_m", "-o"].map(std::ffi::OsStr::new);
    assert_ok(&tgi(args.iter().chain(&tail).chain([&out.as_os_str()])));
    let types = tensor_hashes(&out);
    assert_eq!(types["output.weight"].0, "IQ1_M");
    assert_eq!(types["token_embd.weight"].0, "IQ1_M");
    assert!(perplexity(&out, "2", &[]).is_finite());
    std::fs::remove_file(&out).unwrap();
    let tail = ["--tensor-type", "attn_q=iq1_m", "-o"].map(std::ffi::OsStr::new);
    let o = tgi(args.iter().chain(&tail).chain([&out.as_os_str()]));
    assert_fails(&o, 2, "llama-quantize writes iq1_m only with an importance matrix; pass --imatrix");
    assert!(!out.exists());
}
