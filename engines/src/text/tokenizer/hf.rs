//! Tokenizers from a Hugging Face `tokenizer.json`, run by the `tokenizers` crate; BOS and EOS
//! from the `tokenizer_config.json` and `generation_config.json` beside it.

use std::collections::HashSet;
use std::path::Path;
use std::sync::OnceLock;

use serde_json::Value;
use tgi_formats::hf::GenerationConfig;

use super::unicode::char_byte;
use super::TokenizerError;

/// A `tokenizers` tokenizer with what the engine needs to know about it.
pub(super) struct HfTokenizer {
    tok: tokenizers::Tokenizer,
    /// The same tokenizer taking special tokens in text literally, made on first use.
    literal: OnceLock<tokenizers::Tokenizer>,
    /// Tokens are GPT-2 byte characters (a ByteLevel decoder), else SentencePiece pieces.
    byte_level: bool,
    /// Added tokens, which stand for their text verbatim.
    added: HashSet<u32>,
    /// Added tokens marked special (control tokens).
    pub special: HashSet<u32>,
    pub bos: Option<u32>,
    pub eos: Vec<u32>,
    /// Encoding with special tokens puts BOS first.
    pub add_bos: bool,
}

/// A `tokenizers` error for `path`.
fn hf_error(path: &Path, e: impl std::fmt::Display) -> TokenizerError {
    TokenizerError::Hf { path: path.to_path_buf(), message: e.to_string().replace('\n', " ") }
}

/// Whether a decoder (or one in a `Sequence`) has type `name`.
fn has_type(v: &Value, name: &str) -> bool {
    match v {
        Value::Object(map) => {
            map.get("type").and_then(Value::as_str) == Some(name) || map.values().any(|v| has_type(v, name))
        }
        Value::Array(items) => items.iter().any(|v| has_type(v, name)),
        _ => false,
    }
}

impl HfTokenizer {
    /// Loads `path` (a `tokenizer.json`).
    pub(super) fn load(path: &Path) -> Result<Self, TokenizerError> {
        let err = |e: &dyn std::fmt::Display| hf_error(path, e);
        let text = std::fs::read_to_string(path).map_err(|e| err(&e))?;
        // Parsed as JSON first: the `tokenizers` crate panics on a syntax error inside `decoder`.
        let json: Value = serde_json::from_str(&text).map_err(|e| err(&e))?;
        // ... and indexes a template's special tokens and sequences without checking them.
        check_post_processor(&json["post_processor"]).map_err(|e| err(&e))?;
        let tok: tokenizers::Tokenizer = serde_json::from_value(json).map_err(|e| err(&e))?;
        let decoder = serde_json::to_value(tok.get_decoder()).map_err(|e| err(&e))?;
        let byte_level = has_type(&decoder, "ByteLevel");
        let added_tokens = tok.get_added_tokens_decoder();
        let control = added_tokens.iter().filter(|(_, t)| t.special).map(|(&id, _)| id).collect();
        let added = added_tokens.into_keys().collect();

        // What the post-processor puts before (BOS) and after the text.
        let ids = |add_special| tok.encode_fast("a", add_special).map(|e| e.get_ids().to_vec()).map_err(|e| err(&e));
        let (plain, special) = (ids(false)?, ids(true)?);
        let prefix = (0..=special.len().saturating_sub(plain.len()))
            .find(|&at| special[at..].starts_with(&plain))
            .map_or(&special[..0], |at| &special[..at]);

        let dir = path.parent().unwrap_or(Path::new("."));
        let config = read_json(&dir.join("tokenizer_config.json"))?;
        let token_id = |field: &str| {
            let v = config.as_ref()?.get(field)?;
            let text = v.as_str().or_else(|| v.get("content")?.as_str())?;
            tok.token_to_id(text)
        };
        let mut eos: Vec<u32> = token_id("eos_token").into_iter().collect();
        let generation = dir.join("generation_config.json");
        if generation.is_file() {
            let config = GenerationConfig::from_file(&generation).map_err(|e| hf_error(&generation, e))?;
            eos.extend(config.eos_token_ids);
        }
        eos.sort_unstable();
        eos.dedup();
        Ok(HfTokenizer {
            bos: token_id("bos_token").or(prefix.first().copied()),
            add_bos: !prefix.is_empty(),
            eos,
            literal: OnceLock::new(),
            tok,
            byte_level,
            added,
            special: control,
        })
    }

    /// Token ids of `text`; `add_special` runs the post-processor, `parse_special` lets special
    /// tokens written in the text be recognised.
    pub(super) fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        let tok = if parse_special {
            &self.tok
        } else {
            self.literal.get_or_init(|| {
                let mut literal = self.tok.clone();
                literal.set_encode_special_tokens(true);
                literal
            })
        };
        tok.encode_fast(text, add_special)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TokenizerError::Encode(e.to_string()))
    }

    /// The text of `ids` as the tokenizer's decoder writes it.
    pub(super) fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, TokenizerError> {
        let size = self.vocab_size();
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= size) {
            return Err(TokenizerError::InvalidId { id, size });
        }
        self.tok.decode(ids, skip_special).map_err(|e| TokenizerError::Encode(e.to_string()))
    }

    /// The bytes token `id` stands for: an added token's text, a byte-level token's bytes, or a
    /// SentencePiece piece with `▁` as space and `<0xNN>` as its byte.
    pub(super) fn piece(&self, id: u32) -> Vec<u8> {
        let Some(text) = self.tok.id_to_token(id) else {
            return Vec::new();
        };
        if self.added.contains(&id) {
            return text.into_bytes();
        }
        if self.byte_level {
            let mut utf8 = [0u8; 4];
            return text
                .chars()
                .flat_map(|c| match char_byte(c) {
                    Some(b) => vec![b],
                    None => c.encode_utf8(&mut utf8).as_bytes().to_vec(),
                })
                .collect();
        }
        match text.strip_prefix("<0x").and_then(|t| t.strip_suffix('>')) {
            Some(hex) if hex.len() == 2 => match u8::from_str_radix(hex, 16) {
                Ok(b) => vec![b],
                Err(_) => text.into_bytes(),
            },
            _ => text.replace('▁', " ").into_bytes(),
        }
    }

    /// Number of token ids, added tokens included.
    pub(super) fn vocab_size(&self) -> usize {
        self.tok.get_vocab_size(true)
    }
}

/// Checks a `TemplateProcessing` post-processor (also inside a `Sequence`) as the `tokenizers`
/// crate's encoder assumes without checking: every special token of `single` and `pair` defined in
/// `special_tokens` with as many ids as tokens, and `single` reading only sequence `A`. The crate reads a
/// post-processor by its fields, whatever its `type` says, so the fields decide here too.
fn check_post_processor(v: &Value) -> Result<(), String> {
    if let Some(processors) = v.get("processors").and_then(Value::as_array) {
        processors.iter().try_for_each(check_post_processor)?;
    }
    if ["single", "pair", "special_tokens"].iter().all(|f| v.get(f).is_none()) {
        return Ok(());
    }
    let defined = v.get("special_tokens").and_then(Value::as_object);
    for (name, template) in [("single", &v["single"]), ("pair", &v["pair"])] {
        for piece in template.as_array().into_iter().flatten() {
            if let Some(id) = piece.pointer("/SpecialToken/id").and_then(Value::as_str) {
                let token = defined.and_then(|d| d.get(id)).ok_or_else(|| {
                    format!("post_processor: the {name} template's special token {id:?} is not in special_tokens")
                })?;
                let count = |field| token.get(field).and_then(Value::as_array).map(Vec::len);
                if count("ids") != count("tokens") {
                    return Err(format!("post_processor: special token {id:?} has not as many ids as tokens"));
                }
            }
            if name == "single" && piece.pointer("/Sequence/id").is_some_and(|s| s != "A") {
                return Err("post_processor: the single template may only read sequence A".into());
            }
        }
    }
    Ok(())
}

/// A JSON file's contents, `None` if it does not exist.
fn read_json(path: &Path) -> Result<Option<Value>, TokenizerError> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(|e| hf_error(path, e))?;
    serde_json::from_str(&text).map(Some).map_err(|e| hf_error(path, e))
}

#[cfg(test)]
mod tests {
    use super::super::unicode::byte_char;
    use super::*;
    use serde_json::json;

    /// A byte-level BPE `tokenizer.json` (256 byte characters, `Ġt`, `he`, `Ġthe`, then
    /// `<|bos|>` 259 and `<|eot|>` 260) with a post-processor adding `<|bos|>`, and the config
    /// files beside it.
    fn byte_level_dir() -> tempfile::TempDir {
        let mut vocab: serde_json::Map<String, Value> =
            (0..=255u8).map(|b| (byte_char(b).to_string(), json!(b))).collect();
        for (i, t) in ["Ġt", "he", "Ġthe"].into_iter().enumerate() {
            vocab.insert(t.into(), json!(256 + i));
        }
        let added = |id: u32, content: &str| {
            json!({"id": id, "content": content, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": true})
        };
        let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false,
                                "trim_offsets": true, "use_regex": true});
        let tokenizer = json!({
            "version": "1.0",
            "added_tokens": [added(259, "<|bos|>"), added(260, "<|eot|>")],
            "normalizer": null,
            "pre_tokenizer": byte_level,
            "post_processor": {
                "type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<|bos|>", "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                         {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {"<|bos|>": {"id": "<|bos|>", "ids": [259], "tokens": ["<|bos|>"]}}
            },
            "decoder": byte_level,
            "model": {"type": "BPE", "dropout": null, "unk_token": null,
                      "continuing_subword_prefix": null, "end_of_word_suffix": null,
                      "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                      "vocab": vocab, "merges": ["Ġ t", "h e", "Ġt he"]}
        });
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, v: Value| std::fs::write(dir.path().join(name), v.to_string()).unwrap();
        write("tokenizer.json", tokenizer);
        write("tokenizer_config.json", json!({"bos_token": "<|bos|>", "eos_token": {"content": "<|eot|>"}}));
        write("generation_config.json", json!({"eos_token_id": [260, 0]}));
        dir
    }

    #[test]
    fn malformed_decoder_is_an_error_not_a_panic() {
        // The `tokenizers` crate panics (`expect("Helper")`) on a syntax error inside `decoder`;
        // found by the `hf_json` fuzz target.
        let dir = byte_level_dir();
        let path = dir.path().join("tokenizer.json");
        let text = std::fs::read_to_string(&path).unwrap();
        let broken = text.replace(r#""decoder":{"#, r#""decoder":{"x" "#);
        assert_ne!(broken, text);
        std::fs::write(&path, broken).unwrap();
        let err = HfTokenizer::load(&path).err().unwrap();
        assert!(matches!(err, TokenizerError::Hf { .. }), "{err}");
    }

    #[test]
    fn byte_level_tokenizer_json() {
        let dir = byte_level_dir();
        let tok = HfTokenizer::load(&dir.path().join("tokenizer.json")).unwrap();
        assert!(tok.byte_level);
        assert_eq!(tok.vocab_size(), 261);
        assert_eq!((tok.bos, tok.add_bos, tok.eos.as_slice()), (Some(259), true, &[0, 260][..]));
        assert!(tok.special.contains(&260) && !tok.special.contains(&258));
        assert_eq!(tok.encode(" the", false, false).unwrap(), [258]);
        assert_eq!(tok.encode(" the", true, false).unwrap(), [259, 258]);
        assert_eq!(tok.encode("<|eot|> the", false, true).unwrap(), [260, 258]);
        assert!(!tok.encode("<|eot|> the", false, false).unwrap().contains(&260));
        assert_eq!(tok.piece(258), b" the");
        assert_eq!(tok.piece(260), b"<|eot|>");
        assert_eq!(tok.piece(0), [0]);
        assert_eq!(tok.piece(0xE2), [0xE2]);
        assert_eq!(tok.decode(&[259, 258], true).unwrap(), " the");
        assert_eq!(tok.decode(&[259, 258], false).unwrap(), "<|bos|> the");
        assert!(matches!(tok.decode(&[261], false), Err(TokenizerError::InvalidId { id: 261, size: 261 })));
    }

    /// A post-processor the `tokenizers` crate would panic on when encoding is refused at load.
    #[test]
    fn undefined_template_tokens_are_refused() {
        let bad = [
            json!({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}],
                   "pair": [], "special_tokens": {"<t>": {"id": "<t>", "ids": [1], "tokens": ["<t>"]}}}),
            json!({"type": "Sequence", "processors": [{"type": "TemplateProcessing",
                   "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}], "pair": [],
                   "special_tokens": {"<s>": {"id": "<s>", "ids": [1, 2], "tokens": ["<s>"]}}}]}),
            json!({"type": "TemplateProcessing", "single": [{"Sequence": {"id": "B", "type_id": 0}}],
                   "pair": [], "special_tokens": {}}),
            // A misspelt type is still read as a template (found by the hf_json fuzz target).
            json!({"type": "TemplateProc[essing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}],
                   "pair": [], "special_tokens": {"<s9": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}),
        ];
        for processor in bad {
            let dir = byte_level_dir();
            let path = dir.path().join("tokenizer.json");
            let mut json: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            json["post_processor"] = processor;
            std::fs::write(&path, json.to_string()).unwrap();
            let err = HfTokenizer::load(&path).err().unwrap().to_string();
            assert!(err.contains("post_processor"), "{err}");
        }
    }

    #[test]
    fn load_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        std::fs::write(&path, "{").unwrap();
        let err = HfTokenizer::load(&path).err().unwrap().to_string();
        assert!(err.starts_with(&path.display().to_string()), "{err}");
        assert!(!err.contains('\n'));
    }
}
