//! `tgi quantize --format nf4|fp4|bnb`: the output for the bundled model is identical, tensor by
//! tensor and byte for byte, to what transformers 5.24 + bitsandbytes 0.50.2 `save_pretrained`
//! wrote for it (models/stories260k-nf4-transformers, from tests/reference/bnb/check_transformers.py),
//! the other variants read back through `tgi_formats::bnb`, and bad flag combinations are refused.

mod common;

use std::path::Path;

use common::{assert_fails, assert_ok, files_in, model, tgi};
use serde_json::Value;
use tgi_formats::bnb::{read_bnb4, FourBitType};
use tgi_formats::{SafetensorsSet, TensorSource};

fn config(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap()
}

fn run_json(args: &[&str]) -> Value {
    let mut all = vec!["quantize"];
    all.extend_from_slice(args);
    all.push("--json");
    serde_json::from_str(&assert_ok(&tgi(all))).unwrap()
}

#[test]
fn nf4_is_identical_to_transformers_save() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("nf4");
    let hf = model("stories260k/hf");
    let summary = run_json(&[hf.to_str().unwrap(), "--format", "nf4", "-o", out.to_str().unwrap()]);
    assert_eq!(summary["format"], "bitsandbytes");
    let nf4_rows = summary["per_tensor"].as_array().unwrap().iter().filter(|r| r["type"] == "nf4").count();
    assert_eq!(nf4_rows, 35);
    assert!(summary["worst_relative_rmse"].as_f64().unwrap() < 0.12, "{summary}");

    let fixture = model("stories260k-nf4-transformers");
    let ours = SafetensorsSet::open_dir(&out).unwrap();
    let theirs = SafetensorsSet::open_dir(&fixture).unwrap();
    let mut a = ours.tensors();
    let mut b = theirs.tensors();
    a.sort_by(|x, y| x.name.cmp(&y.name));
    b.sort_by(|x, y| x.name.cmp(&y.name));
    assert_eq!(a, b, "tensor names, shapes and dtypes");
    assert_eq!(a.len(), 222);
    for t in &a {
        assert_eq!(ours.raw_bytes(&t.name).unwrap(), theirs.raw_bytes(&t.name).unwrap(), "{}", t.name);
    }
    // Same tensor order and header too: the files are identical.
    assert_eq!(
        std::fs::read(out.join("model.safetensors")).unwrap(),
        std::fs::read(fixture.join("model.safetensors")).unwrap()
    );
    assert_eq!(config(&out)["quantization_config"], config(&fixture)["quantization_config"]);
    for f in ["tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json"] {
        assert!(out.join(f).is_file(), "{f} copied");
    }
    // No temporary directory left beside the output.
    assert_eq!(files_in(tmp.path()), vec!["nf4"]);
}

#[test]
fn fp4_plain_absmax_reads_back() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fp4");
    let hf = model("stories260k/hf");
    run_json(&[
        hf.to_str().unwrap(),
        "--format",
        "bnb",
        "--quant-type",
        "fp4",
        "--no-double-quant",
        "--blocksize",
        "128",
        "--compute-dtype",
        "bf16",
        "-o",
        out.to_str().unwrap(),
    ]);
    let q = &config(&out)["quantization_config"];
    assert_eq!(q["bnb_4bit_quant_type"], "fp4");
    assert_eq!(q["bnb_4bit_use_double_quant"], false);
    assert_eq!(q["bnb_4bit_compute_dtype"], "bfloat16");
    let src = SafetensorsSet::open_dir(&out).unwrap();
    let orig = SafetensorsSet::open_dir(&hf).unwrap();
    let name = "model.layers.2.mlp.down_proj.weight";
    let w = read_bnb4(&src, name).unwrap();
    assert_eq!((w.ty, w.blocksize, w.shape, w.dtype.as_str()), (FourBitType::Fp4, 128, [64, 172], "float32"));
    assert!(w.nested.is_none());
    assert!(!src.tensors().iter().any(|t| t.name.contains("nested")));
    let mut decoded = vec![0.0; w.numel()];
    w.dequantize_into(&mut decoded).unwrap();
    let x = orig.read_f32(name).unwrap();
    let err: f32 = x.iter().zip(&decoded).map(|(a, b)| (a - b) * (a - b)).sum();
    let norm: f32 = x.iter().map(|a| a * a).sum();
    assert!((err / norm).sqrt() < 0.2, "relative RMSE {}", (err / norm).sqrt());
    // Untouched tensors are copied as stored.
    for t in ["model.embed_tokens.weight", "model.norm.weight", "model.layers.0.input_layernorm.weight"] {
        assert_eq!(src.raw_bytes(t).unwrap(), orig.raw_bytes(t).unwrap(), "{t}");
    }
}

#[test]
fn refusals_and_force() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o");
    let hf = model("stories260k/hf");
    let hf = hf.to_str().unwrap();
    let o = out.to_str().unwrap();
    assert_fails(&tgi(["quantize", hf, "--format", "nf4", "--quant-type", "fp4", "-o", o]), 2, "contradicts");
    assert_fails(&tgi(["quantize", hf, "--format", "fp4", "--type", "q8_0", "-o", o]), 2, "--format gguf only");
    assert_fails(&tgi(["quantize", hf, "--no-double-quant", "-o", o]), 2, "not gguf");
    assert_fails(&tgi(["quantize", hf, "--format", "nf4", "--blocksize", "100", "-o", o]), 2, "--blocksize 100");
    let gguf = model("stories260k/stories260k-f32.gguf");
    assert_fails(&tgi(["quantize", gguf.to_str().unwrap(), "--format", "nf4", "-o", o]), 2, "not a GGUF file");
    assert_fails(&tgi(["quantize", hf, "--format", "nf4", "-o", hf]), 2, "holds the input");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("stale"), b"x").unwrap();
    assert_fails(&tgi(["quantize", hf, "--format", "nf4", "-o", o]), 2, "already exists");
    assert_ok(&tgi(["quantize", hf, "--format", "nf4", "-o", o, "--force", "--quiet"]));
    assert!(!out.join("stale").exists() && out.join("model.safetensors").is_file());
    // A quantized checkpoint is not quantized again.
    let again = tmp.path().join("again");
    assert_fails(&tgi(["quantize", o, "--format", "fp4", "-o", again.to_str().unwrap()]), 2, "already quantized");
    assert_eq!(files_in(tmp.path()), vec!["o"]);
}
