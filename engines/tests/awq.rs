//! AWQ GEMM checkpoints in the engine, on the bundled stories-distill-4l model (dimensions multiples of 256):
//! fixtures quantized here with the formats codec (round-to-nearest per group, AutoAWQ's packing), loaded
//! through the same Llama code as dense checkpoints, against the same model stored dense (F32) with exactly
//! the weights the AWQ tensors stand for; and malformed checkpoints, which must fail with a clear error.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use half::f16;
use rayon::prelude::*;
use serde_json::{json, Value};
use tgi_engines::kv::BlockTable;
use tgi_engines::model::{load, LoadOptions, LoadedModel, Logits, SeqInput};
use tgi_formats::awq::{AwqConfig, AwqTensor};
use tgi_formats::safetensors::{write_file, TensorOut};
use tgi_formats::{DType, SafetensorsSet, TensorSource};

fn stories() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/stories-distill-4l/hf")
}

/// Whether stored tensor `name` is one of the decoder's linear weights, which AWQ quantizes.
fn is_decoder_linear(name: &str) -> bool {
    name.starts_with("model.layers.") && name.ends_with("_proj.weight")
}

/// Named output tensors.
type Named = Vec<(String, TensorOut<'static>)>;

/// One output tensor: dtype, shape, bytes.
fn out(dtype: DType, shape: Vec<usize>, data: Vec<u8>) -> TensorOut<'static> {
    TensorOut { dtype, shape, data: Cow::Owned(data) }
}

fn le_i32(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn le_f16(v: impl IntoIterator<Item = f32>) -> Vec<u8> {
    v.into_iter().flat_map(|x| f16::from_f32(x).to_le_bytes()).collect()
}

/// An AWQ directory at `dst` from the dense HF checkpoint `src`, as AutoAWQ lays it out: decoder linears as
/// `qweight`/`qzeros`/`scales`, everything else F16. With `dense`, also the same model with every tensor at
/// the value the AWQ directory stands for (linears dequantized, as F32; the rest the same F16).
fn write_awq(src: &Path, dst: &Path, cfg: AwqConfig, dense: Option<&Path>) {
    let set = SafetensorsSet::open_dir(src).unwrap();
    let tensors = set.tensors();
    let parts: Vec<(Named, Named)> = tensors
        .par_iter()
        .map(|m| {
            let w = set.read_f32(&m.name).unwrap();
            if is_decoder_linear(&m.name) {
                let (rows, cols) = (m.shape[0], m.shape[1]);
                let t = AwqTensor::quantize(&w, rows, cols, cfg.group_size, cfg.zero_point).unwrap();
                let prefix = m.name.trim_end_matches(".weight");
                let g = cols / cfg.group_size;
                let awq = vec![
                    (format!("{prefix}.qweight"), out(DType::I32, vec![cols, rows / 8], le_i32(&t.qweight))),
                    (format!("{prefix}.qzeros"), out(DType::I32, vec![g, rows / 8], le_i32(&t.qzeros))),
                    (
                        format!("{prefix}.scales"),
                        out(DType::F16, vec![g, rows], le_f16(t.scales.iter().map(|s| s.to_f32()))),
                    ),
                ];
                let deq = if dense.is_some() {
                    let bytes = t.dequantize().iter().flat_map(|x| x.to_le_bytes()).collect();
                    vec![(m.name.clone(), out(DType::F32, m.shape.clone(), bytes))]
                } else {
                    vec![]
                };
                (awq, deq)
            } else {
                let t = (m.name.clone(), out(DType::F16, m.shape.clone(), le_f16(w)));
                (vec![t.clone()], if dense.is_some() { vec![t] } else { vec![] })
            }
        })
        .collect();
    let (awq, deq): (Vec<_>, Vec<_>) = parts.into_iter().unzip();
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    let mut write = |dir: &Path, tensors: Vec<(String, TensorOut)>, quant: Option<Value>| {
        std::fs::create_dir_all(dir).unwrap();
        write_file(&dir.join("model.safetensors"), &tensors, HashMap::from([("format".into(), "pt".into())])).unwrap();
        match quant {
            Some(q) => config["quantization_config"] = q,
            None => _ = config.as_object_mut().unwrap().remove("quantization_config"),
        }
        std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(&config).unwrap()).unwrap();
        for f in ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"] {
            if src.join(f).is_file() {
                std::fs::copy(src.join(f), dir.join(f)).unwrap();
            }
        }
    };
    write(dst, awq.into_iter().flatten().collect(), Some(cfg.to_json()));
    if let Some(d) = dense {
        write(d, deq.into_iter().flatten().collect(), None);
    }
}

fn open(path: &Path, tensor_ops: bool) -> LoadedModel {
    load(path.to_str().unwrap(), &LoadOptions { cpu_tensor_ops: tensor_ops, ..LoadOptions::default() }).unwrap()
}

/// Logits of every position after `tokens`.
fn logits(m: &LoadedModel, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut kv = m.model.new_cache(16, 64).unwrap();
    let mut t = BlockTable::new();
    kv.reserve(&mut t, tokens.len()).unwrap();
    let seq = SeqInput { tokens, start: 0, table: &t, logits: Logits::All };
    m.model.forward(&mut kv, &[seq]).unwrap().remove(0).chunks(m.model.config().vocab).map(<[f32]>::to_vec).collect()
}

fn greedy(m: &LoadedModel, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut seq = prompt.to_vec();
    for _ in 0..n {
        let l = logits(m, &seq).pop().unwrap();
        seq.push((0..l.len()).max_by(|&a, &b| l[a].total_cmp(&l[b]).then(b.cmp(&a))).unwrap() as u32);
    }
    seq[prompt.len()..].to_vec()
}

/// Largest |a - b| over all positions.
fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter().flatten().zip(b.iter().flatten()).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Largest |logit| over all positions (the scale the differences are measured against).
fn span(a: &[Vec<f32>]) -> f32 {
    a.iter().flatten().fold(0.0, |m, x| m.max(x.abs()))
}

/// The AWQ checkpoint against the dense one holding the weights it stands for, for group sizes 128 (zero
/// point), 64 (symmetric) and 32: through the tensor path (AWQ dequantized at load, as on a GPU) the logits
/// equal the dense model's to float precision (< 1e-4); through the 4-bit host kernels (activations rounded to
/// int8 per group) they stay within 0.4 of the dense host kernels' (logits span about ±18; measured 0.10-0.26),
/// the first 10 greedy tokens are identical, and of 24 the AWQ model's token differs from the dense model's
/// (given the same prefix) only where the dense model's top two are within twice that difference.
#[test]
fn awq_checkpoint_matches_its_dense_weights() {
    let dir = tempfile::tempdir().unwrap();
    let m = open(&stories(), false);
    let prompt = m.tokenizer.encode("Once upon a time, a little girl named Lily", true, false).unwrap();
    for (group, zero_point) in [(128, true), (64, false), (32, true)] {
        let cfg = AwqConfig { bits: 4, group_size: group, zero_point };
        let (awq, dense) = (dir.path().join(format!("awq-{group}")), dir.path().join(format!("dense-{group}")));
        write_awq(&stories(), &awq, cfg, Some(&dense));
        let (ah, at) = (open(&awq, false), open(&awq, true));
        let (dh, dt) = (open(&dense, false), open(&dense, true));
        let (la, lt, ldh, ldt) =
            (logits(&ah, &prompt), logits(&at, &prompt), logits(&dh, &prompt), logits(&dt, &prompt));
        let tensor = max_diff(&lt, &ldt);
        let host = max_diff(&la, &ldh);
        let ga = greedy(&ah, &prompt, 24);
        // The dense model's choice after each prefix of the AWQ model's generation, and its top-2 margin.
        let seq: Vec<u32> = prompt.iter().chain(&ga).copied().collect();
        let steps: Vec<(u32, f32)> = logits(&dh, &seq)[prompt.len() - 1..seq.len() - 1]
            .iter()
            .map(|l| {
                let mut idx: Vec<usize> = (0..l.len()).collect();
                idx.sort_by(|&a, &b| l[b].total_cmp(&l[a]).then(a.cmp(&b)));
                (idx[0] as u32, l[idx[0]] - l[idx[1]])
            })
            .collect();
        let same = ga.iter().zip(&steps).take_while(|(a, (d, _))| *a == d).count();
        eprintln!(
            "group {group} zero point {zero_point}: max |Δlogit| tensor path {tensor:.2e}, host kernels {host:.3} \
             (logits span ±{:.1}); first {same}/24 greedy tokens identical: {:?}",
            span(&ldh),
            ah.tokenizer.decode(&ga, true).unwrap()
        );
        assert!(tensor < 1e-4, "group {group}: tensor path {tensor}");
        assert!(host < 0.4, "group {group}: host kernels {host}");
        assert!(same >= 10, "group {group}: only {same} greedy tokens identical");
        for (k, (a, (d, margin))) in ga.iter().zip(&steps).enumerate() {
            assert!(a == d || *margin < 2.0 * host, "group {group} token {k}: {a} vs dense {d}, margin {margin}");
        }
    }
}

/// The error of loading the AWQ fixture after `edit` changed its tensors or config.
fn load_error(
    edit_tensors: impl FnOnce(&mut Vec<(String, TensorOut<'static>)>),
    edit_config: impl FnOnce(&mut Value),
) -> String {
    let dir = tempfile::tempdir().unwrap();
    let awq = dir.path().join("awq");
    write_awq(&stories(), &awq, AwqConfig { bits: 4, group_size: 128, zero_point: true }, None);
    let st = SafetensorsSet::open_dir(&awq).unwrap();
    let mut tensors: Vec<(String, TensorOut<'static>)> = st
        .tensors()
        .into_iter()
        .map(|m| (m.name.clone(), out(m.dtype, m.shape.clone(), st.raw_bytes(&m.name).unwrap().to_vec())))
        .collect();
    drop(st);
    edit_tensors(&mut tensors);
    write_file(&awq.join("model.safetensors"), &tensors, HashMap::new()).unwrap();
    let path = awq.join("config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit_config(&mut config);
    std::fs::write(&path, config.to_string()).unwrap();
    match load(awq.to_str().unwrap(), &LoadOptions::default()) {
        Ok(_) => panic!("the malformed checkpoint loaded"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn malformed_checkpoints_give_clear_errors() {
    let qweight = "model.layers.1.mlp.up_proj.qweight";
    let e = load_error(
        |t| {
            let (_, w) = t.iter_mut().find(|(n, _)| n == qweight).unwrap();
            w.shape = vec![w.shape[0] / 2, w.shape[1] * 2];
        },
        |_| {},
    );
    assert!(e.contains(qweight) && e.contains("[256, 96]"), "{e}");

    let scales = "model.layers.0.self_attn.k_proj.scales";
    let e = load_error(|t| t.retain(|(n, _)| n != scales), |_| {});
    assert!(e.contains(scales), "{e}");

    let e = load_error(|_| {}, |c| c["quantization_config"]["bits"] = json!(8));
    assert!(e.contains("8-bit AWQ is not supported"), "{e}");

    let e = load_error(|_| {}, |c| c["quantization_config"]["version"] = json!("gemv"));
    assert!(e.contains("`gemv` is not supported"), "{e}");

    // Tensors packed in groups of 128 read as groups of 64: the zeros and scales have half the rows.
    let e = load_error(|_| {}, |c| c["quantization_config"]["group_size"] = json!(64));
    assert!(e.contains("model.layers.0.self_attn.q_proj.qzeros") && e.contains("[4, 32]"), "{e}");

    let e = load_error(|_| {}, |c| c["quantization_config"]["group_size"] = json!(48));
    assert!(e.contains("group_size 48"), "{e}");

    let e = load_error(|_| {}, |c| _ = c.as_object_mut().unwrap().remove("quantization_config"));
    assert!(e.contains("qweight") && e.contains("no AWQ"), "{e}");

    let zeros = "model.layers.2.mlp.down_proj.qzeros";
    let e = load_error(
        |t| {
            let (_, z) = t.iter_mut().find(|(n, _)| n == zeros).unwrap();
            z.dtype = DType::F32;
        },
        |_| {},
    );
    assert!(e.contains(zeros) && e.contains("I32"), "{e}");
}

/// Writes an AWQ checkpoint of a dense HF directory for benchmarks (not part of CI):
/// `TGI_AWQ_SRC=DIR TGI_AWQ_OUT=DIR cargo test --release -p tgi-engines --test awq -- --ignored`
/// (round-to-nearest, group 128, zero point: what `tgi quantize --format awq --method rtn` writes).
#[test]
#[ignore]
fn write_bench_checkpoint() {
    let (src, dst) = (std::env::var("TGI_AWQ_SRC").unwrap(), std::env::var("TGI_AWQ_OUT").unwrap());
    write_awq(Path::new(&src), Path::new(&dst), AwqConfig { bits: 4, group_size: 128, zero_point: true }, None);
}
