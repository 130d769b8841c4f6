//! GGUF metadata for a converted Hugging Face model, with the keys and types llama.cpp expects.

use tgi_formats::gguf::Value;
use tgi_formats::hf::{Architecture, GgufVocab, ModelConfig, RopeScaling};

use super::names::gguf_arch;

/// Builds the metadata of a converted model in the order llama.cpp's converter writes it.
/// `file_type` is the preset's llama_ftype.
pub fn hf_metadata(name: &str, cfg: &ModelConfig, vocab: &GgufVocab, file_type: u32) -> Vec<(String, Value)> {
    let arch = gguf_arch(cfg.architecture);
    let mut kv: Vec<(String, Value)> = Vec::new();
    let mut put = |k: &str, v: Value| kv.push((k.to_string(), v));
    let a = |k: &str| format!("{arch}.{k}");
    let u32v = |x: usize| Value::U32(x as u32);

    put("general.architecture", Value::String(arch.to_string()));
    put("general.type", Value::String("model".into()));
    put("general.name", Value::String(name.to_string()));
    put(&a("block_count"), u32v(cfg.num_hidden_layers));
    put(&a("context_length"), u32v(cfg.max_position_embeddings));
    put(&a("embedding_length"), u32v(cfg.hidden_size));
    put(&a("feed_forward_length"), u32v(cfg.intermediate_size));
    put(&a("attention.head_count"), u32v(cfg.num_attention_heads));
    put(&a("attention.head_count_kv"), u32v(cfg.num_key_value_heads));
    put(&a("rope.freq_base"), Value::F32(cfg.rope_theta));
    put(&a("attention.layer_norm_rms_epsilon"), Value::F32(cfg.rms_norm_eps));
    put(&a("attention.key_length"), u32v(cfg.head_dim));
    put(&a("attention.value_length"), u32v(cfg.head_dim));
    put("general.file_type", Value::U32(file_type));
    put(&a("vocab_size"), u32v(cfg.vocab_size));
    put(&a("rope.dimension_count"), u32v(cfg.rotary_dim));
    if let Some(moe) = &cfg.moe {
        put(&a("expert_count"), u32v(moe.experts));
        put(&a("expert_used_count"), u32v(moe.experts_per_token));
        if cfg.architecture == Architecture::Qwen3Moe {
            put(&a("expert_feed_forward_length"), u32v(moe.expert_intermediate));
        }
    }
    if let (Some(g), Architecture::Gemma2) = (&cfg.gemma, cfg.architecture) {
        if let Some(cap) = g.attn_logit_softcapping {
            put(&a("attn_logit_softcapping"), Value::F32(cap));
        }
        if let Some(cap) = g.final_logit_softcapping {
            put(&a("final_logit_softcapping"), Value::F32(cap));
        }
    }
    if let (Some(w), Some(_)) = (cfg.sliding_window, &cfg.gemma) {
        put(&a("attention.sliding_window"), u32v(w));
    }
    match &cfg.rope_scaling {
        Some(RopeScaling::Linear { factor }) => {
            put(&a("rope.scaling.type"), Value::String("linear".into()));
            put(&a("rope.scaling.factor"), Value::F32(*factor));
        }
        Some(RopeScaling::Yarn { factor, original_max_position_embeddings, .. }) => {
            put(&a("rope.scaling.type"), Value::String("yarn".into()));
            put(&a("rope.scaling.factor"), Value::F32(*factor));
            put(&a("rope.scaling.original_context_length"), u32v(*original_max_position_embeddings));
        }
        // LongRoPE's factors travel as the rope_factors_{short,long}.weight tensors.
        Some(RopeScaling::LongRope { original_max_position_embeddings, attention_factor, .. }) => {
            put(&a("rope.scaling.attn_factor"), Value::F32(*attention_factor));
            put(&a("rope.scaling.original_context_length"), u32v(*original_max_position_embeddings));
        }
        // Llama 3 scaling travels as the rope_freqs.weight tensor instead.
        Some(RopeScaling::Llama3 { .. }) | None => {}
    }
    put("general.quantization_version", Value::U32(2));
    vocab_metadata(vocab, &mut kv);
    kv
}

/// Appends the `tokenizer.ggml.*` keys (and the chat templates).
fn vocab_metadata(v: &GgufVocab, kv: &mut Vec<(String, Value)>) {
    let mut put = |k: &str, val: Value| kv.push((k.to_string(), val));
    put("tokenizer.ggml.model", Value::String(v.model.clone()));
    let pre = v.pre.clone().unwrap_or_else(|| "default".to_string());
    put("tokenizer.ggml.pre", Value::String(pre));
    put("tokenizer.ggml.tokens", Value::strings(v.tokens.clone()));
    if let Some(scores) = &v.scores {
        put("tokenizer.ggml.scores", Value::f32s(scores.clone()));
    }
    put("tokenizer.ggml.token_type", Value::i32s(v.token_types.clone()));
    if let Some(merges) = &v.merges {
        put("tokenizer.ggml.merges", Value::strings(merges.clone()));
    }
    for (key, id) in [
        ("bos_token_id", v.bos_token_id),
        ("eos_token_id", v.eos_token_id),
        ("unknown_token_id", v.unknown_token_id),
        ("padding_token_id", v.padding_token_id),
    ] {
        if let Some(id) = id {
            put(&format!("tokenizer.ggml.{key}"), Value::U32(id));
        }
    }
    if let Some(b) = v.add_bos_token {
        put("tokenizer.ggml.add_bos_token", Value::Bool(b));
    }
    if let Some(b) = v.add_eos_token {
        put("tokenizer.ggml.add_eos_token", Value::Bool(b));
    }
    // As gguf-py's add_chat_template: the named templates, their names, then the default one.
    for (name, t) in &v.named_chat_templates {
        put(&format!("tokenizer.chat_template.{name}"), Value::String(t.clone()));
    }
    if !v.named_chat_templates.is_empty() {
        put("tokenizer.chat_templates", Value::strings(v.named_chat_templates.keys().cloned()));
    }
    if let Some(t) = &v.chat_template {
        put("tokenizer.chat_template", Value::String(t.clone()));
    }
}

/// llama.cpp's `rope_freqs.weight` for Llama 3 rope scaling: one factor per rotary frequency.
pub fn llama3_rope_factors(cfg: &ModelConfig) -> Option<Vec<f32>> {
    let Some(RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings }) =
        cfg.rope_scaling.clone()
    else {
        return None;
    };
    let dim = cfg.head_dim;
    let old_ctx = original_max_position_embeddings as f32;
    let low_wavelen = old_ctx / low_freq_factor;
    let high_wavelen = old_ctx / high_freq_factor;
    let factors = (0..dim)
        .step_by(2)
        .map(|i| {
            let freq = 1.0 / cfg.rope_theta.powf(i as f32 / dim as f32);
            let wavelen = 2.0 * std::f32::consts::PI / freq;
            if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                factor
            } else {
                let smooth = (old_ctx / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                1.0 / ((1.0 - smooth) / factor + smooth)
            }
        })
        .collect();
    Some(factors)
}
