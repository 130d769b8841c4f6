//! Architecture handling in the HF -> GGUF conversion: Qwen2 (q/k/v bias, no Q/K permutation,
//! `qwen2.*` keys), Mistral (converted as llama), Llama 3 rope scaling (`rope_freqs.weight`).

mod common;

use std::path::Path;

use common::{assert_ok, model, tgi};
use tgi_formats::gguf::GgufFile;
use tgi_formats::source::TensorSource;
use tgi_formats::SafetensorsSet;

/// Copies the bundled model with an edited config and extra tensors.
fn variant(dir: &Path, edit: impl Fn(&mut serde_json::Value), extra: &[(&str, Vec<f32>)]) {
    std::fs::create_dir_all(dir).unwrap();
    let src = model("stories260k/hf");
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    edit(&mut cfg);
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let set = SafetensorsSet::open_dir(&src).unwrap();
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = set
        .tensors()
        .into_iter()
        .map(|m| (m.name.clone(), m.shape.clone(), set.raw_bytes(&m.name).unwrap().to_vec()))
        .collect();
    for (name, values) in extra {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        tensors.push((name.to_string(), vec![values.len()], bytes));
    }
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(n, s, b)| {
            (n.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b).unwrap())
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
}

fn convert(dir: &Path) -> GgufFile {
    let out = dir.join("out.gguf");
    assert_ok(&tgi([
        "quantize".as_ref(),
        dir.as_os_str(),
        "--type".as_ref(),
        "f32".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
        "-q".as_ref(),
    ]));
    GgufFile::open(&out).unwrap()
}

fn hf_bytes(name: &str) -> Vec<u8> {
    let set = SafetensorsSet::open_dir(&model("stories260k/hf")).unwrap();
    set.raw_bytes(name).unwrap().to_vec()
}

#[test]
fn qwen2_keeps_biases_and_rows() {
    let dir = tempfile::tempdir().unwrap();
    let mut extra = Vec::new();
    let names: Vec<String> =
        (0..5).flat_map(|l| ["q", "k", "v"].map(|p| format!("model.layers.{l}.self_attn.{p}_proj.bias"))).collect();
    for n in &names {
        let len = if n.contains(".q_proj") { 64 } else { 32 };
        extra.push((n.as_str(), (0..len).map(|i| i as f32 / 100.0).collect()));
    }
    variant(
        dir.path(),
        |c| {
            c["architectures"] = serde_json::json!(["Qwen2ForCausalLM"]);
            c["model_type"] = "qwen2".into();
        },
        &extra,
    );
    let g = convert(dir.path());
    assert_eq!(g.get("general.architecture").and_then(|v| v.as_str()), Some("qwen2"));
    assert_eq!(g.get("qwen2.block_count").and_then(|v| v.as_u64()), Some(5));
    let bias = g.tensor("blk.2.attn_k.bias").expect("k bias");
    assert_eq!(bias.dims, vec![32]);
    assert_eq!(bias.ty, tgi_formats::GgmlType::F32);
    // Qwen2 uses NEOX rope in llama.cpp: no Q/K row permutation.
    let q = g.tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!(g.tensor_data(q), hf_bytes("model.layers.0.self_attn.q_proj.weight").as_slice());
}

#[test]
fn mistral_converts_as_llama_with_permutation() {
    let dir = tempfile::tempdir().unwrap();
    variant(
        dir.path(),
        |c| {
            c["architectures"] = serde_json::json!(["MistralForCausalLM"]);
            c["model_type"] = "mistral".into();
        },
        &[],
    );
    let g = convert(dir.path());
    assert_eq!(g.get("general.architecture").and_then(|v| v.as_str()), Some("llama"));
    let q = g.tensor("blk.0.attn_q.weight").unwrap();
    assert_ne!(g.tensor_data(q), hf_bytes("model.layers.0.self_attn.q_proj.weight").as_slice());
    let v = g.tensor("blk.0.attn_v.weight").unwrap();
    assert_eq!(g.tensor_data(v), hf_bytes("model.layers.0.self_attn.v_proj.weight").as_slice());
}

#[test]
fn llama3_rope_scaling_adds_rope_freqs() {
    let dir = tempfile::tempdir().unwrap();
    variant(
        dir.path(),
        |c| {
            c["rope_parameters"] = serde_json::json!({
                "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64
            });
            c.as_object_mut().unwrap().remove("rope_theta");
        },
        &[],
    );
    let g = convert(dir.path());
    let t = g.tensor("rope_freqs.weight").expect("rope_freqs");
    assert_eq!(t.dims, vec![4]);
    let f: Vec<f32> = g.tensor_data(t).chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(f[0], 1.0, "highest frequency unscaled");
    assert_eq!(f[3], 8.0, "lowest frequency scaled by the factor: {f:?}");
    assert_eq!(g.get("llama.rope.freq_base").and_then(|v| v.as_f32()), Some(500000.0));
}
