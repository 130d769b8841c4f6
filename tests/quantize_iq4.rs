//! IQ4_NL and IQ4_XS end to end against llama.cpp (references recorded by tests/reference/make_iq4_quant_refs.py):
//! `tgi quantize` writes llama-quantize's tensors byte for byte, with the same file type, with and without the
//! committed importance matrix of stories-distill-4l, and whole files for stories260k (whose 64-wide rows make
//! IQ4_XS fall back to IQ4_NL and its 172-wide `ffn_down` to F16); `tgi perplexity` on the IQ4_XS files is
//! llama-perplexity's. (From the converter's `stories-distill-4l-f32.gguf`, which the repository does not carry,
//! the four stories-distill-4l files are whole-file identical too: `input_sha256` says which input that is.)

mod common;

use std::path::{Path, PathBuf};

use common::gguf_refs::compare;
use common::{assert_ok, model, root, tgi};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tgi_formats::gguf::GgufFile;

fn reference() -> Value {
    let path = root().join("tests/reference/llamacpp_iq4_quant.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `tgi quantize INPUT --type TY [ARGS] -o OUT`, run from the repository root (so that the matrix path stored in
/// `quantize.imatrix.file` is the relative one llama-quantize was given).
fn quantize(input: &Path, ty: &str, args: &[&str], out: &Path) {
    let mut all: Vec<&std::ffi::OsStr> = vec!["quantize".as_ref(), input.as_os_str(), "--type".as_ref(), ty.as_ref()];
    all.extend(args.iter().map(std::ffi::OsStr::new));
    all.extend(["-o".as_ref(), out.as_os_str(), "--force".as_ref(), "--json".as_ref()]);
    assert_ok(&tgi(all));
}

/// stories-distill-4l in F32: tgi's conversion of the checkpoint, tensor for tensor the converter's file
/// (`quantize_exact.rs`), its metadata not byte for byte.
fn distill_f32(dir: &Path) -> PathBuf {
    let out = dir.join("stories-distill-4l-f32.gguf");
    quantize(&model("stories-distill-4l/hf"), "f32", &[], &out);
    out
}

fn sha256(path: &Path) -> String {
    format!("{:x}", Sha256::digest(std::fs::read(path).unwrap()))
}

#[test]
fn iq4_files_equal_llama_quantize() {
    let refs = reference();
    let dir = tempfile::tempdir().unwrap();
    let distill = distill_f32(dir.path());
    let mut failures = Vec::new();
    for (name, want) in refs["runs"].as_object().unwrap() {
        let input = match want["model"].as_str().unwrap() {
            "stories-distill-4l" => distill.clone(),
            _ => model("stories260k/stories260k-f32.gguf"),
        };
        let args: Vec<&str> = want["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
        let out = dir.path().join(format!("{}.gguf", name.replace('+', "-")));
        quantize(&input, want["llama_quantize_type"].as_str().unwrap(), &args, &out);
        failures.extend(compare(&out, want).into_iter().map(|m| format!("{name}: {m}")));
        let ft = GgufFile::open(&out).unwrap().get("general.file_type").and_then(|v| v.as_u64());
        if ft != want["file_type"].as_u64() {
            failures.push(format!("{name}: general.file_type {ft:?}, llama.cpp {}", want["file_type"]));
        }
        // The whole file, header included, where the input is llama-quantize's own.
        if sha256(&input) == want["input_sha256"].as_str().unwrap() && sha256(&out) != want["file_sha256"] {
            failures.push(format!("{name}: the file differs from llama-quantize's"));
        }
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn iq4_xs_perplexity_matches_llama_perplexity() {
    // Same tolerance as the other presets' (tests/generate.rs): 0.5% relative.
    let refs = reference();
    let ppl = &refs["perplexity"];
    let text = root().join(ppl["text"].as_str().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let distill = distill_f32(dir.path());
    let mut rows = Vec::new();
    for name in ["stories-distill-4l+iq4_xs", "stories-distill-4l+iq4_xs+imatrix"] {
        let run = &refs["runs"][name];
        let args: Vec<&str> = run["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
        let out = dir.path().join(format!("{}.gguf", name.replace('+', "-")));
        quantize(&distill, "iq4_xs", &args, &out);
        let o = assert_ok(&tgi([
            "perplexity".as_ref(),
            "-m".as_ref(),
            out.as_os_str(),
            "--ctx".as_ref(),
            "128".as_ref(),
            "--chunks".as_ref(),
            "32".as_ref(),
            "--json".as_ref(),
            text.as_os_str(),
        ]));
        let got = serde_json::from_str::<Value>(&o).unwrap()["perplexity"].as_f64().unwrap();
        let want = run["perplexity"]["ppl"].as_f64().unwrap();
        rows.push(format!("{name}: tgi {got:.4} llama.cpp {want:.4}"));
        assert!((got / want - 1.0).abs() < 0.005, "{}", rows.join("\n"));
    }
    eprintln!("{}", rows.join("\n"));
}
