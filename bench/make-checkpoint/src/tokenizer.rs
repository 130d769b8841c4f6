//! Hugging Face tokenizer files for a SentencePiece vocabulary, as transformers' `LlamaConverter` makes them:
//! a byte-fallback BPE `tokenizer.json` with merges derived from the piece scores.

use crate::gguf_vocab::SpmVocab;
use crate::json::{arr, obj, J};
use std::collections::HashMap;

/// A simple Llama-2-style chat template (`[INST]` turns, optional `<<SYS>>` block).
pub const CHAT_TEMPLATE: &str = "{{ bos_token }}{% for message in messages %}\
{% if message['role'] == 'system' %}{{ '<<SYS>>\\n' + message['content'] + '\\n<</SYS>>\\n\\n' }}\
{% elif message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}\
{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + eos_token }}\
{% endif %}{% endfor %}";

/// BPE merges the way transformers' `SentencePieceExtractor` derives them: every split of a piece into two pieces
/// that are both in the vocabulary is a merge; per piece ordered by (left id, right id), then all merges stably
/// sorted by the merged piece's score, highest first.
pub fn derive_merges(vocab: &SpmVocab) -> Vec<(u32, u32)> {
    let ids: HashMap<&str, u32> = vocab.tokens.iter().enumerate().map(|(i, t)| (t.as_str(), i as u32)).collect();
    let mut merges: Vec<(u32, u32, f32)> = Vec::new();
    let mut local = Vec::new();
    for (piece, &score) in vocab.tokens.iter().zip(&vocab.scores) {
        local.clear();
        for (cut, _) in piece.char_indices().skip(1) {
            if let (Some(&l), Some(&r)) = (ids.get(&piece[..cut]), ids.get(&piece[cut..])) {
                local.push((l, r, score));
            }
        }
        local.sort_by_key(|&(l, r, _)| (l, r));
        merges.extend_from_slice(&local);
    }
    merges.sort_by(|a, b| b.2.total_cmp(&a.2));
    merges.into_iter().map(|(l, r, _)| (l, r)).collect()
}

/// Whether token type `ty` is added to the tokenizer as an added token, and if so whether it is special
/// (unknown and control tokens are special, user-defined ones are not).
fn added_kind(ty: i32) -> Option<bool> {
    match ty {
        2 | 3 => Some(true),
        4 => Some(false),
        _ => None,
    }
}

/// The `tokenizer.json` of `vocab`.
pub fn tokenizer_json(vocab: &SpmVocab) -> J {
    let tok = |id: u32| J::from(vocab.tokens[id as usize].as_str());
    let added = vocab.types.iter().enumerate().filter_map(|(id, &ty)| {
        let special = added_kind(ty)?;
        Some(obj([
            ("id", J::from(id)),
            ("content", J::from(vocab.tokens[id].as_str())),
            ("single_word", J::Bool(false)),
            ("lstrip", J::Bool(false)),
            ("rstrip", J::Bool(false)),
            ("normalized", J::Bool(false)),
            ("special", J::Bool(special)),
        ]))
    });
    let normalizer = obj([
        ("type", J::from("Sequence")),
        (
            "normalizers",
            arr([
                obj([("type", J::from("Prepend")), ("prepend", J::from("▁"))]),
                obj([
                    ("type", J::from("Replace")),
                    ("pattern", obj([("String", J::from(" "))])),
                    ("content", J::from("▁")),
                ]),
            ]),
        ),
    ]);
    let special = |type_id: i64| obj([("SpecialToken", obj([("id", tok(vocab.bos)), ("type_id", J::Int(type_id))]))]);
    let sequence =
        |id: &str, type_id: i64| obj([("Sequence", obj([("id", J::from(id)), ("type_id", J::Int(type_id))]))]);
    let post_processor = obj([
        ("type", J::from("TemplateProcessing")),
        ("single", arr([special(0), sequence("A", 0)])),
        ("pair", arr([special(0), sequence("A", 0), special(1), sequence("B", 1)])),
        (
            "special_tokens",
            obj([(
                vocab.tokens[vocab.bos as usize].clone(),
                obj([("id", tok(vocab.bos)), ("ids", arr([J::from(vocab.bos)])), ("tokens", arr([tok(vocab.bos)]))]),
            )]),
        ),
    ]);
    let decoder = obj([
        ("type", J::from("Sequence")),
        (
            "decoders",
            arr([
                obj([
                    ("type", J::from("Replace")),
                    ("pattern", obj([("String", J::from("▁"))])),
                    ("content", J::from(" ")),
                ]),
                obj([("type", J::from("ByteFallback"))]),
                obj([("type", J::from("Fuse"))]),
                obj([("type", J::from("Strip")), ("content", J::from(" ")), ("start", J::Int(1)), ("stop", J::Int(0))]),
            ]),
        ),
    ]);
    let model = obj([
        ("type", J::from("BPE")),
        ("dropout", J::Null),
        ("unk_token", tok(vocab.unk)),
        ("continuing_subword_prefix", J::Null),
        ("end_of_word_suffix", J::Null),
        ("fuse_unk", J::Bool(true)),
        ("byte_fallback", J::Bool(true)),
        ("ignore_merges", J::Bool(false)),
        ("vocab", obj(vocab.tokens.iter().enumerate().map(|(i, t)| (t.clone(), J::from(i))))),
        ("merges", arr(derive_merges(vocab).into_iter().map(|(l, r)| arr([tok(l), tok(r)])))),
    ]);
    obj([
        ("version", J::from("1.0")),
        ("truncation", J::Null),
        ("padding", J::Null),
        ("added_tokens", arr(added)),
        ("normalizer", normalizer),
        ("pre_tokenizer", J::Null),
        ("post_processor", post_processor),
        ("decoder", decoder),
        ("model", model),
    ])
}

/// The `tokenizer_config.json` (BOS added, no EOS, `PreTrainedTokenizerFast`, the simple chat template).
pub fn tokenizer_config_json(vocab: &SpmVocab, model_max_length: usize) -> J {
    let decoder = vocab.types.iter().enumerate().filter_map(|(id, &ty)| {
        let special = added_kind(ty)?;
        let entry = obj([
            ("content", J::from(vocab.tokens[id].as_str())),
            ("lstrip", J::Bool(false)),
            ("normalized", J::Bool(false)),
            ("rstrip", J::Bool(false)),
            ("single_word", J::Bool(false)),
            ("special", J::Bool(special)),
        ]);
        Some((id.to_string(), entry))
    });
    let tok = |id: u32| J::from(vocab.tokens[id as usize].as_str());
    obj([
        ("add_bos_token", J::Bool(true)),
        ("add_eos_token", J::Bool(false)),
        ("legacy", J::Bool(true)),
        ("bos_token", tok(vocab.bos)),
        ("eos_token", tok(vocab.eos)),
        ("unk_token", tok(vocab.unk)),
        ("pad_token", J::Null),
        ("clean_up_tokenization_spaces", J::Bool(false)),
        ("model_max_length", J::from(model_max_length)),
        ("tokenizer_class", J::from("PreTrainedTokenizerFast")),
        ("spaces_between_special_tokens", J::Bool(false)),
        ("added_tokens_decoder", obj(decoder)),
        ("chat_template", J::from(CHAT_TEMPLATE)),
    ])
}

/// The `special_tokens_map.json`.
pub fn special_tokens_map_json(vocab: &SpmVocab) -> J {
    let tok = |id: u32| J::from(vocab.tokens[id as usize].as_str());
    obj([("bos_token", tok(vocab.bos)), ("eos_token", tok(vocab.eos)), ("unk_token", tok(vocab.unk))])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toy() -> SpmVocab {
        let pieces = ["<unk>", "<s>", "</s>", "▁", "a", "b", "ab", "▁a", "▁ab", "ba"];
        let scores = [0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -4.0];
        SpmVocab {
            tokens: pieces.iter().map(|s| s.to_string()).collect(),
            scores: scores.to_vec(),
            types: vec![2, 3, 3, 1, 1, 1, 1, 1, 1, 1],
            bos: 1,
            eos: 2,
            unk: 0,
        }
    }

    #[test]
    fn merges_follow_scores_then_ids() {
        let v = toy();
        let names: Vec<(String, String)> = derive_merges(&v)
            .into_iter()
            .map(|(l, r)| (v.tokens[l as usize].clone(), v.tokens[r as usize].clone()))
            .collect();
        let s = |a: &str, b: &str| (a.to_string(), b.to_string());
        // "ab" and "ba" tie at -4 and keep vocabulary order; "▁ab" has two splits, ordered by left id.
        assert_eq!(names, [s("a", "b"), s("b", "a"), s("▁", "a"), s("▁", "ab"), s("▁a", "b")]);
    }

    #[test]
    fn tokenizer_json_shape() {
        let t = tokenizer_json(&toy());
        let text = serde_json::to_string(&t).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["added_tokens"].as_array().unwrap().len(), 3);
        assert_eq!(v["added_tokens"][1]["content"], "<s>");
        assert_eq!(v["normalizer"]["normalizers"][0]["type"], "Prepend");
        assert!(v["pre_tokenizer"].is_null());
        assert_eq!(v["post_processor"]["special_tokens"]["<s>"]["ids"][0], 1);
        assert_eq!(v["decoder"]["decoders"][1]["type"], "ByteFallback");
        assert_eq!(v["model"]["type"], "BPE");
        assert_eq!(v["model"]["byte_fallback"], true);
        assert_eq!(v["model"]["vocab"]["▁ab"], 8);
        assert_eq!(v["model"]["merges"][0], serde_json::json!(["a", "b"]));
        // Key order as tokenizers writes it.
        assert!(text.starts_with(r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":"#));
        assert!(text.contains(r#""vocab":{"<unk>":0,"<s>":1,"</s>":2,"▁":3,"#));
    }

    #[test]
    fn config_has_chat_template_and_specials() {
        let c = tokenizer_config_json(&toy(), 512);
        assert_eq!(c.get("add_bos_token"), Some(&J::Bool(true)));
        assert_eq!(c.get("chat_template"), Some(&J::from(CHAT_TEMPLATE)));
        let m = special_tokens_map_json(&toy());
        assert_eq!(m.get("eos_token"), Some(&J::from("</s>")));
    }
}
