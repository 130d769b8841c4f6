//! Hugging Face -> GGUF tensor names per architecture (llama.cpp's), the Q/K row permutation of the Llama
//! family and Gemma's norm offset.

use tgi_formats::hf::Architecture;

use super::ConvertError;

/// How a tensor's rows are rearranged on the way to GGUF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transform {
    /// Rows copied as they are.
    None,
    /// llama.cpp's Q/K permutation: within each of `heads` heads, the two rotary halves are interleaved.
    PermuteHeads(usize),
    /// One added to every value: Gemma's `(1 + w)` norm weights, which llama.cpp stores offset.
    AddOne,
}

/// The GGUF `general.architecture` for a Hugging Face architecture.
pub fn gguf_arch(arch: Architecture) -> &'static str {
    match arch {
        Architecture::Llama | Architecture::Mistral | Architecture::Mixtral => "llama",
        Architecture::Qwen2 => "qwen2",
        Architecture::Qwen3 => "qwen3",
        Architecture::Gemma2 => "gemma2",
        Architecture::Gemma3 => "gemma3",
        Architecture::Qwen3Moe => "qwen3moe",
        Architecture::Phi3 => "phi3",
    }
}

/// An expert's tensor (`...experts.E.rest`) as the name of the stack of all experts' (`...experts.rest`) and `E`;
/// llama.cpp stores a layer's experts as one 3-D tensor per projection.
pub fn split_expert(hf: &str) -> Option<(String, usize)> {
    let (before, after) = hf.split_once(".experts.")?;
    let (index, rest) = after.split_once('.')?;
    let e = index.parse().ok()?;
    Some((format!("{before}.experts.{rest}"), e))
}

/// Maps one HF tensor name to its GGUF name and transform; `Ok(None)` for tensors
/// llama.cpp's converter drops (rotary caches).
pub fn map_name(
    arch: Architecture,
    n_head: usize,
    n_head_kv: usize,
    hf: &str,
) -> Result<Option<(String, Transform)>, ConvertError> {
    let unknown = || ConvertError::UnknownTensor { tensor: hf.to_string(), arch: format!("{arch:?}") };
    let permute = matches!(arch, Architecture::Llama | Architecture::Mistral | Architecture::Mixtral);
    let gemma = matches!(arch, Architecture::Gemma2 | Architecture::Gemma3);
    let norm = if gemma { Transform::AddOne } else { Transform::None };
    match hf {
        "model.embed_tokens.weight" => return Ok(Some(("token_embd.weight".into(), Transform::None))),
        "model.norm.weight" => return Ok(Some(("output_norm.weight".into(), norm))),
        "lm_head.weight" => return Ok(Some(("output.weight".into(), Transform::None))),
        _ => {}
    }
    let rest = hf.strip_prefix("model.layers.").ok_or_else(unknown)?;
    let (layer, rest) = rest.split_once('.').ok_or_else(unknown)?;
    let layer: usize = layer.parse().map_err(|_| unknown())?;
    if rest.ends_with("rotary_emb.inv_freq") {
        return Ok(None);
    }
    // One expert's tensor maps to its stack's name.
    let stacked = split_expert(rest).map_or(rest.to_string(), |(s, _)| s);
    let (module, suffix) = stacked.rsplit_once('.').ok_or_else(unknown)?;
    if suffix != "weight" && suffix != "bias" {
        return Err(unknown());
    }
    let qk_norm = matches!(arch, Architecture::Qwen3 | Architecture::Gemma3 | Architecture::Qwen3Moe);
    let moe = match arch {
        Architecture::Mixtral => Some(("block_sparse_moe", ["w1", "w3", "w2"])),
        Architecture::Qwen3Moe => Some(("mlp", ["gate_proj", "up_proj", "down_proj"])),
        _ => None,
    };
    let (gguf, transform) = match module {
        "input_layernorm" => ("attn_norm", norm),
        "post_attention_layernorm" if gemma => ("post_attention_norm", norm),
        "pre_feedforward_layernorm" if gemma => ("ffn_norm", norm),
        "post_feedforward_layernorm" if gemma => ("post_ffw_norm", norm),
        "post_attention_layernorm" => ("ffn_norm", Transform::None),
        "self_attn.q_norm" if qk_norm => ("attn_q_norm", norm),
        "self_attn.k_norm" if qk_norm => ("attn_k_norm", norm),
        "self_attn.q_proj" if permute => ("attn_q", Transform::PermuteHeads(n_head)),
        "self_attn.k_proj" if permute => ("attn_k", Transform::PermuteHeads(n_head_kv)),
        "self_attn.q_proj" => ("attn_q", Transform::None),
        "self_attn.k_proj" => ("attn_k", Transform::None),
        "self_attn.v_proj" => ("attn_v", Transform::None),
        "self_attn.qkv_proj" if arch == Architecture::Phi3 => ("attn_qkv", Transform::None),
        "mlp.gate_up_proj" if arch == Architecture::Phi3 => ("ffn_up", Transform::None),
        "self_attn.o_proj" => ("attn_output", Transform::None),
        "mlp.gate_proj" => ("ffn_gate", Transform::None),
        "mlp.up_proj" => ("ffn_up", Transform::None),
        "mlp.down_proj" => ("ffn_down", Transform::None),
        _ => match moe.and_then(|(block, [gate, up, down])| {
            let m = module.strip_prefix(block)?.strip_prefix('.')?;
            let expert = |p: &str| m == format!("experts.{p}");
            match m {
                "gate" => Some("ffn_gate_inp"),
                _ if expert(gate) => Some("ffn_gate_exps"),
                _ if expert(up) => Some("ffn_up_exps"),
                _ if expert(down) => Some("ffn_down_exps"),
                _ => None,
            }
        }) {
            Some(name) => (name, Transform::None),
            None => return Err(unknown()),
        },
    };
    Ok(Some((format!("blk.{layer}.{gguf}.{suffix}"), transform)))
}

/// Applies a transform to a row-major `[rows, cols]` tensor (a bias is `[rows, 1]`) in `data`,
/// using `scratch` as the working copy.
pub fn apply(transform: Transform, data: &mut [f32], scratch: &mut Vec<f32>, rows: usize) -> Result<(), ConvertError> {
    let heads = match transform {
        Transform::None => return Ok(()),
        Transform::AddOne => {
            data.iter_mut().for_each(|x| *x += 1.0);
            return Ok(());
        }
        Transform::PermuteHeads(heads) => heads,
    };
    permute_rows(data, scratch, rows, heads, false)
}

/// Undoes llama.cpp's Q/K permutation (`Transform::PermuteHeads(heads)`) on a row-major `[rows, cols]` tensor:
/// a GGUF's interleaved rotary halves back to Hugging Face's order.
pub fn unpermute_heads(
    data: &mut [f32],
    scratch: &mut Vec<f32>,
    rows: usize,
    heads: usize,
) -> Result<(), ConvertError> {
    permute_rows(data, scratch, rows, heads, true)
}

/// Interleaves (or, `inverse`, de-interleaves) the two rotary halves of each of `heads` heads' rows.
fn permute_rows(
    data: &mut [f32],
    scratch: &mut Vec<f32>,
    rows: usize,
    heads: usize,
    inverse: bool,
) -> Result<(), ConvertError> {
    if heads == 0
        || !rows.is_multiple_of(heads)
        || !(rows / heads).is_multiple_of(2)
        || !data.len().is_multiple_of(rows.max(1))
    {
        return Err(ConvertError::BadPermutation { rows, heads });
    }
    let cols = data.len() / rows;
    let hd = rows / heads;
    let half = hd / 2;
    let out = scratch;
    out.resize(data.len(), 0.0); // every row is overwritten below
    for h in 0..heads {
        for i in 0..half {
            for j in 0..2 {
                let (interleaved, halves) = (h * hd + 2 * i + j, h * hd + j * half + i);
                let (dst, src) = if inverse { (halves, interleaved) } else { (interleaved, halves) };
                out[dst * cols..(dst + 1) * cols].copy_from_slice(&data[src * cols..(src + 1) * cols]);
            }
        }
    }
    data.copy_from_slice(out);
    Ok(())
}

/// llama.cpp's tensor order: tensors outside `blk.N` first, then by layer, then by name.
pub fn gguf_order(a: &str, b: &str) -> std::cmp::Ordering {
    let layer = |n: &str| super::preset::layer_of(n).map(|l| l as i64).unwrap_or(-1);
    layer(a).cmp(&layer(b)).then_with(|| a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map() {
        let m = |n| map_name(Architecture::Llama, 8, 4, n).unwrap().unwrap();
        assert_eq!(
            m("model.layers.3.self_attn.q_proj.weight"),
            ("blk.3.attn_q.weight".into(), Transform::PermuteHeads(8))
        );
        assert_eq!(m("model.layers.3.self_attn.k_proj.weight").1, Transform::PermuteHeads(4));
        assert_eq!(m("model.layers.0.mlp.down_proj.weight").0, "blk.0.ffn_down.weight");
        assert_eq!(m("lm_head.weight").0, "output.weight");
        let q = map_name(Architecture::Qwen2, 8, 4, "model.layers.1.self_attn.q_proj.bias").unwrap().unwrap();
        assert_eq!(q, ("blk.1.attn_q.bias".into(), Transform::None));
        assert!(map_name(Architecture::Llama, 8, 4, "model.layers.0.self_attn.rotary_emb.inv_freq").unwrap().is_none());
        assert!(map_name(Architecture::Llama, 8, 4, "vision_tower.x.weight").is_err());
    }

    /// llama.cpp's names for the mixtures: the router and each projection's stack of experts.
    #[test]
    fn expert_names() {
        let m = |arch, n: &str| map_name(arch, 4, 2, &format!("model.layers.1.{n}.weight")).unwrap().unwrap().0;
        assert_eq!(m(Architecture::Qwen3Moe, "mlp.gate"), "blk.1.ffn_gate_inp.weight");
        assert_eq!(m(Architecture::Qwen3Moe, "mlp.experts.3.gate_proj"), "blk.1.ffn_gate_exps.weight");
        assert_eq!(m(Architecture::Qwen3Moe, "mlp.experts.up_proj"), "blk.1.ffn_up_exps.weight");
        assert_eq!(m(Architecture::Qwen3Moe, "mlp.experts.0.down_proj"), "blk.1.ffn_down_exps.weight");
        assert_eq!(m(Architecture::Qwen3Moe, "self_attn.q_norm"), "blk.1.attn_q_norm.weight");
        assert_eq!(m(Architecture::Mixtral, "block_sparse_moe.gate"), "blk.1.ffn_gate_inp.weight");
        assert_eq!(m(Architecture::Mixtral, "block_sparse_moe.experts.7.w1"), "blk.1.ffn_gate_exps.weight");
        assert_eq!(m(Architecture::Mixtral, "block_sparse_moe.experts.7.w3"), "blk.1.ffn_up_exps.weight");
        assert_eq!(m(Architecture::Mixtral, "block_sparse_moe.experts.7.w2"), "blk.1.ffn_down_exps.weight");
        assert!(map_name(Architecture::Qwen3, 4, 2, "model.layers.0.mlp.gate.weight").is_err());
        let (stack, e) = split_expert("model.layers.2.mlp.experts.11.up_proj.weight").unwrap();
        assert_eq!((stack.as_str(), e), ("model.layers.2.mlp.experts.up_proj.weight", 11));
        assert_eq!(split_expert("model.layers.2.mlp.up_proj.weight"), None);
    }

    /// llama.cpp's names (gguf-py's `TensorNameMap`) for Qwen3's q/k norms and Gemma 2's four norms.
    #[test]
    fn qwen3_and_gemma2_names() {
        let m = |arch, n: &str| map_name(arch, 4, 2, &format!("model.layers.1.{n}.weight")).unwrap().unwrap();
        let q3 = |n| m(Architecture::Qwen3, n);
        assert_eq!(q3("self_attn.q_norm"), ("blk.1.attn_q_norm.weight".into(), Transform::None));
        assert_eq!(q3("self_attn.k_norm").0, "blk.1.attn_k_norm.weight");
        assert_eq!(q3("self_attn.q_proj"), ("blk.1.attn_q.weight".into(), Transform::None));
        assert_eq!(q3("post_attention_layernorm").0, "blk.1.ffn_norm.weight");
        let g2 = |n| m(Architecture::Gemma2, n);
        assert_eq!(g2("input_layernorm"), ("blk.1.attn_norm.weight".into(), Transform::AddOne));
        assert_eq!(g2("post_attention_layernorm").0, "blk.1.post_attention_norm.weight");
        assert_eq!(g2("pre_feedforward_layernorm").0, "blk.1.ffn_norm.weight");
        assert_eq!(g2("post_feedforward_layernorm").0, "blk.1.post_ffw_norm.weight");
        assert_eq!(g2("mlp.gate_proj"), ("blk.1.ffn_gate.weight".into(), Transform::None));
        let g3 = m(Architecture::Gemma3, "self_attn.k_norm");
        assert_eq!(g3, ("blk.1.attn_k_norm.weight".into(), Transform::AddOne));
        let norm = map_name(Architecture::Gemma2, 4, 2, "model.norm.weight").unwrap().unwrap();
        assert_eq!(norm, ("output_norm.weight".into(), Transform::AddOne));
        assert!(map_name(Architecture::Llama, 4, 2, "model.layers.0.self_attn.q_norm.weight").is_err());
        let mut scratch = Vec::new();
        let mut w = vec![0.5, -1.0];
        apply(Transform::AddOne, &mut w, &mut scratch, 2).unwrap();
        assert_eq!(w, vec![1.5, 0.0]);
    }

    #[test]
    fn permutation_interleaves_halves() {
        // 1 head, head dim 4, 1 column: rows [0,1,2,3] -> [0,2,1,3].
        let mut scratch = Vec::new();
        let mut out = vec![0., 1., 2., 3.];
        apply(Transform::PermuteHeads(1), &mut out, &mut scratch, 4).unwrap();
        assert_eq!(out, vec![0., 2., 1., 3.]);
        // 2 heads of dim 4, 2 columns.
        let mut out: Vec<f32> = (0..16).map(|x| x as f32).collect();
        apply(Transform::PermuteHeads(2), &mut out, &mut scratch, 8).unwrap();
        let rows: Vec<f32> = out.chunks(2).map(|r| r[0] / 2.0).collect();
        assert_eq!(rows, vec![0., 2., 1., 3., 4., 6., 5., 7.]);
        assert!(apply(Transform::PermuteHeads(3), &mut [0.; 8], &mut scratch, 8).is_err());
        unpermute_heads(&mut out, &mut scratch, 8, 2).unwrap();
        assert_eq!(out, (0..16).map(|x| x as f32).collect::<Vec<_>>());
    }

    #[test]
    fn order_is_llama_cpp_s() {
        let mut v = vec![
            "blk.10.attn_q.weight",
            "blk.2.ffn_up.weight",
            "token_embd.weight",
            "blk.2.attn_k.weight",
            "output.weight",
        ];
        v.sort_by(|a, b| gguf_order(a, b));
        assert_eq!(
            v,
            [
                "output.weight",
                "token_embd.weight",
                "blk.2.attn_k.weight",
                "blk.2.ffn_up.weight",
                "blk.10.attn_q.weight"
            ]
        );
    }
}
