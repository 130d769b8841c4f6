//! `tgi quantize` output against llama.cpp: every tensor's bytes equal what llama.cpp's
//! converter and `llama-quantize` wrote for the same model (hashes recorded by
//! tests/reference/make_llamacpp_refs.py), and gguf-py agrees with the container and the
//! legacy quantizers.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::gguf_refs::{compare, tensor_hashes};
use common::{model, quantize, root};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tgi_formats::gguf::GgufFile;

fn reference() -> Value {
    let path = root().join("tests/reference/llamacpp_quant.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Checks every preset of one model; with `whole_file`, the files must be identical too
/// (re-quantizing a GGUF keeps its metadata, so llama-quantize's file is reproducible).
fn check_model(input: PathBuf, key: &str, whole_file: bool) {
    let refs = reference();
    let presets = refs["models"][key]["presets"].as_object().expect("presets in reference");
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (preset, want) in presets {
        if want.get("error").is_some() {
            continue;
        }
        let out = dir.path().join(format!("{preset}.gguf"));
        let summary = quantize(&input, preset, &out);
        assert_eq!(summary["preset"], preset.as_str());
        let file = GgufFile::open(&out).unwrap();
        let ft = file.get("general.file_type").and_then(|v| v.as_u64());
        if ft != want["file_type"].as_u64() {
            failures.push(format!("{preset}: general.file_type {ft:?}, llama.cpp {}", want["file_type"]));
        }
        failures.extend(compare(&out, want).into_iter().map(|m| format!("{preset}: {m}")));
        if whole_file {
            let hash = format!("{:x}", Sha256::digest(std::fs::read(&out).unwrap()));
            if hash != want["file_sha256"].as_str().unwrap() {
                failures.push(format!("{preset}: the file differs from llama-quantize's"));
            }
        }
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn hf_to_f32_equals_llama_cpp_converter() {
    // Naming and the Q/K permutation: our F32 conversion of the HF checkpoint is the
    // converter's F32 GGUF, tensor for tensor.
    let refs = reference();
    let want = &refs["models"]["stories-distill-4l"]["input_f32"];
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("f32.gguf");
    quantize(&model("stories-distill-4l/hf"), "f32", &out);
    let bad = compare(&out, want);
    assert!(bad.is_empty(), "{bad:?}");
}

#[test]
fn every_preset_matches_llama_quantize_from_hf() {
    check_model(model("stories-distill-4l/hf"), "stories-distill-4l", false);
}

#[test]
fn every_preset_matches_llama_quantize_from_gguf_with_fallbacks() {
    // stories260k: 64-wide rows, so the k-quant presets exercise llama.cpp's fall-backs.
    check_model(model("stories260k/stories260k-f32.gguf"), "stories260k", true);
}

#[test]
fn gguf_py_agrees() {
    if std::env::var_os("TGI_SKIP_PYTHON").is_some() {
        eprintln!("TGI_SKIP_PYTHON set: skipping the gguf-py checks");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let f32 = dir.path().join("f32.gguf");
    quantize(&model("stories-distill-4l/hf"), "f32", &f32);
    for preset in ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k_m", "q5_k_s", "q6_k", "q2_k", "q3_k_m", "f16", "bf16"]
    {
        let out = dir.path().join(format!("{preset}.gguf"));
        let summary = quantize(&model("stories-distill-4l/hf"), preset, &out);
        let summary_path = dir.path().join(format!("{preset}.json"));
        std::fs::write(&summary_path, summary.to_string()).unwrap();
        let status = Command::new("python3")
            .arg(root().join("tests/python/check_gguf.py"))
            .arg("--f32")
            .arg(&f32)
            .arg("--quant")
            .arg(&out)
            .arg("--summary")
            .arg(&summary_path)
            .status()
            .expect("python3 (install tests/python/requirements.txt, or set TGI_SKIP_PYTHON=1)");
        assert!(status.success(), "gguf-py check failed for {preset}");
    }
}

/// `tgi quantize` from an already quantized GGUF: refused without --allow-requantize (naming the flag); with it,
/// tensors already of their target type are copied and the others decoded and encoded again. gguf-py checks both
/// steps: its quantizers give our Q8_0 bytes from our decoded values (so the decoding is ggml's), and our Q4_0
/// bytes from the same values.
#[test]
fn requantizing_needs_the_flag_and_decodes_as_ggml() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    quantize(&model("stories-distill-4l/hf"), "q8_0", &path("q8_0.gguf"));
    let input = path("q8_0.gguf");
    let requantize = |preset: &str, out: &Path, flag: bool| {
        let mut args: Vec<&std::ffi::OsStr> = vec!["quantize".as_ref(), input.as_os_str()];
        args.extend(["--type".as_ref(), preset.as_ref(), "-o".as_ref(), out.as_os_str()]);
        if flag {
            args.push("--allow-requantize".as_ref());
        }
        common::tgi(args)
    };
    let refused = requantize("q4_0", &path("refused.gguf"), false);
    common::assert_fails(&refused, 2, "--allow-requantize");
    assert!(!path("refused.gguf").exists(), "no output is left behind");

    let q4 = requantize("q4_0", &path("q4_0.gguf"), true);
    let stderr = String::from_utf8_lossy(&q4.stderr);
    assert!(q4.status.success() && stderr.contains("warning: requantizing"), "{stderr}");
    let decoded = requantize("f32", &path("decoded.gguf"), true);
    common::assert_ok(&decoded);
    // Same type in and out: copied.
    let same = requantize("q8_0", &path("same.gguf"), true);
    assert!(!String::from_utf8_lossy(&same.stderr).contains("warning"), "nothing is requantized");
    let (q8, copy) = (tensor_hashes(&path("q8_0.gguf")), tensor_hashes(&path("same.gguf")));
    assert_eq!(q8, copy);

    if std::env::var_os("TGI_SKIP_PYTHON").is_some() {
        eprintln!("TGI_SKIP_PYTHON set: skipping the gguf-py checks");
        return;
    }
    for quant in ["q8_0.gguf", "q4_0.gguf"] {
        let status = Command::new("python3")
            .arg(root().join("tests/python/check_gguf.py"))
            .arg("--f32")
            .arg(path("decoded.gguf"))
            .arg("--quant")
            .arg(path(quant))
            .status()
            .expect("python3 (install tests/python/requirements.txt, or set TGI_SKIP_PYTHON=1)");
        assert!(status.success(), "gguf-py check failed for {quant} against the decoded values");
    }
}
