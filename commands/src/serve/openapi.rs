//! The OpenAPI description served at `/api-doc/openapi.json`: the bundled document with the bounds
//! that depend on the server's flags and model (`--max-best-of`, `--max-total-tokens`, the vocabulary
//! size, ...) filled in, so that it says exactly which values this server accepts.

use serde_json::Value;

use super::limits::RequestLimits;

/// The OpenAPI description of every route, with the default flags' bounds.
pub const OPENAPI: &str = include_str!("openapi.json");

/// Largest `u32`, the wire type of token counts and ids.
const U32_MAX: usize = u32::MAX as usize;

/// Where each flag-dependent bound sits in the document, and its value under `limits` with a
/// vocabulary of `vocab_size` tokens.
fn bounds(limits: &RequestLimits, vocab_size: usize) -> Vec<(String, usize)> {
    const TGI: [&str; 2] = ["GenerateParameters", "GenerateStreamParameters"];
    const OPENAI: [&str; 2] = ["ChatRequest", "CompletionRequest"];
    let max_new = limits.max_total_tokens.saturating_sub(1).min(U32_MAX);
    let schema = |name: &str, rest: &str| format!("/components/schemas/{name}/properties/{rest}");
    let mut out = Vec::new();
    for s in TGI {
        out.push((schema(s, "stop/maxItems"), limits.max_stop_sequences));
        out.push((schema(s, "top_n_tokens/maximum"), limits.max_top_n_tokens as usize));
        out.push((schema(s, "truncate/maximum"), limits.max_input_tokens.min(U32_MAX)));
        out.push((schema(s, "max_new_tokens/maximum"), max_new));
    }
    out.push((schema("GenerateParameters", "best_of/maximum"), limits.max_best_of));
    out.push((schema("TokenizeParameters", "truncate/maximum"), limits.max_input_tokens.min(U32_MAX)));
    for s in OPENAI {
        out.push((schema(s, "stop/oneOf/1/maxItems"), limits.max_stop_sequences));
        out.push((schema(s, "n/maximum"), limits.max_n));
    }
    // Chat's `max_tokens` is ignored when `max_completion_tokens` is set: only its wire type bounds it.
    out.push((schema("ChatRequest", "max_completion_tokens/maximum"), max_new));
    out.push((schema("CompletionRequest", "max_tokens/maximum"), max_new));
    out.push((schema("AnthropicMessagesRequest", "max_tokens/maximum"), max_new));
    out.push((schema("AnthropicMessagesRequest", "stop_sequences/maxItems"), limits.max_stop_sequences));
    out.push((schema("CreateResponseRequest", "max_output_tokens/maximum"), max_new));
    let max_top = (limits.max_top_n_tokens as usize).min(tgi_engines::sampling::MAX_TOP_LOGPROBS);
    out.push((schema("CompletionRequest", "logprobs/maximum"), max_top));
    out.push((schema("CompletionRequest", "best_of/maximum"), limits.max_best_of.max(limits.max_n)));
    let last_id = vocab_size.saturating_sub(1).min(U32_MAX);
    out.push((schema("CompletionRequest", "prompt/oneOf/2/items/maximum"), last_id));
    out.push((schema("CompletionRequest", "prompt/oneOf/3/items/items/maximum"), last_id));
    for (s, field) in [("EmbeddingRequest", "input"), ("EmbedRequest", "inputs")] {
        out.push((schema(s, &format!("{field}/oneOf/2/items/maximum")), last_id));
        out.push((schema(s, &format!("{field}/oneOf/3/items/items/maximum")), last_id));
    }
    out
}

/// The description with this server's bounds.
pub fn document(limits: &RequestLimits, vocab_size: usize) -> String {
    let mut doc: Value = serde_json::from_str(OPENAPI).expect("the bundled OpenAPI description is JSON");
    for (pointer, value) in bounds(limits, vocab_size) {
        if let Some(slot) = doc.pointer_mut(&pointer) {
            *slot = value.into();
        }
    }
    doc.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::limits::tests::small;

    #[test]
    fn every_bound_exists_and_takes_the_limits() {
        let doc: Value = serde_json::from_str(OPENAPI).unwrap();
        for (pointer, _) in bounds(&small(), 512) {
            assert!(doc.pointer(&pointer).is_some_and(Value::is_u64), "{pointer}");
        }
        let served: Value = serde_json::from_str(&document(&small(), 512)).unwrap();
        let p = |s: &str| served.pointer(&format!("/components/schemas/{s}")).cloned().unwrap();
        assert_eq!(p("GenerateParameters/properties/best_of/maximum"), 2);
        assert_eq!(p("GenerateParameters/properties/max_new_tokens/maximum"), 15);
        assert_eq!(p("GenerateStreamParameters/properties/truncate/maximum"), 12);
        assert_eq!(p("ChatRequest/properties/stop/oneOf/1/maxItems"), 2);
        assert_eq!(p("CompletionRequest/properties/best_of/maximum"), 4);
        assert_eq!(p("CompletionRequest/properties/logprobs/maximum"), 5);
        assert_eq!(p("CompletionRequest/properties/prompt/oneOf/3/items/items/maximum"), 511);
        assert_eq!(p("AnthropicMessagesRequest/properties/max_tokens/maximum"), 15);
        assert_eq!(p("AnthropicMessagesRequest/properties/stop_sequences/maxItems"), 2);
        assert_eq!(p("CreateResponseRequest/properties/max_output_tokens/maximum"), 15);
    }
}
