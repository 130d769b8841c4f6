//! `tgi quantize --format awq`: the directory has AutoAWQ's GEMM layout and config, its tensors read
//! back through `tgi_formats::awq` within half a step of the source, an independent numpy quantizer
//! and packer (tests/python/awq_unpack.py) produces the same bytes and its unpacker the same
//! dequantized weights, the committed third-party load (tests/reference/awq) was made from this very
//! output, and bad input is refused before anything is written.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{assert_fails, assert_ok, files_in, model, root, tgi};
use half::f16;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tgi_formats::awq::AwqTensor;
use tgi_formats::{DType, SafetensorsSet, TensorSource};

fn config(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap()
}

/// `tgi quantize MODEL --format awq -o OUT ARGS --json`, asserting success; the JSON summary.
fn quantize_awq(model: &Path, out: &Path, args: &[&str]) -> Value {
    let mut all = vec!["quantize", model.to_str().unwrap(), "--format", "awq", "-o", out.to_str().unwrap()];
    all.extend_from_slice(args);
    all.push("--json");
    serde_json::from_str(&assert_ok(&tgi(all))).unwrap()
}

fn i32s(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Reads every linear back, checks it against the source within half a step, and dumps tgi's
/// dequantization as raw f32 `<module>.f32` files into `dump`.
fn read_back(source: &Path, out: &Path, group: usize, dump: &Path) -> usize {
    let src = SafetensorsSet::open_dir(source).unwrap();
    let awq = SafetensorsSet::open_dir(out).unwrap();
    let names: Vec<String> = awq.tensors().into_iter().map(|m| m.name).collect();
    let mut linears = 0;
    for meta in src.tensors() {
        let Some(module) = meta.name.strip_suffix("_proj.weight").map(|m| format!("{m}_proj")) else {
            assert_eq!(awq.tensors().iter().find(|m| m.name == meta.name).unwrap().dtype, DType::F16, "{}", meta.name);
            continue;
        };
        linears += 1;
        assert!(!names.contains(&meta.name), "{} must not be stored unquantized", meta.name);
        let (out_f, in_f) = (meta.shape[0], meta.shape[1]);
        let shapes: Vec<(DType, Vec<usize>)> = ["qweight", "qzeros", "scales"]
            .iter()
            .map(|s| {
                let m = awq.tensors().into_iter().find(|m| m.name == format!("{module}.{s}")).unwrap();
                (m.dtype, m.shape)
            })
            .collect();
        assert_eq!(
            shapes,
            [
                (DType::I32, vec![in_f, out_f / 8]),
                (DType::I32, vec![in_f / group, out_f / 8]),
                (DType::F16, vec![in_f / group, out_f])
            ],
            "{module}"
        );
        let raw = |s: &str| awq.raw_bytes(&format!("{module}.{s}")).unwrap();
        let scales = raw("scales").chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]])).collect();
        let t = AwqTensor::from_parts(in_f, out_f, group, i32s(raw("qweight")), i32s(raw("qzeros")), scales).unwrap();
        let deq = t.dequantize();
        let w = src.read_f32(&meta.name).unwrap();
        for (k, (&a, &b)) in w.iter().zip(&deq).enumerate() {
            let step = t.scale(k % in_f / group, k / in_f).to_f32();
            // Half a step, plus what rounding the scale to f16 moves the 15-step range by.
            assert!((a - b).abs() <= step * (0.5 + 15.0 / 2048.0), "{module}[{k}]: {a} vs {b}, step {step}");
        }
        let bytes: Vec<u8> = deq.iter().flat_map(|x| x.to_le_bytes()).collect();
        std::fs::write(dump.join(format!("{module}.f32")), bytes).unwrap();
    }
    linears
}

/// Whether python3 with numpy is there; prints a note when not.
fn have_numpy() -> bool {
    let probe = Command::new("python3").args(["-c", "import numpy"]).output();
    let ok = probe.is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!(
            "note: python3 with numpy not found (pip install -r tests/python/requirements.txt): skipping awq_unpack.py"
        );
    }
    ok
}

/// Runs tests/python/awq_unpack.py (skipped with a note without python3 and numpy).
fn python_check(source: &Path, out: &Path, dump: &Path) {
    if !have_numpy() {
        return;
    }
    let o = Command::new("python3")
        .arg(root().join("tests/python/awq_unpack.py"))
        .arg("--source")
        .arg(source)
        .arg("--awq")
        .arg(out)
        .arg("--ours")
        .arg(dump)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "awq_unpack.py failed:\n{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("byte-identical") && stdout.contains("equal to tgi's"), "{stdout}");
}

fn sha256(path: &Path) -> String {
    Sha256::digest(std::fs::read(path).unwrap()).iter().map(|b| format!("{b:02x}")).collect()
}

/// The committed third-party load `tests/reference/awq/{file}` was made from exactly this output,
/// and records agreement.
fn assert_reference(file: &str, out: &Path) {
    let path = root().join("tests/reference/awq").join(file);
    let reference: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(
        reference["model_safetensors_sha256"].as_str().unwrap(),
        sha256(&out.join("model.safetensors")),
        "the output changed: rerun tests/reference/awq/check_gptqmodel.py (see tests/reference/awq/README.md)"
    );
    assert_eq!(reference["quantization_config"], config(out)["quantization_config"]);
    let dequant = reference["awq_weight_dequantize_vs_numpy_unpack_max_abs"].as_object().unwrap();
    assert_eq!(dequant.len(), 28);
    assert!(dequant.values().all(|d| d.as_f64() == Some(0.0)), "{file}: gptqmodel dequantizes differently");
    let tolerance = reference["gptqmodel_vs_dense_dequantized_f32"]["max"].as_f64().unwrap();
    assert!(tolerance < 0.02, "{file}: gptqmodel logits {tolerance} from the dense model");
    assert_eq!(reference["argmax_agreement_gptqmodel_vs_dense_dequantized"], 1.0);
}

#[test]
fn rtn_writes_the_autoawq_gemm_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("awq");
    let hf = model("stories-distill-4l/hf");
    let summary = quantize_awq(&hf, &out, &["--method", "rtn"]);
    assert_eq!(summary["format"], "awq");
    assert_eq!(summary["preset"], "awq 4-bit gemm (group 128, zero point, method rtn)");
    let by_type: Vec<(String, u64)> = summary["by_type"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["type"].as_str().unwrap().to_string(), t["tensors"].as_u64().unwrap()))
        .collect();
    assert_eq!(by_type, [("awq4".to_string(), 28), ("f16".to_string(), 11)]);
    let worst = summary["worst_relative_rmse"].as_f64().unwrap();
    assert!(worst > 0.01 && worst < 0.2, "{summary}");

    assert_eq!(
        files_in(&out),
        [
            "config.json",
            "generation_config.json",
            "model.safetensors",
            "special_tokens_map.json",
            "tokenizer.json",
            "tokenizer_config.json"
        ]
    );
    let c = config(&out);
    assert_eq!(
        c["quantization_config"],
        json!({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true, "version": "gemm",
               "modules_to_not_convert": null})
    );
    assert_eq!((c["torch_dtype"].as_str(), c["dtype"].as_str()), (Some("float16"), Some("float16")));
    assert_eq!(c["num_hidden_layers"], config(&hf)["num_hidden_layers"]);
    assert_eq!(files_in(tmp.path()), ["awq"], "no temporary directory left");

    let dump = tmp.path().join("ours");
    std::fs::create_dir(&dump).unwrap();
    assert_eq!(read_back(&hf, &out, 128, &dump), 28);
    python_check(&hf, &out, &dump);

    assert_reference("gptqmodel_load.json", &out);
}

#[test]
fn symmetric_group_32_reads_back() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("awq-sym");
    let hf = model("stories-distill-4l/hf");
    let summary = quantize_awq(&hf, &out, &["--method", "rtn", "--no-zero-point", "--group-size", "32", "--bits", "4"]);
    assert_eq!(summary["preset"], "awq 4-bit gemm (group 32, no zero point, method rtn)");
    let q = &config(&out)["quantization_config"];
    assert_eq!((q["group_size"].as_u64(), q["zero_point"].as_bool()), (Some(32), Some(false)));
    // Symmetric codes are stored with zero point 8 in every nibble.
    let awq = SafetensorsSet::open_dir(&out).unwrap();
    let zeros = i32s(awq.raw_bytes("model.layers.2.self_attn.k_proj.qzeros").unwrap());
    assert!(zeros.iter().all(|&z| z as u32 == 0x8888_8888));
    let dump = tmp.path().join("ours");
    std::fs::create_dir(&dump).unwrap();
    assert_eq!(read_back(&hf, &out, 32, &dump), 28);
    python_check(&hf, &out, &dump);
    assert_reference("gptqmodel_load_sym_g32.json", &out);
    // --zero-point after --no-zero-point wins; --force replaces the directory.
    quantize_awq(&hf, &out, &["--method", "rtn", "--no-zero-point", "--zero-point", "--force"]);
    assert_eq!(config(&out)["quantization_config"]["zero_point"], true);
}

#[test]
fn refuses_bad_input_before_writing() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = out.to_str().unwrap();
    let distill = model("stories-distill-4l/hf");
    let d = distill.to_str().unwrap();
    let stories = model("stories260k/hf");
    let s = stories.to_str().unwrap();
    let q = |args: &[&str]| {
        let mut all = vec!["quantize"];
        all.extend_from_slice(args);
        tgi(all)
    };
    assert_fails(
        &q(&[s, "--format", "awq", "-o", o]),
        2,
        "model.layers.0.mlp.down_proj: 172 input features do not divide into groups of 128",
    );
    assert_fails(
        &q(&[s, "--format", "awq", "--group-size", "32", "-o", o]),
        2,
        "model.layers.0.mlp.down_proj: 172 input features do not divide into groups of 32 (and 14 more layers)",
    );
    assert_fails(
        &q(&[d, "--format", "awq", "--group-size", "48", "-o", o]),
        2,
        "--group-size 48 is not one of 32, 64, 128",
    );
    assert_fails(&q(&[d, "--format", "awq", "--bits", "8", "-o", o]), 2, "4-bit weights only");
    assert_fails(&q(&[d, "--format", "awq", "--method", "gptq", "-o", o]), 2, "invalid value 'gptq'");
    assert_fails(&q(&[d, "--format", "awq", "--type", "q4_k_m", "-o", o]), 2, "--type applies to --format gguf only");
    assert_fails(&q(&[d, "--format", "awq", "--blocksize", "64", "-o", o]), 2, "--blocksize applies to");
    assert_fails(&q(&[d, "--group-size", "64", "-o", o]), 2, "--group-size applies to --format awq only");
    assert_fails(&q(&[d, "--format", "nf4", "--no-zero-point", "-o", o]), 2, "--no-zero-point applies to");
    let gguf = model("stories260k/stories260k-f32.gguf");
    assert_fails(&q(&[gguf.to_str().unwrap(), "--format", "awq", "-o", o]), 2, "needs a Hugging Face checkpoint");
    assert_eq!(files_in(tmp.path()), Vec::<String>::new(), "nothing written");
}

#[test]
fn the_unpacker_catches_one_flipped_bit() {
    if !have_numpy() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("awq");
    let hf = model("stories-distill-4l/hf");
    quantize_awq(&hf, &out, &["--method", "rtn"]);
    let file = out.join("model.safetensors");
    let mut bytes = std::fs::read(&file).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let at = 8 + n + header["model.layers.1.mlp.gate_proj.qweight"]["data_offsets"][0].as_u64().unwrap() as usize;
    bytes[at + 100] ^= 1;
    std::fs::write(&file, bytes).unwrap();
    let o = Command::new("python3")
        .arg(root().join("tests/python/awq_unpack.py"))
        .arg("--source")
        .arg(&hf)
        .arg("--awq")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "a corrupted qweight passed");
    assert!(stderr.contains("model.layers.1.mlp.gate_proj: qweight differs"), "{stderr}");
}

/// A copy of stories-distill-4l whose last layer holds a NaN: the error comes after the first
/// layers were encoded, and still nothing is left behind.
fn poisoned_copy(dir: &Path) -> PathBuf {
    let src = model("stories-distill-4l/hf");
    let dst = dir.join("poisoned");
    std::fs::create_dir(&dst).unwrap();
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(src.join(f), dst.join(f)).unwrap();
    }
    let mut bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let t = &header["model.layers.3.mlp.up_proj.weight"];
    assert_eq!(t["dtype"], "F32");
    let at = 8 + n + t["data_offsets"][0].as_u64().unwrap() as usize + 4 * 1000;
    bytes[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    std::fs::write(dst.join("model.safetensors"), bytes).unwrap();
    dst
}

#[test]
fn failure_midway_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let input = poisoned_copy(tmp.path());
    let out = tmp.path().join("out");
    let o = tgi(["quantize", input.to_str().unwrap(), "--format", "awq", "-o", out.to_str().unwrap()]);
    assert_fails(&o, 2, "model.layers.3.mlp.up_proj.weight");
    assert!(String::from_utf8_lossy(&o.stderr).contains("non-finite"));
    assert_eq!(files_in(tmp.path()), ["poisoned"], "no output and no temporary directory");
}

/// `--method awq` (the default) on the built-in calibration text: a few seconds on the bundled model; the
/// summary names the calibration set, the layout is the same as round-to-nearest's, and the norms carry the
/// folded scales.
#[test]
fn awq_search_runs_on_the_builtin_text() {
    let tmp = tempfile::tempdir().unwrap();
    let hf = model("stories-distill-4l/hf");
    let out = tmp.path().join("awq");
    let summary = quantize_awq(&hf, &out, &["--calib-samples", "4", "--calib-seq-len", "64"]);
    assert_eq!(
        summary["preset"],
        "awq 4-bit gemm (group 128, zero point, method awq; calibration tgi-default (built-in, CC0): \
         4 samples x 64 tokens = 256 tokens)"
    );
    let rtn = tmp.path().join("rtn");
    quantize_awq(&hf, &rtn, &["--method", "rtn"]);
    let (a, r) = (SafetensorsSet::open_dir(&out).unwrap(), SafetensorsSet::open_dir(&rtn).unwrap());
    let metas = |s: &SafetensorsSet| {
        let mut m: Vec<(String, Vec<usize>)> = s.tensors().into_iter().map(|m| (m.name, m.shape)).collect();
        m.sort();
        m
    };
    assert_eq!(metas(&a), metas(&r));
    assert_eq!(config(&out)["quantization_config"], config(&rtn)["quantization_config"]);
    let norm = "model.layers.0.input_layernorm.weight";
    assert_ne!(a.read_f32(norm).unwrap(), r.read_f32(norm).unwrap(), "scales folded into the norm");
    assert_eq!(a.read_f32("model.norm.weight").unwrap(), r.read_f32("model.norm.weight").unwrap());
}

#[test]
fn calibration_files_and_refusals() {
    let tmp = tempfile::tempdir().unwrap();
    let hf = model("stories-distill-4l/hf");
    let d = hf.to_str().unwrap();
    let jsonl = tmp.path().join("calib.jsonl");
    let text = std::fs::read_to_string(model("stories-distill-4l/text/calibration.txt")).unwrap();
    let lines: Vec<String> = text.lines().take(40).map(|l| json!({ "text": l }).to_string()).collect();
    std::fs::write(&jsonl, lines.join("\n")).unwrap();
    let out = tmp.path().join("awq");
    let j = jsonl.to_str().unwrap();
    let summary = quantize_awq(&hf, &out, &["--calib-file", j, "--calib-samples", "2", "--calib-seq-len", "128"]);
    let preset = summary["preset"].as_str().unwrap();
    assert!(preset.ends_with(&format!("calibration {j}: 2 samples x 128 tokens = 256 tokens)")), "{preset}");
    let o = tmp.path().join("x");
    let o = o.to_str().unwrap();
    let q = |args: &[&str]| {
        let mut all = vec!["quantize", d, "--format", "awq", "-o", o];
        all.extend_from_slice(args);
        tgi(all)
    };
    assert_fails(
        &q(&["--method", "rtn", "--calib-samples", "4"]),
        2,
        "--calib-samples applies to --method awq, not rtn",
    );
    assert_fails(&q(&["--calib-file", "/nonexistent.txt"]), 2, "--calib-file /nonexistent.txt");
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"text\": \"a\"}\n{\"body\": \"b\"}\n").unwrap();
    assert_fails(&q(&["--calib-file", bad.to_str().unwrap()]), 2, "line 2: no string field \"text\"");
    let txt = model("stories-distill-4l/text/calibration.txt");
    let long = ["--calib-file", txt.to_str().unwrap(), "--calib-samples", "1", "--calib-seq-len", "1024"];
    assert_fails(&q(&long), 2, "exceed the model's context of 512");
    assert_fails(&q(&["--calib-samples", "0"]), 2, "must be at least 1");
    assert_fails(
        &tgi(["quantize", d, "--calib-samples", "4", "-o", o]),
        2,
        "--calib-samples applies to --format awq only",
    );
}
