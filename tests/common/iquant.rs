//! The i-quant end-to-end checks against llama.cpp (references recorded by
//! tests/reference/make_iq4_quant_refs.py): `tgi quantize` writes llama-quantize's tensors byte for byte, with
//! the same file type, and `tgi perplexity` on its files is llama-perplexity's.

use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};
use tgi_formats::gguf::GgufFile;

use super::gguf_refs::compare;
use super::{assert_ok, model, perplexity_128x32, root, tgi};

/// tests/reference/llamacpp_`family`_quant.json.
pub fn reference(family: &str) -> Value {
    let path = root().join(format!("tests/reference/llamacpp_{family}_quant.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `tgi quantize INPUT --type TY [ARGS] -o OUT`, run from the repository root (so that the matrix path stored in
/// `quantize.imatrix.file` is the relative one llama-quantize was given).
pub fn quantize(input: &Path, ty: &str, args: &[&str], out: &Path) {
    assert_ok(&tgi(quantize_args(input, ty, args, out)));
}

/// The arguments of [`quantize`].
pub fn quantize_args<'a>(input: &'a Path, ty: &'a str, args: &'a [&'a str], out: &'a Path) -> Vec<&'a std::ffi::OsStr> {
    let mut all: Vec<&std::ffi::OsStr> = vec!["quantize".as_ref(), input.as_os_str(), "--type".as_ref(), ty.as_ref()];
    all.extend(args.iter().map(std::ffi::OsStr::new));
    all.extend(["-o".as_ref(), out.as_os_str(), "--force".as_ref(), "--json".as_ref()]);
    all
}

/// stories-distill-4l in F32: tgi's conversion of the checkpoint, tensor for tensor the converter's file
/// (`quantize_exact.rs`), its metadata not byte for byte.
pub fn distill_f32(dir: &Path) -> PathBuf {
    let out = dir.join("stories-distill-4l-f32.gguf");
    quantize(&model("stories-distill-4l/hf"), "f32", &[], &out);
    out
}

fn sha256(path: &Path) -> String {
    format!("{:x}", Sha256::digest(std::fs::read(path).unwrap()))
}

/// The recorded `args` of a run.
pub fn run_args(run: &Value) -> Vec<&str> {
    run["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect()
}

/// Quantizes the input of every run of a llama-quantize type in `types` that llama-quantize completed as it did;
/// returns the mismatches with its file.
pub fn files_mismatches(refs: &Value, types: &[&str], distill: &Path, dir: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    for (name, want) in refs["runs"].as_object().unwrap() {
        if want.get("error").is_some() || !types.contains(&want["llama_quantize_type"].as_str().unwrap()) {
            continue;
        }
        let input = match want["model"].as_str().unwrap() {
            "stories-distill-4l" => distill.to_path_buf(),
            _ => model("stories260k/stories260k-f32.gguf"),
        };
        let out = dir.join(format!("{}.gguf", name.replace('+', "-")));
        quantize(&input, want["llama_quantize_type"].as_str().unwrap(), &run_args(want), &out);
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
    failures
}

/// `tgi perplexity` on tgi's files of the runs `names` (stories-distill-4l as type `ty`) within 0.5% of
/// llama-perplexity's (the other presets' tolerance, tests/generate.rs).
pub fn check_perplexity(refs: &Value, ty: &str, names: &[&str]) {
    let text = root().join(refs["perplexity"]["text"].as_str().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let distill = distill_f32(dir.path());
    let mut rows = Vec::new();
    for name in names {
        let run = &refs["runs"][name];
        let out = dir.path().join(format!("{}.gguf", name.replace('+', "-")));
        quantize(&distill, ty, &run_args(run), &out);
        let got = perplexity_128x32(&out, &text);
        let want = run["perplexity"]["ppl"].as_f64().unwrap();
        rows.push(format!("{name}: tgi {got:.4} llama.cpp {want:.4}"));
        assert!((got / want - 1.0).abs() < 0.005, "{}", rows.join("\n"));
    }
    eprintln!("{}", rows.join("\n"));
}
