//! bitsandbytes 4-bit checkpoints and in-situ quantization in the engine: transformers-saved NF4/FP4 checkpoints
//! of the bundled model against transformers + bitsandbytes' own logits (tests/reference/bnb/, made by
//! make_bnb_refs.py), and `--quantize` against loading the file `tgi quantize` writes.

mod common;

use common::engine::{greedy, logits, max_diff, open};
use common::{assert_fails, model, quantize, root, tgi};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tgi_engines::model::{LoadOptions, Quantize};

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// transformers-saved NF4 and FP4 checkpoints: through the tensor path (weights dequantized to f32 once, as on
/// a GPU) the logits equal transformers + bitsandbytes' to float precision (< 1e-4); through the host kernels
/// (codes and activations rounded to int8, as ggml's kernels round activations) within 0.3, the bound the
/// Q8_0 host kernels keep to the tensor path (reference_logits.rs), with the same first 8 greedy tokens.
#[test]
fn transformers_checkpoints_match_bitsandbytes() {
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("tests/reference/bnb/bnb_logits.json")).unwrap())
            .unwrap();
    for (qt, entry) in r["models"].as_object().unwrap() {
        let dir = root().join(entry["dir"].as_str().unwrap());
        let sha = format!("{:x}", Sha256::digest(std::fs::read(dir.join("model.safetensors")).unwrap()));
        assert_eq!(sha, entry["model_safetensors_sha256"].as_str().unwrap(), "{qt} fixture");
        let host = open(&dir, LoadOptions::default());
        let dense = open(&dir, LoadOptions { cpu_tensor_ops: true, ..LoadOptions::default() });
        for p in entry["prompts"].as_array().unwrap() {
            let prompt = ids(&p["prompt_ids"]);
            assert_eq!(host.tokenizer.encode(p["prompt"].as_str().unwrap(), true, false).unwrap(), prompt);
            let want: Vec<f32> =
                p["last_logits"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
            let dd = max_diff(logits(&dense, &prompt).last().unwrap(), &want);
            let dh = max_diff(logits(&host, &prompt).last().unwrap(), &want);
            let greedy_ids = ids(&p["greedy_ids"]);
            let same =
                greedy(&host, &prompt, greedy_ids.len()).iter().zip(&greedy_ids).take_while(|(a, b)| a == b).count();
            eprintln!(
                "{qt} {:?}: max |Δlogit| tensor path {dd:.2e}, host kernels {dh:.2e}; greedy {same}/{} equal",
                p["prompt"],
                greedy_ids.len()
            );
            assert!(dd < 1e-4, "{qt}: tensor path {dd}");
            assert!(dh < 0.3, "{qt}: host kernels {dh}");
            assert_eq!(greedy(&dense, &prompt, greedy_ids.len()), greedy_ids, "{qt}: tensor path greedy ids");
            assert!(same >= 8, "{qt}: host greedy ids: only {same} equal");
        }
    }
}

/// In-situ `--quantize q8_0` equals loading `tgi quantize --type q8_0`'s GGUF: bit for bit from a GGUF source
/// (same tensor layout), within 1e-4 from the HF directory (whose Q/K rows are not permuted as GGUF's are, so
/// the float operations of RoPE differ in order). Same for q4_k_m, whose per-tensor types follow the preset.
#[test]
fn insitu_ggml_equals_the_quantized_file() {
    let dir = tempfile::tempdir().unwrap();
    let hf = model("stories260k/hf");
    let f32_gguf = model("stories260k/stories260k-f32.gguf");
    let prompt = [1u32, 403, 407, 261, 378, 300, 299];
    for preset in ["q8_0", "q4_k_m"] {
        let q: Quantize = preset.parse().unwrap();
        let insitu = LoadOptions { quantize: Some(q), ..LoadOptions::default() };
        let from_hf = dir.path().join(format!("hf-{preset}.gguf"));
        quantize(&hf, preset, &from_hf);
        let want = logits(&open(&from_hf, LoadOptions::default()), &prompt);
        let got = logits(&open(&hf, insitu), &prompt);
        let d = want.iter().zip(&got).map(|(a, b)| max_diff(a, b)).fold(0.0, f32::max);
        eprintln!("{preset} in-situ from HF vs tgi quantize: max |Δlogit| {d:.2e}");
        assert!(d < 1e-4, "{preset}: {d}");

        let from_gguf = dir.path().join(format!("gguf-{preset}.gguf"));
        quantize(&f32_gguf, preset, &from_gguf);
        let want = logits(&open(&from_gguf, LoadOptions::default()), &prompt);
        let got = logits(&open(&f32_gguf, insitu), &prompt);
        assert_eq!(want, got, "{preset} in-situ from GGUF");
    }
}

/// `--quantize` refuses what it cannot do, with exit 2.
#[test]
fn quantize_flag_errors() {
    let out = tgi(["generate", "--quantize", "q9", "hello"]);
    assert_fails(&out, 2, "unknown quantization 'q9'");
    let out = tgi(["generate", "--quantize", "f16", "hello"]);
    assert_fails(&out, 2, "--dtype");
    let nf4 = root().join("tests/reference/bnb/stories260k-nf4");
    let out = tgi([
        "generate".as_ref(),
        "-m".as_ref(),
        nf4.as_os_str(),
        "--quantize".as_ref(),
        "q8_0".as_ref(),
        "hi".as_ref(),
    ]);
    assert_fails(&out, 2, "already bitsandbytes 4-bit");
}

/// In-situ `--quantize nf4|fp4` equals loading `tgi quantize --format nf4|fp4`'s checkpoint, bit for bit (same
/// codes, same double-quantized absmax, same kernels).
#[test]
fn insitu_bnb4_equals_the_quantized_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let hf = model("stories260k/hf");
    let prompt = [1u32, 403, 407, 261, 378, 300, 299];
    for format in ["nf4", "fp4"] {
        let out = dir.path().join(format);
        let o = tgi([
            "quantize".as_ref(),
            hf.as_os_str(),
            "--format".as_ref(),
            format.as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
        ]);
        common::assert_ok(&o);
        let want = logits(&open(&out, LoadOptions::default()), &prompt);
        let insitu = LoadOptions { quantize: Some(format.parse().unwrap()), ..LoadOptions::default() };
        assert_eq!(logits(&open(&hf, insitu), &prompt), want, "{format}");
    }
}
